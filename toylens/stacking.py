"""Whether a family's seeds train stacked (`tasks.training.stacked`), and running the stacks.

`--stack on` stacks the seeds of each model that has two or more to train; `off` trains one seed
at a time; `auto` measures first: for each such model a short probe times a few steps of fresh
throwaway models both ways, at the runs' own settings and batch size, and stacks that model only
where stacking was faster per seed-step by STACK_MARGIN. Every run folder is written as the
one-seed path writes it, so nothing downstream knows which path trained it.

`toylens.family` calls this module with its own functions (sizing a spec, starting and finishing a
run folder) and its TrainJobs, so the import goes one way.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable

STACK_CHOICES = ("auto", "on", "off")
PROBE_SEEDS = 4  # seeds the probe stacks (fewer when fewer are to train)
PROBE_STEPS = 3  # timed steps each way, after one untimed step (the first call's set-up)
# Stacked must beat one seed at a time by this much per seed-step: a 3-step probe on a shared
# machine is noisy, and a tie is not worth the larger memory and the coarser progress.
STACK_MARGIN = 1.1


@dataclass(frozen=True)
class Probe:
    """One model's probe: per seed-step seconds one seed at a time and stacked, and how they were timed."""

    one_seed: float
    stacked: float
    seeds: int
    batch_size: int
    clock: str  # "CPU" (process time) or "wall" (on a GPU, synchronised)

    @property
    def ratio(self) -> float:
        """How many times faster stacked was per seed-step (above 1: stacked was faster)."""
        return self.one_seed / self.stacked

    def words(self) -> str:
        return (
            f"{self.ratio:.2f}x per seed-step stacked ({self.stacked * 1e3:.1f} vs {self.one_seed * 1e3:.1f} ms "
            f"{self.clock}, {self.seeds} seeds at batch {self.batch_size}, {PROBE_STEPS} probe steps)"
        )


def probe(plan: Any, seeds: int, sized: Callable) -> Probe:
    """Time PROBE_STEPS training steps of `seeds` fresh models of `plan`'s spec (a family RunPlan,
    sized for its data by `sized`, toylens.family.sized_spec) one at a time, then stacked, on
    `plan`'s data and settings (nothing is written)."""
    import torch

    from models import build_model
    from tasks.data import task_dataset, to_batch
    from tasks.training.loop import finish, start_training, training_device, update
    from tasks.training.stacked import stack_runs, stacked_update

    device = training_device()
    batches = {name: to_batch(split).to(device) for name, split in task_dataset(plan.task, plan.seed).items()}
    spec = sized(plan.spec, plan.task, batches, plan.context, plan.settings.batch_size)

    def fresh() -> list:
        models = [build_model(spec, seed=plan.seed + i).to(device, print_details=False) for i in range(seeds)]
        train, validation = batches["train"], batches["validation"]
        return [
            start_training(m, train, validation, plan.settings, i, None, None, False, "") for i, m in enumerate(models)
        ]

    def timed(step) -> float:
        step(1)  # untimed: the first call sets up kernels and, stacked, vmap's tracing
        clock = time.perf_counter if device != "cpu" else time.process_time
        if device != "cpu":
            torch.cuda.synchronize()
        started = clock()
        for index in range(2, PROBE_STEPS + 2):
            step(index)
        if device != "cpu":
            torch.cuda.synchronize()
        return (clock() - started) / (PROBE_STEPS * seeds)

    runs = fresh()
    one_seed = timed(lambda step: [update(run, step) for run in runs])
    for run in runs:
        finish(run, device)
    runs = fresh()
    stack = stack_runs(runs, list(range(seeds)))
    stacked = timed(lambda step: stacked_update(stack, step))
    for run in runs:
        finish(run, device)
    return Probe(one_seed, stacked, seeds, plan.settings.batch_size, "CPU" if device == "cpu" else "wall")


def stack_units(jobs: list, choice: str, sized: Callable, write=print) -> list[tuple]:
    """The jobs (toylens.family.TrainJob) as units a worker takes: one job, or the jobs of one model
    stacked; one line per model with seeds to stack saying which way it trains and why (nothing
    when there is none). `sized`: toylens.family.sized_spec, for the probe."""
    by_model: dict[str, list] = {}
    for job in jobs:
        if job.train:
            by_model.setdefault(job.plan.model_name, []).append(job)
    stacked: set[str] = set()
    for name, members in by_model.items():
        if len(members) < 2 or choice == "off":
            continue
        if choice == "on":
            stacked.add(name)
            write(f"training {name}: {len(members)} seeds stacked (--stack on)")
            continue
        measured = probe(members[0].plan, min(len(members), PROBE_SEEDS), sized)
        faster = measured.ratio >= STACK_MARGIN
        way = f"{len(members)} seeds stacked" if faster else "one seed at a time"
        write(f"training {name}: {way} (--stack auto: {measured.words()}; stacks at >= {STACK_MARGIN}x)")
        if faster:
            stacked.add(name)
    units: list[tuple] = [tuple(by_model[name]) for name in by_model if name in stacked]
    units += [(job,) for job in jobs if not (job.train and job.plan.model_name in stacked)]
    return units


def train_stack(unit: tuple, prepare: Callable, finished: Callable) -> list[tuple]:
    """Each job's (metrics, report measurement) for the jobs of a stack trained together: every run
    folder started by `prepare(plan, resume)` (toylens.family.prepare) and written by
    `finished(plan, prepared, result)` (toylens.family.write_finished) the moment its seed stops."""
    from tasks.training.loop import SNAPSHOTS
    from tasks.training.resume import STATE
    from tasks.training.runs import LOG
    from tasks.training.stacked import SeedJob, train_stacked

    prepared = [prepare(job.plan, job.resume) for job in unit]
    seeds = [
        SeedJob(
            run.model,
            run.batches["train"],
            run.batches["validation"],
            job.plan.seed,
            log_path=job.plan.run_dir / LOG,
            snapshot_dir=job.plan.run_dir / SNAPSHOTS,
            state_path=job.plan.run_dir / STATE,
            resume=job.resume,
            label=f"{job.plan.model_name} seed {job.plan.seed}",
        )
        for job, run in zip(unit, prepared)
    ]
    metrics: dict[int, dict] = {}

    def written(index: int, result) -> None:
        metrics[index] = finished(unit[index].plan, prepared[index], result)

    train_stacked(seeds, unit[0].plan.settings, written, unit[0].checkpoint_every)
    return [(metrics[i], report_measurement(job)) for i, job in enumerate(unit)]


def report_measurement(job) -> Any:
    """What the circuit report shows for the job's run, when the job asks (`--report`)."""
    if job.report_out is None:
        return None
    from tasks.training.runs import Run
    from toylens.report import measure_for_report

    return measure_for_report(Run(job.plan.run_dir), job.report_out)
