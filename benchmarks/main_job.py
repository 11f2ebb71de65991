"""Wall-clock of the README's main job (`python -m tasks.winograd train --report`: default Winograd
family, 3 seeds, parallel runs with the stopping rule, then the circuit report, traced in the same
worker processes) vs the source's recipe for the same models (a fixed 3000 steps per run, one run at
a time, torch's default threads), measured in the same invocation. Also times the circuit report on
its own (`python -m probes.circuit report`, a fresh start-up) on the same runs.

    .venv/bin/python benchmarks/main_job.py [--baseline-seeds 1]

The baseline trains `--baseline-seeds` seeds per model and scales its time to 3 seeds (the printout
says so); pass --baseline-seeds 3 for the full recipe (~25 minutes on 2 cores). Held-out accuracies
of both are printed side by side so a faster run with a different conclusion cannot pass unseen.

Not on benchmarks/timing.py's rounds: every command runs once, in a fresh process on a fresh
folder (nothing reused from an earlier command but the generated-data cache, which both sides
read), and takes minutes, so there is one round and no spread; the times are wall seconds of
child processes, slowed alike by the machine's other load.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

SEEDS = 3


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def heldout_by_model(runs_dir: Path) -> dict[str, float]:
    from probes.accuracy import compare_runs

    return {m.model_name: m.heldout.value for m in compare_runs(runs_dir)}


def train_baseline(out: Path, seeds: int) -> None:
    from toylens.family import execute, plan_family
    from tasks.settings import TrainSettings
    from tasks.winograd import WinogradTask

    # Neither stopping rule can fire: accuracy never reaches 2, and no plateau outlasts the budget.
    fixed = TrainSettings(max_steps=3000, stop_accuracy=2.0, plateau_steps=3001)
    for plan in plan_family(WinogradTask(), None, list(range(seeds)), fixed, out):
        execute(plan, progress=False)  # in this process: one run at a time, torch's default threads


def main() -> None:
    from common.cli import Parser  # argparse's errors on one line, as every toylens command's

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-seeds", type=int, default=1, choices=range(1, SEEDS + 1))
    args = parser.parse_args()
    python = sys.executable
    with tempfile.TemporaryDirectory() as temp:
        ours, baseline = Path(temp) / "ours", Path(temp) / "baseline"
        ours_seconds = timed([python, "-m", "tasks.winograd", "train", "--no-progress", "--out", str(ours), "--report"])
        report_seconds = timed([python, "-m", "probes.circuit", "report", str(ours), "--out", str(ours / "again")])
        start = time.perf_counter()
        train_baseline(baseline, args.baseline_seeds)
        baseline_seconds = (time.perf_counter() - start) * SEEDS / args.baseline_seeds
        ours_accuracy, baseline_accuracy = heldout_by_model(ours), heldout_by_model(baseline)
    scaled = "" if args.baseline_seeds == SEEDS else f" (measured on {args.baseline_seeds} seed(s), scaled to {SEEDS})"
    print(f"main job (train --report): {ours_seconds:.0f} s (target <= 120 s)")
    print(f"circuit report alone (python -m probes.circuit report): {report_seconds:.0f} s")
    print(f"source recipe, 3000 fixed steps: training {baseline_seconds:.0f} s{scaled}")
    print(
        f"main job (training and report) vs the recipe's training alone: {baseline_seconds / ours_seconds:.1f}x faster"
    )
    print("held-out accuracy, main job vs recipe:")
    for name, value in ours_accuracy.items():
        print(f"  {name:<16} {value:7.1%}  {baseline_accuracy.get(name, float('nan')):7.1%}")


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(main)  # a UsageError raised anywhere in it: one line, exit 2
