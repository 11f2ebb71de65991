"""One sweep run in its worker: trained and traced in a private temp folder, every file it wrote
returned to the driver. Each run's stages.json says where its time went (common.stages): the
worker's start-up before its first run, the imports, training, loading, tracing (each
measurement), the signature, and writing the circuit record; the driver's estimate of the time
left reads them (toylens.sweeps.plan.stage_estimate).

What a run is traced for: `full` (the report's circuit part, as `python -m probes.circuit report`
measures it) or `census` (probes.report.census_trace: what circuit.json holds, nothing more).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from common.atomic import write_json
from common.stages import recording, stage

if TYPE_CHECKING:
    from toylens.family import RunPlan

SCRATCH = "toylens-sweep-"  # a worker's temp folder: SCRATCH + the sweep's token + "-" + tempfile's suffix
STAGES = "stages.json"
TRACES = ("full", "census")
STAGES_FIX = "run the sweep again with --overwrite for this run"

_JOBS_HERE = [0]  # runs this worker process has started (a list: mutated, never rebound)


@dataclass(frozen=True)
class SweepJob:
    plan: RunPlan  # its run_dir is where the driver will write
    command: str  # the driver's command, recorded in the run's config.json
    finished: dict | None = None  # a finished run's files (path -> bytes): trace its snapshots only
    token: str = "0"  # names this sweep's worker temp folders, which the driver removes at its end
    trace: str = "full"  # one of TRACES


@dataclass(frozen=True)
class RunFiles:
    files: dict  # path inside the run folder -> bytes
    seconds: float  # the worker's wall time for training and tracing
    stages: dict | None = None  # stages.json's record (None for a finished run's snapshots)


def startup() -> dict:
    """This worker's start-up, once (its first run; zeros after): the CPU seconds the process spent
    before this run, and the wall seconds since the worker pool started it (toylens.workers.STARTED)."""
    from toylens import workers

    _JOBS_HERE[0] += 1
    if _JOBS_HERE[0] > 1:
        return {"wall_s": 0.0, "cpu_s": 0.0, "calls": 0}
    wall = time.time() - workers.STARTED if workers.STARTED else 0.0
    return {"wall_s": round(wall, 4), "cpu_s": round(time.process_time(), 4), "calls": 1}


def run_job(job: SweepJob) -> RunFiles:
    """Train and trace one run in a private temp folder; return every file it wrote. A job for a
    finished run traces its snapshots only and returns its timeline.json alone."""
    began_at, started, began = time.time(), time.perf_counter(), startup()
    with recording() as stages:
        with stage("imports"):
            from probes.census import circuit_record, read_circuit
            from probes.circuits.labels import CIRCUIT
            from probes.circuits.mechanism_timeline import TIMELINE, timeline_record, wants_timeline
            from probes.report.parts import RunContext
            from probes.report.run_analysis import snapshot_circuits
            from toylens.family import execute
            from tasks.training.runs import Run
        with tempfile.TemporaryDirectory(prefix=f"{SCRATCH}{job.token}-") as temp:
            run_dir = Path(temp) / job.plan.model_name / f"seed{job.plan.seed}"
            with stage("train"):
                if job.finished is None:
                    # No train states: this temp folder goes with its worker, and a sweep runs an
                    # unfinished run again from its start, so none would be read (each cost ~12 ms
                    # CPU and 0.1-0.2 s wall with its fsync, every 100 steps; measured on the shared machine).
                    execute(replace(job.plan, run_dir=run_dir), progress=False, command=job.command, checkpoints=False)
                else:
                    write_run_files(run_dir, job.finished)
            with stage("load"):
                run = Run(run_dir)
                context = RunContext(run, out=None)
                context.model  # noqa: B018  # loaded here, so no trace stage counts it
            if job.finished is None:
                summary = traced_summary(context, job.trace)
                with stage("write"):
                    write_json(run_dir / CIRCUIT, circuit_record(summary, run.config))
            if wants_timeline(run.config, read_circuit(run)):
                with stage("timeline"):
                    write_json(run_dir / TIMELINE, timeline_record(snapshot_circuits(context), run.config))
            record = None
            if job.finished is None:  # a finished run's snapshots: its stages.json stays as it was
                record = stages_record(stages, began, job.trace, began_at, time.perf_counter() - started)
                write_json(run_dir / STAGES, record)
            files = returned_files(run_dir, job.finished is not None, TIMELINE)
    return RunFiles(files, time.perf_counter() - started, record)


def traced_summary(context, trace: str):
    """The run's CircuitSummary as circuit.json stores it, traced `trace`'s way (the `trace` stage)."""
    from probes.report.census_trace import CENSUS_SUMMARY, census_analysis
    from probes.circuits.labels import summarise
    from probes.report.run_analysis import analyse_run
    from probes.report.words import circuit_summary

    with stage("trace"):
        if trace == "census":
            return summarise(census_analysis(context), CENSUS_SUMMARY)
        analysis = analyse_run(context)
    with stage("summary words"):
        return circuit_summary(analysis)


def returned_files(run_dir: Path, timeline_only: bool, timeline: str) -> dict:
    return {
        p.relative_to(run_dir).as_posix(): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file()
        if not timeline_only or p.name == timeline
    }


def write_run_files(run_dir: Path, files: dict) -> None:
    from toylens.sweeps.files import write_run

    write_run(run_dir, files)


def stages_record(stages, startup_seconds: dict, trace: str, began_at: float, seconds: float) -> dict:
    """stages.json: per stage path (common.stages) its wall and CPU seconds and calls, the worker's
    start-up first; the trace kind, the worker's process id, how many runs it had started, when
    this run began (Unix time: a sweep's start-up is its first run's start less the sweep's) and
    the run's whole wall seconds in its worker."""
    return {
        "trace": trace,
        "began_at": round(began_at, 3),
        "worker_pid": os.getpid(),
        "worker_run": _JOBS_HERE[0],
        "seconds": round(seconds, 4),
        "stages": {"startup": startup_seconds, **stages.record()},
    }


def read_stages(run_dir: Path) -> dict:
    """A run's stages.json, checked (UsageError naming the fix when it is not what a sweep writes)."""
    from common.cli import UsageError
    from common.store import read_json

    path = Path(run_dir) / STAGES
    data = read_json(path, STAGES_FIX)
    stages = data.get("stages") if isinstance(data, dict) else None
    if not isinstance(stages, dict) or not all(
        isinstance(v, dict) and all(isinstance(v.get(k), (int, float)) for k in ("wall_s", "cpu_s", "calls"))
        for v in stages.values()
    ):
        raise UsageError(f"{path} is not a sweep's stages record (per stage: wall_s, cpu_s, calls); {STAGES_FIX}")
    if data.get("trace") not in TRACES:
        raise UsageError(f"{path}: trace must be one of {', '.join(TRACES)}; {STAGES_FIX}")
    return data
