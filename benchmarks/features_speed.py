"""Training a dictionary on one main-job run against training that run: trains one Winograd run
(`tasks.winograd train`, one model, one seed, one job) and times it, then trains and grades every
dictionary of a one-size, one-k grid on it (`probes.features.measure.run_grades`: its activations
collected, a TopK SAE on the last residual stream and a transcoder over each MLP) and prints both
wall times and their ratio. The issue's target: under 60 s per dictionary on 2 cores.

Not on benchmarks/timing.py's rounds: each side is minutes of cold work done once, in a fresh
temporary folder (the run trained in a new process, its dictionaries trained from scratch), so no
side reuses anything an earlier one computed; one round gives no spread, and the times are wall
seconds (the run trains in its own process), so a loaded machine makes both slower."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv=None) -> None:
    from common.cli import Parser, positive_int  # argparse's errors on one line, as every toylens command's

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="block-2", help="the Winograd model to train (default block-2)")
    parser.add_argument("--size", type=positive_int, default=64, help="dictionary size (default 64)")
    parser.add_argument("--k", type=positive_int, default=4, help="active features per position (default 4)")
    parser.add_argument("--steps", type=positive_int, default=600, help="steps per dictionary (default 600)")
    args = parser.parse_args(argv)
    import torch

    from probes.features.activations import default_sites
    from probes.features.measure import Grid, run_grades
    from tasks.training.runs import find_runs

    torch.set_num_threads(1)  # as `toylens features` by default
    with tempfile.TemporaryDirectory() as temp:
        runs_dir = Path(temp) / "runs"
        command = [sys.executable, "-m", "tasks.winograd", "train", "--models", args.model, "--seeds", "0-0"]
        start = time.perf_counter()
        subprocess.run(
            [*command, "--jobs", "1", "--no-progress", "--out", str(runs_dir)], check=True, stdout=subprocess.DEVNULL
        )
        train_s = time.perf_counter() - start
        (run,) = find_runs(runs_dir)
        grid = Grid(tuple(default_sites(run.spec.n_layers, run.spec.mlp)), (args.size,), (args.k,), args.steps)
        start = time.perf_counter()
        grades = run_grades(run, grid, Path(temp) / "features", progress=False)
        features_s = time.perf_counter() - start
    each = features_s / len(grades)
    print(f"{args.model} seed 0: training the run (its own process, start-up included) {train_s:.1f} s")
    print(
        f"{len(grades)} dictionaries (size {args.size}, k {args.k}, {args.steps} steps), collected, trained and "
        f"graded: {features_s:.1f} s, {each:.1f} s each (target < 60 s each)"
    )
    print(f"ratio, one dictionary / training the run: {each / train_s:.2f}")


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(main)
