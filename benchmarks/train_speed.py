"""Training steps per second: toylens (the exact step `tasks.training.loop.train` runs) vs the same
architecture in plain PyTorch, at equal shapes, measured in the same process, interleaved.

    .venv/bin/python benchmarks/train_speed.py [--rounds 10] [--seconds 1.0] [--same-optimizer] [--docs PAGE]

Each side steps as it would train: toylens with its AdamW over one flat buffer
(`tasks.training.optimizer.FlatAdamW`, bitwise torch's update), plain PyTorch with
`torch.optim.AdamW(foreach=True)`. With --same-optimizer both use the latter, which compares the
models alone.

Each round times both sides back to back (which goes first alternates), so both see the same load
on a shared machine, in CPU seconds of this one-thread process; the ratio toylens / plain is taken per round and printed as its mean with a
95% t interval over the rounds (target >= 1.0).
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from plain_gpt import PlainGPT
from tracr_table import write_docs

from common.cli import Parser, out_path, positive_int

from models import ModelSpec, build_model
from models.fused import training_forward
from tasks.training.loop import lm_loss
from tasks.training.optimizer import FlatAdamW

SHAPES = {
    "1 block, 4 heads, 17 tokens": ModelSpec(n_layers=1, d_vocab=40, n_ctx=17),
    "2 blocks, 4 heads, 17 tokens": ModelSpec(n_layers=2, d_vocab=40, n_ctx=17),
    "2-layer attn-only, 4 heads, 61 tokens": ModelSpec(n_layers=2, mlp=False, norm=None, d_vocab=70, n_ctx=61),
    "2-layer attn-only, 4 heads, 256 tokens": ModelSpec(n_layers=2, mlp=False, norm=None, d_vocab=70, n_ctx=256),
}
BATCH = 64


class Stepper:
    """One side of the comparison: a forward and its AdamW, stepping on fixed random tokens."""

    def __init__(self, forward, parameters, spec: ModelSpec, flat: bool):
        self.forward = forward
        trainable = [p for p in parameters if p.requires_grad]
        self.optimizer = (
            FlatAdamW(trainable, lr=1e-3, weight_decay=0.01)
            if flat
            else torch.optim.AdamW(trainable, lr=1e-3, weight_decay=0.01, foreach=True)
        )
        self.tokens = torch.randint(spec.d_vocab, (BATCH, spec.n_ctx + 1), generator=torch.Generator().manual_seed(0))
        self.lengths = torch.full((BATCH,), spec.n_ctx + 1)

    def step(self) -> None:
        loss = lm_loss(self.forward(self.tokens[:, :-1]), self.tokens, self.lengths)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()

    def steps(self, steps: int) -> None:
        for _ in range(steps):
            self.step()

    def rate(self, steps: int) -> float:
        """Steps per CPU second of this process (see benchmarks/timing.py: wall time on a shared
        machine mostly measures the wait for a core)."""
        start = time.process_time()
        self.steps(steps)
        return steps / (time.process_time() - start)


def compare(spec: ModelSpec, rounds: int, seconds: float, same_optimizer: bool):
    """(toylens steps/s, plain steps/s, their ratio's Interval): benchmarks/timing.py's interleaved
    rounds of the same number of steps on each side. Every step is new work (the model trains on),
    so nothing a round computes is reused by the next; what each round reuses is the model, its
    optimizer and the fixed tokens, built once."""
    from timing import interleaved_ratio  # benchmarks/timing.py, beside this script

    ours, plain = build_model(spec), PlainGPT(spec)
    forward = training_forward(ours)
    forward.train(), plain.train()
    sides = [
        Stepper(forward, ours.parameters(), spec, flat=not same_optimizer),
        Stepper(plain, plain.parameters(), spec, flat=False),
    ]
    for side in sides:  # warm-up, and the step count that takes about `seconds`
        side.rate(3)
    steps = max(3, math.ceil(seconds * sides[1].rate(3)))
    ratio, _, _, seconds = interleaved_ratio(
        lambda: sides[0].steps(steps), lambda: sides[1].steps(steps), rounds, ("toylens", "plain PyTorch")
    )
    return steps / seconds[0].value, steps / seconds[1].value, ratio


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive_int, default=10, help="interleaved repeats of each pair")
    parser.add_argument(
        "--seconds", type=float, default=1.0, help="about how many CPU seconds each side steps per round"
    )
    parser.add_argument(
        "--same-optimizer", action="store_true", help="both sides step torch's AdamW(foreach=True): the models alone"
    )
    parser.add_argument(
        "--docs",
        type=out_path,
        help="also write the table into this page's marked block "
        "(<!-- train_speed.py --> or, with --same-optimizer, <!-- train_speed.py --same-optimizer -->)",
    )
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be at least 2 (an interval needs two rounds)")
    if args.seconds <= 0:
        parser.error("--seconds must be a positive number of CPU seconds")
    torch.set_num_threads(1)  # what training uses (toylens.workers.in_one_thread)
    optimizers = (
        "both torch's AdamW(foreach=True)"
        if args.same_optimizer
        else "toylens FlatAdamW, plain torch's AdamW(foreach=True)"
    )
    load = os.getloadavg()[0]
    lines = [
        f"{args.rounds} interleaved rounds per shape, batch {BATCH}, {optimizers}, ~{args.seconds:g} CPU s per "
        f"side per round, load average {load:.1f} at the start; steps per CPU second over the rounds' mean CPU s; "
        "the ratio is the mean of the per-round ratios with its 95% t interval.",
        "",
        "| shape | toylens steps/s | plain steps/s | toylens / plain [95% interval] |",
        "|---|---|---|---|",
    ]
    print(lines[0])
    for name, spec in SHAPES.items():
        ours, plain, ratio = compare(spec, args.rounds, args.seconds, args.same_optimizer)
        lines.append(f"| {name} | {ours:.1f} | {plain:.1f} | {ratio.value:.2f} [{ratio.low:.2f}, {ratio.high:.2f}] |")
        print(lines[-1], flush=True)
    if args.docs:
        write_docs(parser, args.docs, "train_speed.py" + (" --same-optimizer" if args.same_optimizer else ""), lines)


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(main)  # a UsageError raised anywhere in it: one line, exit 2
