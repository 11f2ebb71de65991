"""Train a task's model family over seeds into run folders, refusing to mix incompatible runs.

A run folder gets its config.json before the first step, so an unfinished run is recognisable: it
has a config but no metrics.json, and continues with --resume from its last saved train state.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from models import ModelSpec, UsageError
from models.checkpoint import CONFIG, FORMAT, WEIGHTS, save_checkpoint
from models.spec import Attention
from common.atomic import write_json
from common.cli import check_not_too_broad
from common.jsonfiles import differences
from common.store import read_json
from common.ownership import check_replaceable, clean_leftovers, remove, remove_tree
from tasks.base import Task
from tasks.training.runs import (
    LOG,
    METRICS,
    command_argv,
    command_line,
    metrics_sha256,
    package_versions,
    read_run_config,
    run_sha256,
)
from tasks.settings import StopReason, TrainSettings, recorded_training, settings_dict
from tasks.validate import validate_family
from toylens.workers import WorkerDied, map_jobs


@dataclass(frozen=True)
class RunPlan:
    task: Task
    model_name: str
    spec: ModelSpec
    seed: int
    settings: TrainSettings
    run_dir: Path
    # Positions the model must cover beyond its training data (0: the longest sequence), so it
    # can be evaluated on longer inputs than it was trained on (probes.chapter.positions).
    context: int = 0

    def identity(self) -> dict:
        """What must match for an existing run folder to count as this run."""
        return {
            "task": {"name": self.task.name, "params": self.task.params_dict()},
            "model_name": self.model_name,
            "spec": self.spec.to_dict(),
            "seed": self.seed,
            "training": settings_dict(self.settings),
        }


def sized_spec(spec: ModelSpec, task: Task, batches: dict, context: int = 0, batch_size: int = 64) -> ModelSpec:
    """Fill in what the data decides (vocabulary size and context length, at least `context`);
    refuse a model that would not fit in memory to train at `batch_size`, before building it."""
    longest = max(int(batch.lengths.max()) for batch in batches.values())
    return (
        replace(spec, d_vocab=len(task.vocabulary()), n_ctx=max(longest - 1, context))
        .validate()
        .check_memory(batch_size)
    )


def plan_family(
    task: Task,
    model_names: list[str] | None,
    seeds: list[int],
    settings: TrainSettings | dict[str, TrainSettings],
    out: Path,
) -> list[RunPlan]:
    check_stable_vocabulary(task)
    return plan_models(
        task, validate_family(task), model_names, seeds, settings, out, "model(s)", f" for task {task.name!r}"
    )


def plan_models(
    task: Task,
    specs: dict[str, ModelSpec],
    names: list[str] | None,
    seeds: list[int],
    settings: TrainSettings | dict[str, TrainSettings],
    out: Path,
    kind: str,
    owner: str = "",
) -> list[RunPlan]:
    """One RunPlan per chosen model of `specs` (default: all) and seed, into OUT/<model>/seed<k>;
    an unknown name is refused, saying what `kind` of name it is (and whose). `settings`: one for
    every model, or one per model name (tasks.settings.model_settings)."""
    names = names or list(specs)
    unknown = [name for name in names if name not in specs]
    if unknown:
        raise UsageError(f"unknown {kind} {unknown}{owner}; known: {', '.join(specs)}")
    chosen = settings if isinstance(settings, dict) else dict.fromkeys(names, settings)
    return [
        RunPlan(task, name, specs[name], seed, chosen[name], Path(out) / name / f"seed{seed}")
        for name in names
        for seed in seeds
    ]


def check_stable_vocabulary(task: Task) -> None:
    """Token ids are positions in the vocabulary, so one that changes between calls (a set turned
    into a list, a random order) would train on one numbering and record another."""
    if task.vocabulary() != task.vocabulary():
        raise UsageError(
            f"task plugin {task.name!r}: vocabulary() returned a different list on a second call; "
            "it must return the same tokens in the same order every time (token ids are "
            "positions in it): sort it, or build it once in __init__"
        )


def runs_plugin_code(task: Task) -> bool:
    """Whether training `task` runs code from outside toylens: a plugin's code can end its process
    (os._exit, a signal, a crash in an extension), which in-process would end toylens with no
    word, so such runs always train in worker processes whose death is reported."""
    return not type(task).__module__.startswith("tasks.")


def existing_status(plan: RunPlan, overwrite: bool, resume: bool = False) -> str:
    """'new', 'done' (identical finished run: skip), 'redo' (--overwrite) or 'resume' (unfinished
    run, --resume); refuses to replace a different run or to restart an unfinished one unasked."""
    if not (plan.run_dir / CONFIG).is_file():
        return "new"
    if overwrite:
        return "redo"
    config = read_run_config(plan.run_dir)
    recorded = {key: config.get(key) for key in plan.identity()}
    # Settings added since: what the run ran with (LEGACY) where that is not today's default, else the default.
    recorded["training"] = {**settings_dict(TrainSettings()), **recorded_training(config.get("training") or {})}
    # The data decides n_ctx and d_vocab, except a context asked for explicitly.
    recorded_spec = ModelSpec.from_dict(config["spec"])  # fields added since: their defaults
    recorded["spec"] = {**recorded_spec.to_dict(), "n_ctx": recorded_spec.n_ctx if plan.context else 0, "d_vocab": 0}
    wanted = {**plan.identity(), "spec": {**plan.spec.to_dict(), "n_ctx": plan.context, "d_vocab": 0}}
    differing = sorted(differences(recorded, wanted))
    if differing:
        raise UsageError(
            f"{plan.run_dir} holds an incompatible run (different {', '.join(differing)}); "
            "pass --overwrite to replace it or choose another --out"
        )
    if (plan.run_dir / METRICS).is_file():
        return "done"
    if resume:
        return "resume"
    raise UsageError(
        f"{plan.run_dir} holds an unfinished run; pass --resume to continue it from its "
        "last checkpoint or --overwrite to start it again"
    )


def check_out_folder(out: Path, task: Task, planned: set[Path] | None = None) -> None:
    """`out` holds runs of `task` only; with `planned` (a train's run folders, which
    `existing_status` judges) its other finished runs are also of `task`'s variant: every reader
    of the folder would refuse a mix (tasks.training.runs.check_one_family), after the training.
    A sweep's root passes none: its grid points differ by design."""
    check_not_too_broad(out, "--out")
    if Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out {out} is a file, not a folder; choose a folder for the runs")
    held_params = {}  # run folder -> its task parameters, once every config is known to be this task's
    for config_path in sorted(Path(out).rglob(CONFIG)) if Path(out).is_dir() else []:
        config = read_json(config_path, "move the folder away or choose another --out")
        info = config.get("task") if isinstance(config, dict) else None
        if not isinstance(info, dict) or info.get("name") != task.name:
            name = info.get("name") if isinstance(info, dict) else None
            held = f"a run of task {name!r}" if isinstance(name, str) else "a config.json that is not a toylens run's"
            raise UsageError(
                f"{out} already holds {held} ({config_path.parent}); choose another --out for task {task.name!r}"
            )
        params = info.get("params")
        held_params[config_path.parent] = params if isinstance(params, dict) else {}
    for run_dir, params in held_params.items():
        if planned is None or run_dir in planned or not (run_dir / METRICS).is_file():
            continue
        differing = differences(params, task.params_dict())
        if differing:
            raise UsageError(
                f"{out} holds runs of another variant of task {task.name!r} ({run_dir} "
                f"differs in {', '.join(differing)}); a runs folder holds one variant: choose another "
                "--out, or retrain its other models too (--models and --overwrite)"
            )


def start_run(plan: RunPlan, spec: ModelSpec, command: str | None = None) -> dict:
    """Clear what an earlier attempt left and record the run's identity before the first step.
    `command`: the command that asked for the run, when this process is a remote worker."""
    from probes.circuits.labels import CIRCUIT
    from probes.circuits.mechanism_timeline import TIMELINE
    from tasks.training.resume import STATE
    from tasks.training.sweeps import FAILED
    from tasks.training.loop import SNAPSHOTS

    plan.run_dir.mkdir(parents=True, exist_ok=True)
    # What described an earlier run here (a sweep's circuit summary, its failure record) goes too.
    for name in (METRICS, WEIGHTS, STATE, LOG, CIRCUIT, TIMELINE, FAILED):
        remove(plan.run_dir / name)  # only files toylens wrote; train_family checked there are no others
    if (plan.run_dir / SNAPSHOTS).is_dir():
        remove_tree(plan.run_dir / SNAPSHOTS)
    config = {
        **plan.identity(),
        "format": FORMAT,
        "spec": spec.to_dict(),
        "vocabulary": plan.task.vocabulary(),
        "versions": package_versions(),
        "command": command or command_line(),
    }
    config["run_sha256"] = run_sha256(config)
    write_json(plan.run_dir / CONFIG, config)
    return config


def continue_run(plan: RunPlan) -> dict:
    """The unfinished run's config, with this command added to the commands that resumed it."""
    config = read_run_config(plan.run_dir)
    config["resumed_by"] = [*config.get("resumed_by", []), command_line()]
    write_json(plan.run_dir / CONFIG, config)
    return config


@dataclass(frozen=True)
class Prepared:
    """A run about to train: its data, its model (built from its seed) and the config.json written."""

    batches: dict
    spec: ModelSpec
    model: Any  # the TransformerBridge models.build_model made
    config: dict


def prepare(plan: RunPlan, resume: bool = False, command: str | None = None) -> Prepared:
    """The run's data and model, and its folder started (or continued, with `resume`)."""
    from models import build_model
    from tasks.data import task_dataset, to_batch
    from tasks.training.loop import SNAPSHOTS

    data = task_dataset(plan.task, plan.seed)
    batches = {name: to_batch(split) for name, split in data.items()}
    spec = sized_spec(plan.spec, plan.task, batches, plan.context, plan.settings.batch_size)
    model = build_model(spec, seed=plan.seed)
    config = continue_run(plan) if resume else start_run(plan, spec, command)
    for folder in (plan.run_dir, plan.run_dir / SNAPSHOTS):  # temps a kill left mid-write
        clean_leftovers(folder)
    return Prepared(batches, spec, model, config)


def execute(
    plan: RunPlan,
    progress: bool = True,
    resume: bool = False,
    checkpoint_every: int | None = None,
    command: str | None = None,
    checkpoints: bool = True,
) -> dict:
    """Train one run (or continue it from its saved train state) and write its folder; returns its
    metrics. Without `checkpoints`, no train state is saved on the way (for a folder nothing resumes)."""
    from tasks.training.resume import STATE
    from tasks.training.loop import SNAPSHOTS, train

    run = prepare(plan, resume, command)
    result = train(
        run.model,
        run.batches["train"],
        run.batches["validation"],
        plan.settings,
        plan.seed,
        log_path=plan.run_dir / LOG,
        progress=progress,
        snapshot_dir=plan.run_dir / SNAPSHOTS,
        label=f"{plan.model_name} seed {plan.seed}",
        state_path=plan.run_dir / STATE if checkpoints else None,
        checkpoint_every=checkpoint_every,
        resume=resume,
    )
    return write_finished(plan, run, result)


def write_finished(plan: RunPlan, run: Prepared, result) -> dict:
    """The trained run's weights, its accuracy and metrics.json (written last: the folder is then
    finished), its train state removed; returns its metrics."""
    from probes.accuracy import EVALUATION, TRAINING_FIELDS, measure_accuracy
    from tasks.training.resume import STATE

    weights_sha256 = save_checkpoint(plan.run_dir, run.model, run.config)
    # Measured here, in the worker that holds the model, so the comparison after training reads it
    # (for these exact weights and spec only; folders move, so no path).
    evaluation = measure_accuracy(run.model, run.batches, plan.model_name, plan.seed, plan.run_dir, result.steps)
    record = {k: v for k, v in asdict(evaluation).items() if k not in ("path", *TRAINING_FIELDS)}
    metrics = {
        "steps": result.steps,
        "stop_reason": result.stop_reason,
        "stop_rule": plan.settings.describe_stop(),
        "train_seconds": round(result.seconds, 3),
        "accuracy": {name: split.accuracy.value for name, split in evaluation.splits.items()},
        EVALUATION: {**record, "weights_sha256": weights_sha256, "spec": run.spec.to_dict()},
    }
    metrics["sha256"] = metrics_sha256(metrics)
    write_json(plan.run_dir / METRICS, metrics)
    remove(plan.run_dir / STATE)  # a finished run is never resumed
    return metrics


def resume_command() -> str:
    """The command being run, with --resume (and without --overwrite, which excludes it)."""
    argv = [arg for arg in command_argv() if arg != "--overwrite"]
    return shlex.join(argv if "--resume" in argv else [*argv, "--resume"])


def train_family(
    plans: list[RunPlan],
    overwrite: bool = False,
    progress: bool = True,
    resume: bool = False,
    checkpoint_every: int | None = None,
    jobs: int = 1,
    report_out: Path | None = None,
    stack: str = "off",
) -> list:
    """Train every plan not already done; with jobs > 1, that many runs (or stacks) at a time in worker
    processes; `stack` is toylens.stacking's choice (auto, on, off) of stacking a model's seeds.
    With `report_out`, each worker then measures what the circuit report shows for its run (kept runs
    too), saving the report's own start-up; returns those measurements in plan order (else Nones)."""
    if not plans:
        return []
    from common.lock import folder_lock

    out = plans[0].run_dir.parent.parent
    check_out_folder(out, plans[0].task, {plan.run_dir for plan in plans})
    with folder_lock(out, "runs folder"):
        return train_locked(plans, out, overwrite, progress, resume, checkpoint_every, jobs, report_out, stack)


def train_locked(
    plans: list[RunPlan],
    out: Path,
    overwrite: bool,
    progress: bool,
    resume: bool,
    checkpoint_every: int | None,
    jobs: int,
    report_out: Path | None,
    stack: str = "off",
) -> list:
    from toylens.stacking import stack_units

    statuses = [existing_status(plan, overwrite, resume) for plan in plans]
    for plan, status in zip(plans, statuses):
        if status != "done":  # this run folder will be written: nothing of the user's may be in it
            check_replaceable(plan.run_dir, "run folder", within=out)
    todo = []
    for plan, status in zip(plans, statuses):
        if status == "done":
            print(f"{plan.run_dir}: already trained with these settings, kept (--overwrite retrains)")
        elif status == "resume":
            print(f"{plan.run_dir}: resuming from its last checkpoint")
        if status != "done" or report_out is not None:
            todo.append(
                TrainJob(
                    plan,
                    status == "resume",
                    checkpoint_every,
                    progress and jobs <= 1,
                    train=status != "done",
                    report_out=report_out,
                )
            )
    task = plans[0].task
    units = stack_units(todo, stack, sized_spec)
    try:
        results = map_jobs(
            train_unit,
            units,
            jobs,
            f"training {len(todo)} runs, {min(jobs, len(units))} at a time",
            progress=progress and jobs > 1,
            on_result=report_unit,
            cost=unit_cost,
            isolate=runs_plugin_code(task),
        )
    except KeyboardInterrupt:
        raise KeyboardInterrupt(
            f"unfinished runs are kept; continue them from their last checkpoint with: {resume_command()}"
        ) from None
    except WorkerDied as died:
        raise UsageError(
            f"task plugin {task.name!r} ({type(task).__module__}): a worker process training its runs "
            f"died ({died.how}): the task's code ended the process (os._exit, a signal) or the system "
            f"killed it (out of memory?); fix the plugin, then continue with: {resume_command()}"
        ) from None
    outcomes = [
        (job, outcome) for unit, unit_results in zip(units, results) for job, outcome in zip(unit, unit_results)
    ]
    measured = {job.plan.run_dir: result for job, (_, result) in outcomes}
    return [measured.get(plan.run_dir) for plan in plans]


def report_run(job: "TrainJob", result: tuple, write=print) -> None:
    metrics, _ = result
    if metrics is None:
        return
    heldout = metrics["accuracy"]["heldout"]
    watched = f" on {job.plan.settings.stop_metric.value}" if metrics["stop_reason"] == StopReason.STALLED else ""
    write(
        f"{job.plan.model_name:>16} seed {job.plan.seed}: {metrics['steps']:>5} steps "
        f"({metrics['stop_reason']}{watched}, {metrics['train_seconds']:.1f} s), held-out {heldout:.1%}"
    )


def report_unit(unit: tuple, results: list, write=print) -> None:
    for job, result in zip(unit, results):
        report_run(job, result, write)


def step_cost(spec: ModelSpec) -> float:
    """Rough relative cost of a training step, so the slowest runs start first and short ones fill
    the gaps at the end (an expensive run started last left a core idle for a minute, measured)."""
    per_layer = (1.0 if spec.attention == Attention.SOFTMAX else 0.5) + (1.0 if spec.mlp else 0.0)
    return spec.n_layers * per_layer


def unit_cost(unit: tuple) -> float:
    """A unit of work's cost (one job, or a stack of jobs): its jobs' step costs summed."""
    return sum(step_cost(job.plan.spec) for job in unit if job.train)


@dataclass(frozen=True)
class TrainJob:
    plan: RunPlan
    resume: bool
    checkpoint_every: int | None
    progress: bool  # per-step bar: only when runs go one at a time (bars would interleave)
    train: bool = True  # False: already trained and kept; only measured for the report
    report_out: Path | None = None


def announce_start(job: TrainJob) -> None:
    """One line as the run starts, in the process that runs it (flushed: a worker's stdout is a pipe
    that would hold it until the run ended). On a terminal it starts with a carriage return so it
    writes over a pool's bar, which redraws below it at its next update."""
    import sys

    doing = f"training (at most {job.plan.settings.max_steps} steps)" if job.train else "kept"
    doing += ", then tracing its circuits" if job.report_out is not None else ""
    start = "\r\x1b[K" if sys.stdout.isatty() else ""
    print(f"{start}{job.plan.model_name:>16} seed {job.plan.seed}: {doing}", flush=True)


def train_unit(unit: tuple[TrainJob, ...]) -> list[tuple]:
    """Each job's (metrics, report measurement): one job as `train_job` runs it, or the jobs of one
    model stacked (toylens.stacking), each run's folder written the moment its seed stops."""
    from toylens.stacking import train_stack

    if len(unit) == 1:
        return [train_job(unit[0])]
    return train_stack(unit, prepare, write_finished)


def train_job(job: TrainJob) -> tuple:
    """(metrics, or None for a kept run; what the circuit report shows for the run, or None)."""
    metrics = None
    if not job.progress:  # no per-step bar names this run: say it started (a run trains and traces for a minute)
        announce_start(job)
    if job.train:
        metrics = execute(job.plan, progress=job.progress, resume=job.resume, checkpoint_every=job.checkpoint_every)
    if job.report_out is None:
        return metrics, None
    # Here, in the worker that trained the run: TransformerLens is already imported.
    from toylens.report import measure_for_report
    from tasks.training.runs import Run

    return metrics, measure_for_report(Run(job.plan.run_dir), job.report_out)
