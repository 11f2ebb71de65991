"""Training steps per second: toylens (the exact step `tasks.training.train` runs) vs the same
architecture in plain PyTorch, at equal shapes, measured in the same process, interleaved.

    .venv/bin/python benchmarks/train_speed.py [--steps 150] [--rounds 3]

Prints steps/s for both and the ratio toylens / plain per shape (target >= 0.9).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

from plain_gpt import PlainGPT  # noqa: E402

from models import ModelSpec, build_model  # noqa: E402
from models.bridge import hook_free_forward  # noqa: E402
from tasks.training import lm_loss  # noqa: E402

SHAPES = {
    "1 block, 4 heads, 17 tokens": ModelSpec(n_layers=1, d_vocab=40, n_ctx=17),
    "2 blocks, 4 heads, 17 tokens": ModelSpec(n_layers=2, d_vocab=40, n_ctx=17),
    "2-layer attn-only, 4 heads, 61 tokens": ModelSpec(n_layers=2, mlp=False, norm=None, d_vocab=70, n_ctx=61),
}


def steps_per_second(forward, parameters, spec: ModelSpec, steps: int, batch: int = 64) -> float:
    # foreach=True as in tasks.training, for both: the comparison is of the models, not the optimizers.
    optimizer = torch.optim.AdamW([p for p in parameters if p.requires_grad], lr=1e-3, weight_decay=0.01,
                                  foreach=True)
    tokens = torch.randint(spec.d_vocab, (batch, spec.n_ctx + 1), generator=torch.Generator().manual_seed(0))
    lengths = torch.full((batch,), spec.n_ctx + 1)

    def step():
        loss = lm_loss(forward(tokens[:, :-1]), tokens, lengths)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for _ in range(10):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repeats; the best of each is kept")
    args = parser.parse_args()
    torch.set_num_threads(1)  # what training uses (toylens.workers.in_one_thread)
    print(f"{'shape':<40} {'toylens':>9} {'plain':>9} {'ratio':>6}")
    for name, spec in SHAPES.items():
        ours, plain = build_model(spec), PlainGPT(spec)
        ours.train(), plain.train()
        best = {"toylens": 0.0, "plain": 0.0}
        for _ in range(args.rounds):
            best["toylens"] = max(best["toylens"], steps_per_second(hook_free_forward(ours), ours.parameters(),
                                                                    spec, args.steps))
            best["plain"] = max(best["plain"], steps_per_second(plain, plain.parameters(), spec, args.steps))
        print(f"{name:<40} {best['toylens']:>9.1f} {best['plain']:>9.1f} {best['toylens'] / best['plain']:>6.2f}")


if __name__ == "__main__":
    main()
