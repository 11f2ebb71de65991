"""Stacked seeds vs one seed at a time: CPU seconds per seed-step of the steps training takes.

    .venv/bin/python benchmarks/stacked_speed.py [--seeds 8] [--steps 4] [--rounds 3] [--batches 64,8]

For each Winograd model (attn-only-2x1, block-2; default data and settings) and batch size, each
round builds fresh models of `--seeds` seeds (untimed, with one untimed step: the first call's
set-up) and times `--steps` steps of all of them: one seed at a time (`tasks.training.loop.update`,
what `train` runs) and stacked (`tasks.training.stacked.stacked_update`), back to back with the
order alternating (benchmarks/timing.py's interleaved, cold rule) in this one-thread process's CPU
seconds. Prints each side's per seed-step milliseconds and the speed-up one-seed / stacked (above 1:
stacking is faster) as the mean with a 95% t interval over the rounds, and the machine's load
average before and after (a shared machine's load changes CPU time too).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from timing import cold, interleaved_ratio, spread

from common.cli import Parser, positive_int

MODELS = ("attn-only-2x1", "block-2")


def fresh_runs(task, name: str, seeds: int, batch_size: int) -> list:
    """`seeds` runs of `name` as `train` starts them (seed 0's data for all: the shapes are equal),
    each after one untimed step."""
    from models import build_model
    from tasks.data import task_dataset, to_batch
    from tasks.settings import model_settings
    from tasks.training.loop import start_training, update
    from toylens.family import sized_spec

    settings = model_settings(task, name, {"batch_size": batch_size})
    batches = {k: to_batch(v) for k, v in task_dataset(task, 0).items()}
    spec = sized_spec(task.default_models()[name], task, batches, 0, batch_size)
    runs = [
        start_training(
            build_model(spec, seed=s), batches["train"], batches["validation"], settings, s, None, None, False, ""
        )
        for s in range(seeds)
    ]
    for run in runs:
        run.forward.train()
        update(run, 1)
    return runs


def fresh_stack(task, name: str, seeds: int, batch_size: int):
    from tasks.training.stacked import stack_runs, stacked_update

    stack = stack_runs(fresh_runs(task, name, seeds, batch_size), list(range(seeds)))
    stacked_update(stack, 1)
    return stack


def main(argv: list[str] | None = None) -> None:
    import torch

    from tasks.registry import build_task, get_task_class
    from tasks.training.loop import update
    from tasks.training.stacked import stacked_update

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=positive_int, default=8)
    parser.add_argument("--steps", type=positive_int, default=4)
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--batches", default="64,8", help="batch sizes, comma-separated (64: the task's)")
    args = parser.parse_args(argv)
    batch_sizes = [positive_int(b) for b in args.batches.split(",")]
    torch.set_num_threads(1)
    task = build_task(get_task_class("winograd"), {})
    print(
        f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.seeds} seeds, {args.steps} steps"
    )
    print("| model | batch | one seed ms/seed-step | stacked ms/seed-step | one seed / stacked |")
    print("|---|---|---|---|---|")
    per = args.seeds * args.steps / 1e3  # CPU seconds -> milliseconds per seed-step
    for name in MODELS:
        for batch in batch_sizes:

            def one_seed(runs):
                for step in range(2, args.steps + 2):
                    for run in runs:
                        update(run, step)

            def stacked(stack):
                for step in range(2, args.steps + 2):
                    stacked_update(stack, step)

            ratio, _, _, (ours, theirs) = interleaved_ratio(
                cold(stacked, lambda: fresh_stack(task, name, args.seeds, batch)),
                cold(one_seed, lambda: fresh_runs(task, name, args.seeds, batch)),
                args.rounds,
                ("stacked", "one seed at a time"),
            )
            print(f"| {name} | {batch} | {theirs.value / per:.2f} | {ours.value / per:.2f} | {spread(ratio, 'x')} |")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(main)
