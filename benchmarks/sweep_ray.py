"""Sweep throughput on Ray vs the local process pool, on the same cores, in one invocation; and
Ray's start-up time.

    .venv/bin/python benchmarks/sweep_ray.py [--runs 8] [--cpus 2] [--steps 300]

Both executors run the same sweep (Winograd attn-only-2x1, seeds 0..N-1 for --runs N, each run trained and
traced in its worker, the driver writing the files) into fresh folders, `--cpus` runs at a time:
the local pool in `--cpus` spawned processes, Ray as a fresh local instance with `--cpus` CPUs. The
wall time of each includes its own start-up (process spawns and imports; for Ray also `ray.init`,
printed apart). The task's data is generated before either is timed. Both must give bitwise the
same weights, or the numbers are not compared.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path


def timed_sweep(executor, out: Path, args) -> tuple[float, object]:
    from tasks.winograd import WinogradTask
    from toylens.sweeps.plan import Grid, plan_sweep
    from toylens.sweeps.driver import run_sweep

    runs = plan_sweep(
        WinogradTask, {}, {"max_steps": args.steps}, ["attn-only-2x1"], list(range(args.runs)), Grid(), out
    )
    start = time.perf_counter()
    outcome = run_sweep(runs, out, executor, "benchmarks/sweep_ray.py", progress=False, write=lambda line: None)
    return time.perf_counter() - start, outcome


def main() -> None:
    from common.cli import Parser  # argparse's errors on one line, as every toylens command's

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="runs in the sweep: seeds 0..N-1 (a count, so not --seeds)")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300, help="step budget per run (default 300)")
    args = parser.parse_args()

    from tasks.data import task_dataset
    from tasks.winograd import WinogradTask
    from toylens.sweeps.executors import LocalExecutor, RayExecutor

    for seed in range(args.runs):
        task_dataset(WinogradTask(), seed)
    with tempfile.TemporaryDirectory() as temp:
        local_s, local = timed_sweep(LocalExecutor(jobs=args.cpus), Path(temp) / "local", args)
        ray_executor = RayExecutor(cpus=args.cpus)
        ray_s, on_ray = timed_sweep(ray_executor, Path(temp) / "ray", args)
        same = all(
            (Path(temp) / "local" / p.relative_to(Path(temp) / "ray")).read_bytes() == p.read_bytes()
            for p in (Path(temp) / "ray").rglob("model.safetensors")
        )
    assert local.done == on_ray.done == args.runs and same, "the executors disagree; numbers not compared"
    print(
        f"sweep: Winograd attn-only-2x1, {args.runs} runs (<= {args.steps} steps, trained and traced), "
        f"{args.cpus} at a time; weights bitwise equal on both: {same}"
    )
    print(
        f"local pool: {local_s:6.1f} s  {60 * args.runs / local_s:5.2f} runs/min  "
        f"({local.worker_seconds / args.runs:.1f} s per run in its worker)"
    )
    print(
        f"Ray:        {ray_s:6.1f} s  {60 * args.runs / ray_s:5.2f} runs/min  "
        f"({on_ray.worker_seconds / args.runs:.1f} s per run in its worker; ray.init {ray_executor.startup_seconds:.1f} s)"
    )
    print(f"Ray throughput / local pool throughput: {local_s / ray_s:.2f} (target >= 0.90, i.e. overhead < 10%)")


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(main)  # a UsageError raised anywhere in it: one line, exit 2
