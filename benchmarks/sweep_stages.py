"""Where a sweep run's time goes, the full trace against the census-only trace, in one invocation.

    .venv/bin/python benchmarks/sweep_stages.py [--models attn-only-2x1,block-2] [--seeds 0-3] [--rounds 2] [--jobs 2]
    .venv/bin/python benchmarks/sweep_stages.py --read SWEEP_FOLDER [--jobs 2]

The full trace is the census's path before the census-only trace (`toylens sweep`'s default, with
which docs/results/census-winograd.md was made); the census trace is the path after.

Each round runs, for each trace (`full`: the report's circuit part; `census`: what circuit.json
holds alone; which goes first alternates), a fresh Winograd sweep of the models x seeds on the
local pool (`toylens sweep`'s run_sweep) into a new folder: every run trains and is traced again,
nothing is reused between rounds or traces. It reads each run's stages.json (common.stages, CPU
seconds of the run's worker process) and prints, per model and trace, the mean CPU seconds per run
of each stage and of each measurement in the trace, with 95% t intervals over the runs of every
round; the census / full ratio of a run's CPU seconds (train + trace + write), one ratio per round
(mean with its 95% interval); each sweep's wall seconds and its start-up (its first run's start
less the sweep's: the fork server's imports and the workers' start); and what 200 seeds of each
model would take at the measured CPU per run on `--jobs` cores (the machine's other load aside);
per trace, the CPU seconds of the sweep's driver and of its census stage (run as `toylens sweep`
ends, in the driver) and the whole 200-seed census (train + trace + census) projected from them;
the load average at the start and the end. `--read` prints the split of a sweep already run (the
real 200-seed census, timed with `time`) from its runs' stages.json, running nothing.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

TRACES = ("full", "census")


def one_sweep(out: Path, models: list[str], seeds: list[int], jobs: int, trace: str) -> dict:
    """(model -> list of stages.json records, the sweep's wall seconds, its start-up wall seconds)."""
    from tasks.winograd import WinogradTask
    from toylens.sweeps.driver import run_sweep
    from toylens.sweeps.executors import LocalExecutor
    from toylens.sweeps.job import read_stages
    from toylens.sweeps.plan import Grid, plan_sweep

    runs = plan_sweep(WinogradTask, {}, {}, models, seeds, Grid(), out)
    began, start, cpu = time.time(), time.perf_counter(), time.process_time()
    run_sweep(
        runs,
        out,
        LocalExecutor(jobs=jobs),
        "benchmarks/sweep_stages.py",
        progress=False,
        write=lambda _: None,
        trace=trace,
    )
    wall, driver = time.perf_counter() - start, time.process_time() - cpu
    records = {
        model: [read_stages(run.plan.run_dir) for run in runs if run.plan.model_name == model] for model in models
    }
    first = min(r["began_at"] for rs in records.values() for r in rs)
    return {"records": records, "wall": wall, "startup": first - began, "driver": driver, "census": census(out)}


def census(out: Path) -> dict:
    """The census stage as `toylens sweep` ends with it (toylens.census.census_command, its printout
    dropped): its wall and CPU seconds (it runs in the driver)."""
    import contextlib
    import io

    from toylens.census import census_command

    start, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(io.StringIO()):
        census_command(out)
    return {"wall": time.perf_counter() - start, "cpu": time.process_time() - cpu}


def run_cpu(record: dict) -> float:
    """A run's CPU seconds in its worker: its top-level stages (start-up is the worker's, once)."""
    return sum(v["cpu_s"] for name, v in record["stages"].items() if "/" not in name and name != "startup")


def start_cpu(records: list[dict]) -> float:
    """Mean CPU seconds of start-up and imports over `records` (0 when there are none)."""
    values = [sum(r["stages"].get(n, {"cpu_s": 0.0})["cpu_s"] for n in ("startup", "imports")) for r in records]
    return sum(values) / len(values) if values else 0.0


def stage_lines(model: str, trace: str, records: list[dict]) -> list[str]:
    from common.stats import mean_interval
    from timing import spread  # benchmarks/timing.py, beside this script

    names = sorted({name for r in records for name in r["stages"]}, key=lambda n: (n.split("/")[0], n))
    lines = [f"  {model}, {trace} trace, {len(records)} runs: CPU s per run, mean [95% interval]"]
    for name in names:
        values = [r["stages"].get(name, {"cpu_s": 0.0})["cpu_s"] for r in records]
        indent = "      " * name.count("/")
        lines.append(
            f"    {indent}{name.rsplit('/', 1)[-1]:<28} {spread(mean_interval(values, bounds=(0, float('inf'))))}"
        )
    total = mean_interval([run_cpu(r) for r in records], bounds=(0, float("inf")))
    lines.append(f"    {'run (train + trace + write)':<28} {spread(total)}")
    return lines


def trace_cpu(record: dict) -> float:
    return record["stages"].get("trace", {"cpu_s": 0.0})["cpu_s"]


def ratio_over_rounds(rounds: list[dict], model: str, part):
    """census / full of `part(record)` summed over the model's runs, one ratio per round (Interval)."""
    from common.stats import mean_interval
    from timing import check_measured

    ratios = []
    for index, one in enumerate(rounds):
        full, census = (sum(map(part, one[t]["records"][model])) for t in TRACES)
        check_measured(full, f"{model}'s full-trace runs", index)
        ratios.append(census / full)
    return mean_interval(ratios, bounds=(0, float("inf")))


def report(rounds: list[dict], models: list[str], jobs: int) -> list[str]:
    from timing import spread

    lines = []
    for model in models:
        for trace in TRACES:
            lines += stage_lines(model, trace, [r for one in rounds for r in one[trace]["records"][model]])
        ratio, traced = (ratio_over_rounds(rounds, model, part) for part in (run_cpu, trace_cpu))
        per_run = {t: sum(run_cpu(r) for one in rounds for r in one[t]["records"][model]) for t in TRACES}
        count = sum(len(one["full"]["records"][model]) for one in rounds)
        lines.append(
            f"  {model}: census / full CPU per run {spread(ratio, 'x')}, of the trace alone {spread(traced, 'x')}, "
            f"over {len(rounds)} rounds; 200 seeds on "
            f"{jobs} cores at these CPU rates: full {200 * per_run['full'] / count / jobs / 60:.1f} min, census "
            f"{200 * per_run['census'] / count / jobs / 60:.1f} min"
        )
    lines += whole_census(rounds, sum(len(rs) for rs in rounds[0]["full"]["records"].values()), jobs)
    every = [r for one in rounds for t in TRACES for rs in one[t]["records"].values() for r in rs]
    first = [r for r in every if r["worker_run"] == 1]
    later = [r for r in every if r["worker_run"] > 1]
    lines.append(
        f"  worker processes: {len(every)} runs in {len(first)} workers (each took run after run); start-up + "
        f"imports CPU s: {start_cpu(first):.2f} per first run of a worker, {start_cpu(later):.2f} per later run"
    )
    for index, one in enumerate(rounds):
        walls = ", ".join(f"{t} {one[t]['wall']:.0f} s (start-up {one[t]['startup']:.1f} s)" for t in TRACES)
        lines.append(f"  round {index + 1} sweep wall: {walls}")
    return lines


def whole_census(rounds: list[dict], runs: int, jobs: int, seeds: int = 200) -> list[str]:
    """Per trace: a sweep's CPU seconds outside its runs (the driver, the census stage) and the
    whole census (train + trace + census) of `seeds` runs projected: the runs' CPU
    on `jobs` cores, the driver's and the census's CPU scaled linearly with the runs (an upper bound
    if the census grows more slowly than its runs), the workers' start-up once."""
    lines = []
    for trace in TRACES:
        sweeps = [one[trace] for one in rounds]
        per_run = sum(run_cpu(r) for one in sweeps for rs in one["records"].values() for r in rs) / (runs * len(sweeps))
        driver = sum(one["driver"] for one in sweeps) / len(sweeps)
        counted = sum(one["census"]["cpu"] for one in sweeps) / len(sweeps)
        startup = sum(one["startup"] for one in sweeps) / len(sweeps)
        minutes = (seeds * per_run / jobs + (driver + counted) * seeds / runs + startup) / 60
        lines.append(
            f"  {trace} trace: per sweep of {runs} runs, driver {driver:.1f} CPU s, census stage {counted:.1f} CPU s; "
            f"{seeds} seeds' census (train + trace + census) projected: {minutes:.1f} min wall on {jobs} idle cores"
        )
    return lines


def steps_taken(run_dir: Path) -> int:
    """The training steps a run took (its metrics.json)."""
    from common.store import read_json

    return int(read_json(run_dir / "metrics.json", "run the sweep again")["steps"])


def read_sweep(folder: Path, jobs: int) -> list[str]:
    """The split of a sweep already run (e.g. the 200-seed census, timed by `time`): its runs'
    stages.json, per model, and its runs' CPU on `jobs` cores in minutes."""
    from toylens.sweeps.job import STAGES, read_stages

    records: dict[str, list[dict]] = {}
    paths: dict[str, list[Path]] = {}
    for path in sorted(Path(folder).rglob(STAGES)):
        records.setdefault(path.parent.parent.name, []).append(read_stages(path.parent))
        paths.setdefault(path.parent.parent.name, []).append(path.parent)
    lines = []
    for model, found in sorted(records.items()):
        trace = found[0]["trace"]
        lines += stage_lines(model, trace, found)
        total, steps = sum(run_cpu(r) for r in found), sum(map(steps_taken, paths[model]))
        stepping = sum(r["stages"].get("train/steps", {"cpu_s": 0.0})["cpu_s"] for r in found)
        lines.append(
            f"  {model}: {len(found)} runs, {total:.0f} CPU s in runs: {total / jobs / 60:.1f} min on {jobs} cores; "
            f"{steps / len(found):.0f} training steps per run, {1000 * stepping / max(steps, 1):.1f} ms CPU a step"
        )
    return lines or [f"  no {STAGES} under {folder}: not a sweep folder"]


def main(argv=None) -> None:
    import os

    from common.cli import Parser, positive_int
    from toylens.arguments import model_list, seeds_option

    parser = Parser(prog="benchmarks/sweep_stages.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", default="attn-only-2x1,block-2", help="Winograd models (default attn-only-2x1,block-2)"
    )
    parser.add_argument("--seeds", type=seeds_option, default=[0, 1, 2, 3], help="seeds (default 0-3)")
    parser.add_argument("--rounds", type=positive_int, default=2, help="interleaved rounds (default 2)")
    parser.add_argument("--jobs", type=positive_int, default=2, help="worker processes (default 2)")
    parser.add_argument("--read", type=Path, default=None, help="print the split of this finished sweep folder only")
    args = parser.parse_args(argv)
    if args.read is not None:
        print(f"the sweep in {args.read}, from its runs' stages.json (CPU seconds in their workers)")
        print("\n".join(read_sweep(args.read, args.jobs)))
        return
    models = model_list(args.models)
    print(
        f"Winograd sweeps, {len(args.seeds)} seeds of {', '.join(models)}, {args.jobs} jobs, {args.rounds} rounds; "
        f"load average {os.getloadavg()[0]:.1f} at the start",
        flush=True,
    )
    rounds = []
    with tempfile.TemporaryDirectory(prefix="sweep-stages-") as temp:
        for index in range(args.rounds):
            order = TRACES if index % 2 == 0 else TRACES[::-1]
            rounds.append({t: one_sweep(Path(temp) / f"{index}-{t}", models, args.seeds, args.jobs, t) for t in order})
    print("\n".join(report(rounds, models, args.jobs)))
    print(f"load average {os.getloadavg()[0]:.1f} at the end (2 cores; above 2, other work shared them)")


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(main)  # a UsageError raised anywhere in it: one line, exit 2
