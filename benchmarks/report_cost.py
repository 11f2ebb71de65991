"""What the circuit report costs, part by part, on a folder of trained runs.

    .venv/bin/python benchmarks/report_cost.py RUNS_DIR [--steps] [--no-whole]

Measures every run here, one after another in this process and one torch thread (as each report
worker does): the run's shared context (model load, splits, accuracy, the reference rows), then
each report part's measure (probes.report.measure.parts), then each part's rendering, report.md
and report.json, report.html and the MIB exports. Each step's CPU time is `time.process_time`
(this process only; on a loaded machine wall time mostly measures the wait for a core), with the
wall time beside it. `--steps` adds the costliest steps inside the parts (nested in their part's
time, so not added to the total). Then, unless `--no-whole`, the whole report as users run it
(`python -m probes.circuit report RUNS_DIR`, its default workers) in a child process: its user
and system CPU seconds, children included, as /usr/bin/time counts them. The table's shares are
of that whole; the row "rest" is the whole minus the steps timed here (the processes' start-up and
imports, the workers' pickling), so it moves with the load like every row.

Nothing is written into RUNS_DIR: the figures and reports go to a temporary folder.
"""

from __future__ import annotations

import contextlib
import importlib
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# The costliest steps inside the parts (module, function), timed with --steps. A function a part
# imports at its module's top is wrapped there too (every module that imported it by name).
STEPS = (
    ("probes.circuits.search", "search_circuit"),
    ("probes.circuits.path_patching", "path_sweep"),
    ("probes.circuits.path_patching", "path_patch_many"),
    ("probes.patching", "activation_patching"),
    ("probes.ablation_sweep", "head_ablation_sweep"),
    ("probes.composition", "composition_scores"),
    ("probes.circuits.named", "edge_circuit"),
    ("probes.circuits.redundancy", "circuit_structure"),
    ("probes.circuits.positional", "positional_circuit"),
    ("probes.circuits.logic", "logic"),
    ("probes.circuits.timeline", "circuit_timeline"),
    ("probes.dynamics", "run_dynamics"),
    ("probes.report.figures", "save"),
)


@dataclass
class Costs:
    """Seconds per step: CPU and wall totals, and the costliest run's CPU seconds."""

    cpu: dict = field(default_factory=lambda: defaultdict(float))
    wall: dict = field(default_factory=lambda: defaultdict(float))
    worst: dict = field(default_factory=dict)  # step -> (cpu seconds, run)
    nested: set = field(default_factory=set)  # steps inside another step's time

    def add(self, step: str, cpu: float, wall: float, run: str) -> None:
        self.cpu[step] += cpu
        self.wall[step] += wall
        if cpu > self.worst.get(step, (-1.0, ""))[0]:
            self.worst[step] = (cpu, run)


@contextlib.contextmanager
def timed(costs: Costs, step: str, run: str = "all runs"):
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        yield
    finally:
        costs.add(step, time.process_time() - cpu, time.perf_counter() - wall, run)


def each_timed(costs: Costs, prefix: str, pairs, run: str = "all runs") -> dict:
    """Drain a generator of (key, value), timing the computation of each value as `prefix key`."""
    out, pairs = {}, iter(pairs)
    while True:
        cpu, wall = time.process_time(), time.perf_counter()
        item = next(pairs, None)
        if item is None:
            return out
        key, value = item
        costs.add(f"{prefix}{key}", time.process_time() - cpu, time.perf_counter() - wall, run)
        out[key] = value


@contextlib.contextmanager
def steps_timed(costs: Costs, current: list):
    """Wrap the functions of STEPS so each call adds its time under `step: function` (for the run
    named in current[0]); the originals come back afterwards."""
    originals = []
    for module_name, name in STEPS:
        module = importlib.import_module(module_name)
        function = getattr(module, name)

        def wrapper(*args, _function=function, _step=f"in parts: {name}", **kwargs):
            with timed(costs, _step, current[0]):
                return _function(*args, **kwargs)

        costs.nested.add(f"in parts: {name}")
        holders = [m for m in list(sys.modules.values()) if getattr(m, name, None) is function]
        for holder in holders:
            originals.append((holder, name, function))
            setattr(holder, name, wrapper)
    try:
        yield
    finally:
        for holder, name, function in originals:
            setattr(holder, name, function)


def measure_timed(run, out: Path, costs: Costs):
    """The run's MeasuredRun, each shared context property and each part's measure timed."""
    from probes.report.measure import measure_each
    from probes.report.parts import MeasuredRun, RunContext

    where = f"{run.model_name} seed {run.seed}"
    context = RunContext(run, out)
    for name in ("model", "batches", "accuracy", "reference"):
        with timed(costs, f"context: {name}", where):
            getattr(context, name)
    return MeasuredRun(run.model_name, run.seed, each_timed(costs, "measure: ", measure_each(context), where))


def publish_all(measured: list, out: Path, task: str, costs: Costs) -> None:
    """The publish step (toylens.report.publish_report's writing), each piece timed."""
    from probes.report.document import write_report
    from probes.report.measure import render_each
    from probes.report.outputs.exports import write_report_mib
    from probes.report.outputs.html import write_html
    from probes.settings import DEFAULT

    rendered = each_timed(costs, "render: ", render_each(measured, out, DEFAULT))
    sections = {key: section for key, section in rendered.items() if section is not None}
    with timed(costs, "write: report.md + report.json"):
        write_report(measured, sections, out, task, DEFAULT)
    with timed(costs, "write: report.html"):
        write_html(measured, sections, out, task, DEFAULT)
    with timed(costs, "write: MIB exports"):
        write_report_mib(measured, out, DEFAULT)


def whole_report(runs_dir: Path, out: Path) -> tuple[float, float, float]:
    """(user CPU s, system CPU s, wall s) of `python -m probes.circuit report` in a child process."""
    before, wall = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "probes.circuit", "report", str(runs_dir), "--out", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime, time.perf_counter() - wall


def table(costs: Costs, whole: float | None) -> str:
    measured = sum(cpu for step, cpu in costs.cpu.items() if step not in costs.nested)
    reference = whole if whole is not None else measured
    # The steps inside the parts after the steps themselves, the costliest first.
    steps = [s for s in costs.cpu if s not in costs.nested] + sorted(
        costs.nested & set(costs.cpu), key=lambda s: -costs.cpu[s]
    )
    rows = [(step, costs.cpu[step], costs.wall[step], *costs.worst[step]) for step in steps]
    lines = ["| step | CPU s | wall s | share of the report | costliest run (CPU s) |", "|---|---|---|---|---|"]
    lines += [
        f"| {step} | {cpu:.2f} | {wall:.2f} | {cpu / reference:.1%} | {run} ({worst:.2f}) |"
        for step, cpu, wall, worst, run in rows
    ]
    lines.append(
        f"| all steps timed here | {measured:.2f} | {sum(costs.wall[s] for s in costs.wall if s not in costs.nested):.2f} "
        f"| {measured / reference:.1%} | |"
    )
    if whole is not None:
        lines.append(
            f"| rest (start-up, imports, workers; the whole minus the steps) | {whole - measured:.2f} | | "
            f"{(whole - measured) / whole:.1%} | |"
        )
    return "\n".join(lines)


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def report_cost(runs_dir: Path, steps: bool = False, whole: bool = True) -> str:
    import torch

    from probes.accuracy import family_order
    from tasks.training.runs import find_runs

    torch.set_num_threads(1)  # as each report worker runs (toylens.workers.in_one_thread)
    runs = find_runs(runs_dir)
    order = family_order(runs)
    runs = sorted(runs, key=lambda run: (order.index(run.model_name), run.seed))
    costs, current = Costs(), ["all runs"]
    started = load_average()
    with tempfile.TemporaryDirectory(prefix="report-cost-") as folder:
        out = Path(folder) / "report"
        (out / "figures").mkdir(parents=True)
        with steps_timed(costs, current) if steps else contextlib.nullcontext():
            measured = []
            for run in runs:
                current[0] = f"{run.model_name} seed {run.seed}"
                measured.append(measure_timed(run, out, costs))
            current[0] = "all runs"
            publish_all(measured, out, runs[0].task.name, costs)
        totals = whole_report(runs_dir, Path(folder) / "whole") if whole else None
    lines = [
        f"{len(runs)} runs of {runs_dir}; load average {started} at the start, {load_average()} at the end",
        "",
        table(costs, None if totals is None else totals[0]),
    ]
    if totals is not None:
        user, system, wall = totals
        lines += [
            "",
            f"whole report (python -m probes.circuit report, default workers): user {user:.1f} s, "
            f"system {system:.1f} s, wall {wall:.1f} s",
        ]
    return "\n".join(lines)


def main(argv=None) -> None:
    from common.cli import Parser, UsageError, folder_path, run_cli

    parser = Parser(prog="benchmarks/report_cost.py", description=__doc__.splitlines()[0])
    parser.add_argument("runs_dir", type=folder_path, help="a task's runs folder, e.g. a copy of runs/winograd")
    parser.add_argument("--steps", action="store_true", help="also time the costliest steps inside the parts")
    parser.add_argument(
        "--no-whole", dest="whole", action="store_false", help="skip timing the whole report as a command"
    )
    args = parser.parse_args(argv)

    def command():
        if not args.runs_dir.is_dir():
            raise UsageError(
                f"runs folder {args.runs_dir} does not exist; name a folder of trained runs, "
                "e.g. a copy of runs/winograd"
            )
        print(report_cost(args.runs_dir, args.steps, args.whole))

    run_cli(command)


if __name__ == "__main__":
    main()
