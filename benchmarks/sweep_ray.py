"""Sweep throughput on Ray vs the local process pool, on the same cores, in one invocation; and
Ray's start-up time.

    .venv/bin/python benchmarks/sweep_ray.py [--runs 8] [--cpus 2] [--steps 300] [--tasks 200]

Both executors run the same sweep (Winograd attn-only-2x1, seeds 0..N-1 for --runs N, each run trained and
traced in its worker, the driver writing the files) into fresh folders, `--cpus` runs at a time:
the local pool in `--cpus` spawned processes, Ray as a fresh local instance with `--cpus` CPUs. The
wall time of each includes its own start-up (process spawns and imports; for Ray also `ray.init`,
printed apart). The task's data is generated before either is timed. Both must give bitwise the
same weights, or the numbers are not compared. The sweeps are minutes of cold work (fresh
folders, new worker processes), run once each: wall seconds, one round, no spread.

Then what a Ray task costs beside its work (what toylens.sweeps.batches saves): `--tasks` jobs
that do nothing, sent one per task and then in batches of MOST_PER_BATCH, alternating over 3
rounds on one local instance whose workers are already started: the wall milliseconds per job,
mean with its 95% t interval. Sweeps and Ray tasks run in other processes, so these are wall seconds of work
done afresh each time (new folders, new tasks), not timing.py's in-process CPU seconds; the
load average is printed beside them.
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


def task_overhead(cpus: int, jobs: int, rounds: int = 3) -> dict:
    """Batch size -> the Interval of wall milliseconds per job of `jobs` empty jobs, over `rounds`
    on one local instance whose workers an untimed first pass started (a task's own cost, not the
    workers' start-up)."""
    import logging

    import ray

    from common.stats import mean_interval
    from toylens.sweeps.batches import MOST_PER_BATCH
    from toylens.sweeps.executors import RayExecutor

    ms: dict[int, list[float]] = {1: [], MOST_PER_BATCH: []}
    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        for round_ in range(-1, rounds):  # round -1 starts the workers, untimed
            for size in sorted(ms, reverse=round_ % 2 == 1):
                done: list = []
                start = time.perf_counter()
                # abs: a builtin, which Ray's workers import by name (they cannot import this script)
                RayExecutor(batch=size).run_tasks(
                    ray, abs, list(range(jobs)), lambda item, outcome: done.append(outcome.result), list(range(jobs))
                )
                assert sorted(done) == list(range(jobs)), "a job's result was lost; numbers not compared"
                if round_ >= 0:
                    ms[size].append((time.perf_counter() - start) / jobs * 1000)
    finally:
        ray.shutdown()
    return {size: mean_interval(values, bounds=(0.0, float("inf"))) for size, values in ms.items()}


def main() -> None:
    from common.cli import Parser  # argparse's errors on one line, as every toylens command's

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8, help="runs in the sweep: seeds 0..N-1 (a count, so not --seeds)")
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300, help="step budget per run (default 300)")
    parser.add_argument("--tasks", type=int, default=200, help="empty jobs timing a Ray task's cost (default 200)")
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
    import os

    from timing import spread  # benchmarks/timing.py, beside this script

    overhead = task_overhead(args.cpus, args.tasks)
    print(
        f"a Ray task's cost beside its work ({args.tasks} empty jobs, {args.cpus} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}), wall ms per job: "
        + ", ".join(f"{size} per task {spread(interval)}" for size, interval in overhead.items())
    )


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(main)  # a UsageError raised anywhere in it: one line, exit 2
