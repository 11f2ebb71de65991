"""Running a sweep: each run trains and is traced in a worker that returns the run's files; the
driver (this process) writes them atomically into the runs folder, skips finished runs, records
failed ones, shows done / failed / time left, and ends with the census. A run trained with weight
snapshots (`--snapshot-every N`) is also traced at each snapshot (its timeline.json); a finished
run whose timeline.json is missing or fails a check has only its snapshots traced again.

Workers never write into the runs folder, so they need no shared filesystem (a Ray cluster's nodes
have none), and a run folder only ever holds a complete run or an interrupted driver write.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from common.cli import UsageError
from common.interrupts import held_interrupts
from common.atomic import atomic_write, write_json
from common.ownership import LOCK, MANIFEST, check_replaceable
from models.checkpoint import CONFIG
from tasks.base import Task
from tasks.training.runs import METRICS
from tasks.training.sweeps import FAILED, failed_record, is_sweep

from toylens.sweeps.files import write_run
from toylens.sweeps.job import SCRATCH, SweepJob, run_job
from toylens.sweeps.plan import (
    CONFIRM_RUNS,
    SweepRun,
    check_size,
    count_runs,
    first_run_estimate,
    time_left,
    parse_grid,
    plan_sweep,
    write_records,
)


def remove_scratch(token: str) -> None:
    """Remove what this sweep's local workers left in the temp folder: a worker killed before its
    own cleanup (SIGKILL after a Ctrl-C's grace, an out-of-memory kill) leaves its temp folder.
    Only folders named with this sweep's token, which no other command makes; a Ray worker on
    another node keeps its own (that node's temp folder is not this machine's)."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SCRATCH}{token}-*"):
        shutil.rmtree(folder, ignore_errors=True)


@dataclass(frozen=True)
class SweepOutcome:
    runs: int
    kept: int  # finished before this command: skipped (their snapshots may have been traced)
    done: int
    failed: int
    seconds: float  # wall time of the runs this command executed
    worker_seconds: float  # summed over the runs done (train + trace in the worker)
    snapshots_traced: int = 0  # kept runs whose snapshots alone were traced


@dataclass
class Tally:
    """What a sweep's outcomes add up to so far (mutable: each outcome counts into it as it arrives)."""

    done: int = 0
    failed: int = 0
    snapshots: int = 0
    worker_seconds: float = 0.0
    measured: list = field(default_factory=list)  # (RunPlan, seconds in its worker) of each run done
    closed: set = field(default_factory=set)  # id() of every job that came back, done or failed


def run_sweep(
    runs: list[SweepRun],
    out: Path,
    executor,
    command: str,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    write=print,
    trace: str = "full",
) -> SweepOutcome:
    """The sweep's runs trained and traced (`trace`: "full", the report's circuit part, or "census",
    what circuit.json holds alone: toylens.sweeps.job) on `executor`, their files written into `out`."""
    from common.lock import folder_lock, folder_locks
    from toylens.family import check_out_folder

    from probes.report.outputs.census import check_census_files

    check_out_folder(out, runs[0].plan.task)
    check_census_files(out)  # the census after training reads and writes these
    # The root, then each grid point: a training into a point (a runs folder of its own) takes the
    # same lock file, so of the two exactly one proceeds however they interleave.
    with folder_lock(out, "sweep folder"):
        check_not_a_runs_folder(out)
        with folder_locks(sorted({Path(out) / run.point for run in runs}), "sweep's grid point"):
            return sweep_locked(runs, out, executor, command, resume, overwrite, progress, write, trace)


def check_not_a_runs_folder(out: Path) -> None:
    """A sweep writes only into a folder of its own: runs that a train wrote into --out would be
    counted beside the sweep's (and seeds would repeat in one comparison)."""
    if is_sweep(out) or not Path(out).is_dir():
        return
    found = next(iter(sorted(Path(out).rglob(CONFIG))), None)
    if found is not None:
        raise UsageError(
            f"--out {out} holds runs that no sweep planned ({found.parent}: a train's runs folder, or "
            "a sweep from before toylens recorded sweep.json); a sweep needs a folder of its own: "
            "choose another --out"
        )


def needs_timeline(run: SweepRun) -> str | None:
    """Why a finished, counted run trained with snapshots needs its snapshots traced (None: it
    does not): its timeline.json is missing or fails a check."""
    from probes.census import read_circuit
    from probes.circuits.labels import circuit_label
    from probes.circuits.mechanism_timeline import TIMELINE, read_timeline, wants_timeline
    from tasks.training.runs import Run

    finished = Run(run.plan.run_dir)
    summary = read_circuit(finished)
    if not wants_timeline(finished.config, summary):
        return None
    if not (finished.path / TIMELINE).exists():
        return f"no {TIMELINE}"
    try:
        read_timeline(finished, circuit_label(summary))
    except UsageError as error:
        return str(error)
    return None


def finished_files(run_dir: Path) -> dict:
    """A finished run's files for a worker (which needs no shared filesystem), without toylens's
    ownership records."""
    return {
        p.relative_to(run_dir).as_posix(): p.read_bytes()
        for p in sorted(Path(run_dir).rglob("*"))
        if p.is_file() and p.name not in (MANIFEST, LOCK)
    }


def needs_retrace(run: SweepRun) -> str | None:
    """Why a finished run's circuit.json cannot be counted (None: it can), so the sweep redoes it."""
    from probes.census import read_circuit
    from tasks.training.runs import Run

    try:
        read_circuit(Run(run.plan.run_dir))
    except UsageError as error:
        return str(error)
    return None


def sweep_locked(
    runs: list[SweepRun],
    out: Path,
    executor,
    command: str,
    resume: bool,
    overwrite: bool,
    progress: bool,
    write,
    trace: str,
) -> SweepOutcome:
    from tqdm.auto import tqdm

    from toylens.family import existing_status, resume_command, step_cost

    statuses = [existing_status(run.plan, overwrite, resume) for run in runs]
    for index, run in enumerate(runs):
        why = needs_retrace(run) if statuses[index] == "done" else None
        if why is not None:
            write(f"{run.plan.run_dir}: trained, but not traced for this sweep ({why}); trained and traced again")
            statuses[index] = "redo"
        elif statuses[index] == "done" and (why := needs_timeline(run)) is not None:
            write(f"{run.plan.run_dir}: its snapshots are not traced ({why}); tracing them (no retraining)")
            statuses[index] = "snapshots"
    for run, status in zip(runs, statuses):
        if status != "done":  # this run folder will be written: nothing of the user's may be in it
            check_replaceable(run.plan.run_dir, "run folder", within=out)
    token = f"{os.getpid()}{secrets.token_hex(4)}"
    todo = [
        SweepJob(run.plan, command, finished_files(run.plan.run_dir) if status == "snapshots" else None, token, trace)
        for run, status in zip(runs, statuses)
        if status != "done"
    ]
    write_records(runs, out, overwrite)
    counts = Tally()
    parallel = getattr(executor, "jobs", None) or getattr(executor, "cpus", None) or 1
    if len(todo) < len(runs):
        write(f"{len(runs) - len(todo)} of {len(runs)} runs already finished with these settings: kept")
    bar = tqdm(total=len(todo), desc=f"sweep ({executor.name})", unit="run", disable=not progress, dynamic_ncols=True)

    def on_outcome(job: SweepJob, outcome) -> None:
        with held_interrupts():  # a Ctrl-C now waits until this run's files are all written
            record_outcome(job, outcome)

    def record_outcome(job: SweepJob, outcome) -> None:
        counts.closed.add(id(job))
        if job.finished is not None:  # a finished run: only its timeline.json comes back, nothing else changes
            traced(job, outcome)
        elif outcome.error is None:
            write_run(job.plan.run_dir, outcome.result.files)
            counts.done += 1
            counts.worker_seconds += outcome.result.seconds
            counts.measured.append((job.plan, outcome.result.seconds))
            if counts.done == 1 and len(todo) > 1:
                waiting = [other for other in todo if other is not job and other.finished is None]
                bar.write(f"sweep: {first_run_estimate(job.plan, outcome.result, waiting, parallel)}")
        else:
            write_json(
                job.plan.run_dir / FAILED,
                failed_record(job.plan.run_dir.parent.parent.name, job.plan.model_name, job.plan.seed, outcome.error),
            )
            counts.failed += 1
            bar.write(f"{job.plan.run_dir}: failed twice ({outcome.error}); recorded in {FAILED}")
        waiting = [other for other in todo if id(other) not in counts.closed and other.finished is None]
        left = time_left(counts.measured, waiting, parallel) if counts.measured else "?"
        bar.set_postfix(done=counts.done, failed=counts.failed, left=left, refresh=False)
        bar.update()

    def traced(job: SweepJob, outcome) -> None:
        if outcome.error is None:
            for name, data in outcome.result.files.items():
                atomic_write(job.plan.run_dir / name, lambda temp, data=data: Path(temp).write_bytes(data))
            counts.snapshots += 1
        else:  # the run itself stays finished and counted: no failed.json beside it
            bar.write(
                f"{job.plan.run_dir}: tracing its snapshots failed twice ({outcome.error}); its circuit is "
                "counted, its timeline is not"
            )
        bar.update()

    started = time.perf_counter()
    if todo:
        write(f"sending {len(todo)} runs to the {executor.name} executor (starting its workers first)")
    try:
        if todo:
            executor.run(run_job, todo, on_outcome, cost=lambda job: step_cost(job.plan.spec))
    except KeyboardInterrupt:
        finished = len(runs) - len(todo) + counts.done
        raise KeyboardInterrupt(
            f"{finished} of {len(runs)} runs finished and kept, {len(runs) - finished} missing "
            f"(sweep.json lists every planned run; a run is finished once its {METRICS} "
            f"exists); run the missing ones with: {resume_command()}"
        ) from None
    finally:
        bar.close()
        remove_scratch(token)
    return SweepOutcome(
        len(runs),
        len(runs) - len(todo) + counts.snapshots,
        counts.done,
        counts.failed,
        time.perf_counter() - started,
        counts.worker_seconds,
        counts.snapshots,
    )


def check_gpus_per_run(gpus: float, executor: str) -> None:
    """Ray's rules for a task's GPUs, checked before anything runs; the local pool reserves none."""
    if not 0 <= gpus < float("inf"):  # NaN fails too
        raise UsageError(f"--gpus-per-run must be a finite number >= 0, got {gpus}")
    if gpus > 1 and not gpus.is_integer():
        raise UsageError(f"--gpus-per-run {gpus:g}: above 1 it must be a whole number of GPUs (Ray's rule)")
    if gpus and executor != "ray":
        raise UsageError(
            "--gpus-per-run reserves GPUs for Ray tasks: add --executor ray (the local pool needs no "
            "flag: its runs train on a GPU whenever torch sees one)"
        )


def sweep_command(task_cls: type[Task], args) -> None:
    """`toylens sweep TASK ...`: plan, check, run on the chosen executor, write the census."""
    from tasks.training.runs import command_line
    from toylens.sweeps.executors import make_executor
    from toylens.sweeps.driver import run_sweep
    from toylens.arguments import check_address

    check_gpus_per_run(args.gpus_per_run, args.executor)
    check_address(args)
    params = {f.name: getattr(args, f.name) for f in dataclasses.fields(task_cls.Params)}
    from toylens.arguments import model_list, training_overrides

    training = training_overrides(args)

    models = model_list(args.models)
    out = args.out or Path("runs") / "sweeps" / task_cls.name
    seeds, grid = args.seeds, parse_grid(args.grid, task_cls)
    total = count_runs(task_cls, params, models, seeds, grid)
    if total > CONFIRM_RUNS:
        print(f"planning {total} runs (checking each point's settings) ...", flush=True)
    runs = plan_sweep(task_cls, params, training, models, seeds, grid, out)
    print(f"sweep: {check_size(runs, args.jobs, args.yes)}", flush=True)
    executor = make_executor(args.executor, args.jobs, args.address, args.gpus_per_run)
    outcome = run_sweep(
        runs,
        out,
        executor,
        command_line(),
        resume=args.resume,
        overwrite=args.overwrite,
        progress=not args.no_progress,
        trace=args.trace,
    )
    per_run = f", {outcome.worker_seconds / outcome.done:.1f} s per run in its worker" if outcome.done else ""
    traced = f" ({outcome.snapshots_traced} of them had their snapshots traced)" if outcome.snapshots_traced else ""
    done = (
        f"sweep: {outcome.done} runs done, {outcome.failed} failed, {outcome.kept} kept{traced}, "
        f"in {outcome.seconds:.1f} s{per_run}"
    )
    if outcome.done + outcome.kept == 0:
        print(done)
        print(f"no finished runs in {out}: no census (see each run's {FAILED})")
        return
    # Imported before the line above is printed: from then on a Ctrl-C must say how to write the census.
    from toylens.census import census_command
    from toylens.family import resume_command

    try:
        print(done)
        census_command(out)
    except KeyboardInterrupt:  # the census publishes its folder whole, so none or the old one is there
        raise KeyboardInterrupt(
            f"all {outcome.runs} runs finished and kept, the census was not written; write it with: {resume_command()}"
        ) from None
