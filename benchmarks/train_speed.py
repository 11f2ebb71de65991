"""Training steps per second: toylens (the exact step `tasks.training.loop.train` runs) vs the same
architecture in plain PyTorch, at equal shapes, measured in the same process, interleaved.

    .venv/bin/python benchmarks/train_speed.py [--rounds 10] [--seconds 1.0]

Each round times both sides back to back (which goes first alternates), so both see the same load
on a shared machine, in CPU seconds of this one-thread process; the ratio toylens / plain is taken per round and printed as its mean with a
95% t interval over the rounds (target >= 1.0).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from plain_gpt import PlainGPT  # noqa: E402

from common.stats import mean_interval  # noqa: E402
from models import ModelSpec, build_model  # noqa: E402
from models.fused import training_forward  # noqa: E402
from tasks.training.loop import lm_loss  # noqa: E402

SHAPES = {
    "1 block, 4 heads, 17 tokens": ModelSpec(n_layers=1, d_vocab=40, n_ctx=17),
    "2 blocks, 4 heads, 17 tokens": ModelSpec(n_layers=2, d_vocab=40, n_ctx=17),
    "2-layer attn-only, 4 heads, 61 tokens": ModelSpec(n_layers=2, mlp=False, norm=None, d_vocab=70, n_ctx=61),
    "2-layer attn-only, 4 heads, 256 tokens": ModelSpec(n_layers=2, mlp=False, norm=None, d_vocab=70, n_ctx=256),
}
BATCH = 64


class Stepper:
    """One side of the comparison: a forward and its AdamW, stepping on fixed random tokens."""

    def __init__(self, forward, parameters, spec: ModelSpec):
        # foreach=True as in tasks.training.loop, for both: the comparison is of the models, not the optimizers.
        self.forward = forward
        self.optimizer = torch.optim.AdamW([p for p in parameters if p.requires_grad], lr=1e-3,
                                           weight_decay=0.01, foreach=True)
        self.tokens = torch.randint(spec.d_vocab, (BATCH, spec.n_ctx + 1), generator=torch.Generator().manual_seed(0))
        self.lengths = torch.full((BATCH,), spec.n_ctx + 1)

    def step(self) -> None:
        loss = lm_loss(self.forward(self.tokens[:, :-1]), self.tokens, self.lengths)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def rate(self, steps: int) -> float:
        """Steps per CPU second of this process (see benchmarks/timing.py: wall time on a shared
        machine mostly measures the wait for a core)."""
        start = time.process_time()
        for _ in range(steps):
            self.step()
        return steps / (time.process_time() - start)


def compare(spec: ModelSpec, rounds: int, seconds: float):
    """(toylens steps/s per round, plain steps/s per round, ratio Interval)."""
    ours, plain = build_model(spec), PlainGPT(spec)
    forward = training_forward(ours)
    forward.train(), plain.train()
    sides = [Stepper(forward, ours.parameters(), spec), Stepper(plain, plain.parameters(), spec)]
    for side in sides:   # warm-up, and the step count that takes about `seconds`
        side.rate(3)
    steps = max(3, math.ceil(seconds * sides[1].rate(3)))
    rates = {0: [], 1: []}
    for round_ in range(rounds):
        for index in ((0, 1) if round_ % 2 == 0 else (1, 0)):
            rates[index].append(sides[index].rate(steps))
    ratios = [a / b for a, b in zip(rates[0], rates[1])]
    return rates[0], rates[1], mean_interval(ratios, bounds=(0.0, math.inf))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="interleaved repeats of each pair")
    parser.add_argument("--seconds", type=float, default=1.0, help="about how many CPU seconds each side steps per round")
    args = parser.parse_args()
    torch.set_num_threads(1)  # what training uses (toylens.workers.in_one_thread)
    print(f"{args.rounds} interleaved rounds per shape, batch {BATCH}; steps per CPU second, medians over the "
          "rounds; the ratio is the mean of the per-round ratios with its 95% t interval")
    print(f"{'shape':<40} {'toylens':>9} {'plain':>9} {'ratio':>6}  95% interval")
    for name, spec in SHAPES.items():
        ours, plain, ratio = compare(spec, args.rounds, args.seconds)
        print(f"{name:<40} {median(ours):>9.1f} {median(plain):>9.1f} {ratio.value:>6.2f}  "
              f"[{ratio.low:.2f}, {ratio.high:.2f}]", flush=True)


def median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


if __name__ == "__main__":
    main()
