"""Sweeps: a task's models x a grid of settings x seeds, each run trained and traced in a worker.

`--grid d_model=64,128 lr=1e-3,3e-3` ranges over training settings (`tasks.settings.TrainSettings`),
the task's parameters and `models.ModelSpec` fields; every value is parsed to its field's type
before anything runs. Runs land in `OUT/<point>/<model>/seed<k>/` (the point's values in
`OUT/<point>/point.json`). Workers return each run's files and this driver writes them, so workers
need no shared filesystem; a run folder is complete once its metrics.json exists (written last).
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import re
import types
import typing
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from common.cli import Bounded, UsageError, out_path
from models import ModelSpec
from tasks.base import Task
from tasks.settings import TrainSettings
from tasks.training.sweeps import POINT, PlannedGroup, SweepManifest, identity_of
from toylens.arguments import MAX_RUNS, add_executor_arguments

if TYPE_CHECKING:
    from toylens.family import RunPlan

CONFIRM_RUNS = 1000  # a sweep larger than this starts only with --yes, after its time estimate
# One measurement to size a sweep before it starts (README, "Sizing"): an attn-only-2x1 Winograd run
# (1000-step budget, step_cost 2) took 36.7 s to train and trace in its worker on 2 loaded cores.
REFERENCE_RUN_SECONDS, REFERENCE_COST, REFERENCE_STEPS = 36.7, 2.0, 1000
SPEC_KEYS = ("n_layers", "d_model", "n_heads", "mlp", "attention", "positions", "norm", "scale_scores", "residual")


def grid_fields(task_cls: type[Task]) -> dict[str, tuple[str, object]]:
    """Every key a grid may set: name -> (where it goes: 'training' | 'task' | 'spec', its type)."""
    found: dict[str, tuple[str, object]] = {}
    sources = [("training", TrainSettings, None), ("task", task_cls.Params, None), ("spec", ModelSpec, SPEC_KEYS)]
    for where, cls, only in sources:
        hints = typing.get_type_hints(cls)
        for field in dataclasses.fields(cls):
            if only is not None and field.name not in only:
                continue
            if field.name in found:
                raise UsageError(
                    f"task {task_cls.name!r} parameter {field.name!r} shadows a "
                    f"{found[field.name][0]} setting; rename the parameter to sweep it"
                )
            found[field.name] = (where, hints[field.name])
    return found


def parse_value(key: str, text: str, kind) -> object:
    """`text` as a value of type `kind` (int, float, bool, str, an Enum, a Literal or an Optional of those)."""
    options = typing.get_args(kind)
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        if text.lower() in ("none", "null"):
            return None
        return parse_value(key, text, next(o for o in options if o is not type(None)))
    if typing.get_origin(kind) is typing.Literal or (isinstance(kind, type) and issubclass(kind, enum.Enum)):
        choices = options or tuple(member.value for member in kind)  # a Literal's args, an Enum's values
        if text not in choices:
            raise UsageError(f"--grid {key}={text}: choose one of {', '.join(map(str, choices))}")
        return text if options else kind(text)
    try:
        if kind is bool:
            return {"true": True, "false": False}[text.lower()]
        return kind(text)
    except (KeyError, ValueError):
        raise UsageError(f"--grid {key}={text}: {text!r} is not a {kind.__name__}") from None


@dataclass(frozen=True)
class Grid:
    axes: tuple[tuple[str, tuple], ...] = ()  # (key, values) in the order given

    def points(self) -> list[dict]:
        keys = [key for key, _ in self.axes]
        return [dict(zip(keys, values)) for values in itertools.product(*(v for _, v in self.axes))]


def parse_grid(items: list[str], task_cls: type[Task]) -> Grid:
    """['d_model=64,128', 'lr=1e-3,3e-3'] -> Grid, every value typed; one line naming any problem."""
    known = grid_fields(task_cls)
    axes = []
    for item in items or []:
        key, equals, values = item.partition("=")
        key = key.strip().replace("-", "_")
        if not equals or not values.strip():
            raise UsageError(f"--grid {item!r}: write KEY=V1,V2 (e.g. d_model=64,128)")
        if key not in known:
            raise UsageError(f"--grid {item!r}: unknown key {key!r}; known: {', '.join(sorted(known))}")
        if key in dict(axes):
            raise UsageError(f"--grid names {key!r} twice; give all its values once: {key}=V1,V2")
        parsed = tuple(dict.fromkeys(parse_value(key, v.strip(), known[key][1]) for v in values.split(",")))
        axes.append((key, parsed))
    return Grid(tuple(axes))


def point_id(point: dict) -> str:
    """A folder name for a grid point: 'd_model=64_lr=0.001' ('default' for the empty grid)."""
    for key, value in point.items():
        if not re.fullmatch(r"[A-Za-z0-9.+-]+", str(value)):
            raise UsageError(
                f"--grid {key}={value}: a grid value names a folder; use letters, digits, '.', '+' and '-' only"
            )
    return "_".join(f"{key}={value}" for key, value in point.items()) or "default"


@dataclass(frozen=True)
class SweepRun:
    plan: RunPlan
    point: str  # its grid point's id
    values: dict  # its grid point's values


def plan_sweep(
    task_cls: type[Task],
    params: dict,
    training: dict,
    models: list[str] | None,
    seeds: list[int],
    grid: Grid,
    out: Path,
) -> list[SweepRun]:
    """Every (point, model, seed), each checked (spec, task parameters, settings) before anything runs."""
    from tasks.registry import build_task
    from tasks.settings import model_settings
    from toylens.family import plan_family

    where = grid_fields(task_cls)
    runs = []
    for point in grid.points():
        part = {kind: {k: v for k, v in point.items() if where[k][0] == kind} for kind in ("training", "task", "spec")}
        task = build_task(task_cls, {**params, **part["task"]})  # the checks (and guards) train's values get
        settings = {
            name: model_settings(task, name, {**training, **part["training"]}) for name in task.default_models()
        }
        folder = Path(out) / point_id(point)
        for family_plan in plan_family(task, models, seeds, settings, folder):
            spec = replace(family_plan.spec, **part["spec"])
            replace(spec, d_vocab=1).validate()  # checked now; the data sets d_vocab and n_ctx in the worker
            runs.append(SweepRun(replace(family_plan, spec=spec), point_id(point), point))
    if len(runs) > MAX_RUNS:
        raise UsageError(f"this sweep has {len(runs)} runs; split it into sweeps of at most {MAX_RUNS}")
    return runs


def count_runs(task_cls: type[Task], params: dict, models: list[str] | None, seeds: list[int], grid: Grid) -> int:
    """How many runs a sweep asks for, counted before any is planned."""
    from tasks.registry import build_task
    from tasks.validate import validate_family

    family = validate_family(build_task(task_cls, params))
    return len(grid.points()) * len(models or family) * len(seeds)


def estimated_seconds(runs: list[SweepRun]) -> float:
    """Train-and-trace seconds summed over runs, scaled from the reference run by step cost and budget."""
    from toylens.family import step_cost

    return sum(
        REFERENCE_RUN_SECONDS
        * step_cost(run.plan.spec)
        / REFERENCE_COST
        * run.plan.settings.max_steps
        / REFERENCE_STEPS
        for run in runs
    )


def run_cost(plan) -> float:
    """A run's expected train-and-trace time in units of one step-cost step (its budget the upper bound)."""
    from toylens.family import step_cost

    return step_cost(plan.spec) * plan.settings.max_steps


def first_run_estimate(first, files, remaining: list, jobs: int) -> str:
    """The time left, scaled from this sweep's own first finished run (`first`, a RunPlan; `files`
    its RunFiles, with its measured stages): the up-front figure scales from a Winograd run, 7x too
    long for a task whose runs solve early (issue #37: 24.5 min predicted, 3.3 taken)."""
    seconds = files.seconds
    left = seconds * sum(run_cost(job.plan) for job in remaining) / run_cost(first)
    return (
        f"first run took {seconds:.0f} s{stage_split(files.stages)}; at that rate the other {len(remaining)} "
        f"take roughly {duration(left / max(jobs, 1))} on {jobs} parallel jobs"
    )


def stage_split(record: dict | None) -> str:
    """' (train 8.1 s, trace 3.2 s, ...)': a run's top-level stages from its stages.json record."""
    if not record:
        return ""
    top = {
        name: value["wall_s"] for name, value in record["stages"].items() if "/" not in name and value["wall_s"] >= 0.05
    }
    return " (" + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in top.items()) + ")" if top else ""


def time_left(measured: list, remaining: list, jobs: int) -> str:
    """The time left from every run measured so far (`measured`: (RunPlan, seconds in its worker)),
    per unit of run_cost, over the `remaining` jobs, `jobs` at a time."""
    rate = sum(seconds for _, seconds in measured) / max(sum(run_cost(plan) for plan, _ in measured), 1e-9)
    return duration(rate * sum(run_cost(job.plan) for job in remaining) / max(jobs, 1))


def duration(seconds: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def check_size(runs: list[SweepRun], jobs: int, confirmed: bool) -> str:
    """The sweep's size and time estimate in one line; refused above CONFIRM_RUNS runs unless confirmed."""
    total = estimated_seconds(runs)
    task = runs[0].plan.task.name if runs else "winograd"
    # Another task's runs may solve far sooner or later than Winograd's (issue 57: 24.5 min printed
    # for a 5.5 min sweep): then the figure is only a guess until this sweep's own first run.
    guess = "" if task == "winograd" else f"a guess for {task}: "
    line = (
        f"{len(runs)} runs, roughly {duration(total)} of train + trace in all, {duration(total / jobs)} on "
        f"{jobs} parallel jobs ({guess}scaled from one measured run: {REFERENCE_RUN_SECONDS} s for attn-only-2x1 "
        "Winograd on 2 loaded cores; revised from this sweep's own first run when it finishes)"
    )
    if len(runs) > CONFIRM_RUNS and not confirmed:
        raise UsageError(f"this sweep has {line}; pass --yes to start it, or ask for fewer --seeds or grid values")
    return line


def planned_manifest(runs: list[SweepRun]) -> SweepManifest:
    """What this sweep plans, as sweep.json records it: per grid point and model, its settings and seeds."""
    groups: dict[tuple, list] = {}
    for run in runs:
        groups.setdefault((run.point, run.plan.model_name), []).append(run)
    return SweepManifest(
        runs[0].plan.task.name,
        tuple(
            PlannedGroup(
                point,
                members[0].values,
                model,
                identity_of(members[0].plan.identity()),
                tuple(sorted(m.plan.seed for m in members)),
            )
            for (point, model), members in sorted(groups.items())
        ),
    )


def write_records(runs: list[SweepRun], out: Path, overwrite: bool) -> None:
    """sweep.json (this sweep's runs joined to those planned before) and each point's point.json."""
    from common.atomic import write_json
    from tasks.training.sweeps import SWEEP, is_sweep, merged, point_record, read_manifest, read_point

    manifest = merged(read_manifest(out) if is_sweep(out) else None, planned_manifest(runs), overwrite)
    for point, values in {run.point: run.values for run in runs}.items():
        path = Path(out) / point / POINT
        if path.exists() and read_point(path.parent) != values:
            raise UsageError(f"{path} records other grid values; choose another --out")
    write_json(Path(out) / SWEEP, manifest.record())
    for point, values in {run.point: run.values for run in runs}.items():
        write_json(Path(out) / point / POINT, point_record(point, values))


def add_sweep_arguments(parser, task_cls: type[Task]) -> None:
    from toylens.arguments import add_seeds_argument, add_task_params, add_training_flags
    from toylens.sweeps.job import TRACES
    from toylens.workers import default_jobs

    parser.add_argument("--models", help="comma-separated model names (default: the task's whole family)")
    add_seeds_argument(parser)
    parser.add_argument(
        "--grid",
        nargs="+",
        default=[],
        metavar="KEY=V1,V2",
        help="values to sweep: training settings, task parameters or model-spec fields, "
        "e.g. --grid d_model=64,128 lr=1e-3,3e-3 (every combination is a grid point)",
    )
    parser.add_argument("--out", type=out_path, help=f"sweep folder (default runs/sweeps/{task_cls.name})")
    add_training_flags(parser)
    add_executor_arguments(
        parser,
        "local: a process pool on this machine (default); ray: Ray Core tasks",
        default_jobs(),
        "runs at a time on this machine: processes, or the local Ray instance's CPUs "
        "(default: CPU cores; ignored with --address)",
    )
    parser.add_argument(
        "--gpus-per-run",
        type=Bounded(float, 0, 1024, "GPUs"),
        default=0.0,
        help="GPUs each Ray task reserves (--executor ray only; default 0)",
    )
    existing = parser.add_mutually_exclusive_group()
    existing.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted sweep (finished runs are always kept; unfinished ones are run again)",
    )
    existing.add_argument("--overwrite", action="store_true", help="run every point again, replacing its runs")
    parser.add_argument(
        "--yes",
        action="store_true",
        help=f"start a sweep of more than {CONFIRM_RUNS} runs (without it, such a sweep is refused "
        "with its time estimate)",
    )
    parser.add_argument(
        "--trace",
        choices=TRACES,
        default="full",
        help="what each run is traced for: full (the report's circuit part; default) or census (only what "
        "the census reads: the circuit, its paths and positions, its signature and roles; the census rows are "
        "the same, and `python -m probes.circuit report` gives any run its full report)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_task_params(parser, task_cls)
