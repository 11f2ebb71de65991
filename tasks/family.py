"""Train a task's model family over seeds into run folders, refusing to mix incompatible runs.

A run folder gets its config.json before the first step, so an unfinished run is recognisable: it
has a config but no metrics.json, and continues with --resume from its last saved train state.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from models import ModelSpec, UsageError
from models.checkpoint import CONFIG, FORMAT, WEIGHTS, save_checkpoint, write_json
from tasks.base import Task
from tasks.runs import LOG, METRICS, command_argv, command_line, package_versions, read_run_config
from tasks.settings import TrainSettings, settings_dict


@dataclass(frozen=True)
class RunPlan:
    task: Task
    model_name: str
    spec: ModelSpec
    seed: int
    settings: TrainSettings
    run_dir: Path

    def identity(self) -> dict:
        """What must match for an existing run folder to count as this run."""
        return {"task": {"name": self.task.name, "params": self.task.params_dict()},
                "model_name": self.model_name, "spec": self.spec.to_dict(), "seed": self.seed,
                "training": settings_dict(self.settings)}


def sized_spec(spec: ModelSpec, task: Task, batches: dict) -> ModelSpec:
    """Fill in what the data decides: vocabulary size and context length."""
    longest = max(int(batch.lengths.max()) for batch in batches.values())
    return replace(spec, d_vocab=len(task.vocabulary()), n_ctx=longest - 1).validate()


def plan_family(task: Task, model_names: list[str] | None, seeds: list[int], settings: TrainSettings,
                out: Path) -> list[RunPlan]:
    family = task.default_models()
    names = model_names or list(family)
    unknown = [name for name in names if name not in family]
    if unknown:
        raise UsageError(f"unknown model(s) {unknown} for task {task.name!r}; known: {', '.join(family)}")
    return [RunPlan(task, name, family[name], seed, settings, Path(out) / name / f"seed{seed}")
            for name in names for seed in seeds]


def differences(recorded: dict, wanted: dict, prefix: str = "") -> list[str]:
    """Dotted names of the fields that differ, e.g. ['training.max_steps']."""
    found = []
    for key in sorted(set(recorded) | set(wanted)):
        a, b = recorded.get(key), wanted.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            found.append(prefix + key)
    return found


def existing_status(plan: RunPlan, overwrite: bool, resume: bool = False) -> str:
    """'new', 'done' (identical finished run: skip), 'redo' (--overwrite) or 'resume' (unfinished
    run, --resume); refuses to replace a different run or to restart an unfinished one unasked."""
    if not (plan.run_dir / CONFIG).is_file():
        return "new"
    if overwrite:
        return "redo"
    config = read_run_config(plan.run_dir)
    recorded = {key: config.get(key) for key in plan.identity()}
    recorded["spec"] = {**(config.get("spec") or {}), "n_ctx": 0, "d_vocab": 0}
    wanted = {**plan.identity(), "spec": {**plan.spec.to_dict(), "n_ctx": 0, "d_vocab": 0}}
    differing = sorted(differences(recorded, wanted))
    if differing:
        raise UsageError(f"{plan.run_dir} holds an incompatible run (different {', '.join(differing)}); "
                         "pass --overwrite to replace it or choose another --out")
    if (plan.run_dir / METRICS).is_file():
        return "done"
    if resume:
        return "resume"
    raise UsageError(f"{plan.run_dir} holds an unfinished run; pass --resume to continue it from its "
                     "last checkpoint or --overwrite to start it again")


def check_out_folder(out: Path, task: Task) -> None:
    if Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out {out} is a file, not a folder; choose a folder for the runs")
    for config_path in sorted(Path(out).rglob(CONFIG)) if Path(out).is_dir() else []:
        try:
            name = json.loads(config_path.read_text()).get("task", {}).get("name")
        except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
            name = None
        if name != task.name:
            raise UsageError(f"{out} already holds a run of task {name!r} ({config_path.parent}); "
                             f"choose another --out for task {task.name!r}")


def start_run(plan: RunPlan, spec: ModelSpec) -> dict:
    """Clear what an earlier attempt left and record the run's identity before the first step."""
    from tasks.resume import STATE
    from tasks.training import SNAPSHOTS

    plan.run_dir.mkdir(parents=True, exist_ok=True)
    for name in (METRICS, WEIGHTS, STATE, LOG):
        (plan.run_dir / name).unlink(missing_ok=True)
    shutil.rmtree(plan.run_dir / SNAPSHOTS, ignore_errors=True)
    config = {**plan.identity(), "format": FORMAT, "spec": spec.to_dict(),
              "vocabulary": plan.task.vocabulary(), "versions": package_versions(), "command": command_line()}
    write_json(plan.run_dir / CONFIG, config)
    return config


def continue_run(plan: RunPlan) -> dict:
    """The unfinished run's config, with this command added to the commands that resumed it."""
    config = read_run_config(plan.run_dir)
    config["resumed_by"] = [*config.get("resumed_by", []), command_line()]
    write_json(plan.run_dir / CONFIG, config)
    return config


def execute(plan: RunPlan, progress: bool = True, resume: bool = False,
            checkpoint_every: int | None = None) -> dict:
    """Train one run (or continue it from its saved train state) and write its folder; returns its metrics."""
    from models import build_model
    from tasks.data import task_dataset, to_batch
    from tasks.evaluate import score_split
    from tasks.resume import STATE
    from tasks.training import SNAPSHOTS, train

    data = task_dataset(plan.task, plan.seed)
    batches = {name: to_batch(split) for name, split in data.items()}
    spec = sized_spec(plan.spec, plan.task, batches)
    model = build_model(spec, seed=plan.seed)
    config = continue_run(plan) if resume else start_run(plan, spec)
    for temp in plan.run_dir.glob(".*.tmp"):  # left by a write that a kill interrupted
        temp.unlink()
    result = train(model, batches["train"], batches["validation"], plan.settings, plan.seed,
                   log_path=plan.run_dir / LOG, progress=progress, snapshot_dir=plan.run_dir / SNAPSHOTS,
                   label=f"{plan.model_name} seed {plan.seed}", state_path=plan.run_dir / STATE,
                   checkpoint_every=checkpoint_every, resume=resume)
    save_checkpoint(plan.run_dir, model, config)
    metrics = {"steps": result.steps, "stop_reason": result.stop_reason,
               "train_seconds": round(result.seconds, 3),
               "accuracy": {name: score_split(model, batch)[0].accuracy for name, batch in batches.items()}}
    write_json(plan.run_dir / METRICS, metrics)
    (plan.run_dir / STATE).unlink(missing_ok=True)  # a finished run is never resumed
    return metrics


def resume_command() -> str:
    """The command being run, with --resume (and without --overwrite, which excludes it)."""
    argv = [arg for arg in command_argv() if arg != "--overwrite"]
    return shlex.join(argv if "--resume" in argv else [*argv, "--resume"])


def train_family(plans: list[RunPlan], overwrite: bool = False, progress: bool = True, resume: bool = False,
                 checkpoint_every: int | None = None, jobs: int = 1) -> list[RunPlan]:
    """Train every plan not already done; with jobs > 1, that many runs at a time in worker processes."""
    if plans:
        check_out_folder(plans[0].run_dir.parent.parent, plans[0].task)
    statuses = [existing_status(plan, overwrite, resume) for plan in plans]
    todo = []
    for plan, status in zip(plans, statuses):
        if status == "done":
            print(f"{plan.run_dir}: already trained with these settings, kept (--overwrite retrains)")
        else:
            if status == "resume":
                print(f"{plan.run_dir}: resuming from its last checkpoint")
            todo.append((plan, status == "resume"))
    runner = train_in_workers if jobs > 1 and len(todo) > 1 else train_in_turn
    try:
        runner(todo, progress, checkpoint_every, jobs)
    except KeyboardInterrupt:
        raise KeyboardInterrupt(f"unfinished runs are kept; continue them from their last checkpoint "
                                f"with: {resume_command()}") from None
    return plans


def report_run(plan: RunPlan, metrics: dict, write=print) -> None:
    heldout = metrics["accuracy"]["heldout"]
    write(f"{plan.model_name:>16} seed {plan.seed}: {metrics['steps']:>5} steps "
          f"({metrics['stop_reason']}, {metrics['train_seconds']:.1f} s), held-out {heldout:.1%}")


def train_in_turn(todo: list, progress: bool, checkpoint_every: int | None, jobs: int) -> None:
    for plan, resume in todo:
        report_run(plan, execute_single_threaded(plan, progress, resume, checkpoint_every))


def execute_single_threaded(plan: RunPlan, progress: bool, resume: bool, checkpoint_every: int | None) -> dict:
    """One intra-op thread per run: these matmuls are too small to gain from a second thread and lose
    badly to oversubscription (measured: 17 -> 1.6 steps/s on a busy 2-core machine). Parallelism
    comes from running whole runs side by side, so results are the same whatever --jobs is."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return execute(plan, progress=progress, resume=resume, checkpoint_every=checkpoint_every)
    finally:
        torch.set_num_threads(threads)


def exit_with_parent(parent: int) -> None:
    """Worker initializer: a killed parent (SIGKILL included) must not leave workers training on,
    writing into run folders nobody watches (seen: orphans overwrote a restarted family's runs)."""
    import threading
    import time

    def watch():
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def train_in_workers(todo: list, progress: bool, checkpoint_every: int | None, jobs: int) -> None:
    """Runs in `jobs` spawned processes (fork after torch has started its thread pool can hang);
    one bar counts finished runs, since per-step bars from several processes would interleave."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm.auto import tqdm

    pool = ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=multiprocessing.get_context("spawn"),
                               initializer=exit_with_parent, initargs=(os.getpid(),))
    bar = tqdm(total=len(todo), desc=f"training {len(todo)} runs, {jobs} at a time", unit="run",
               disable=not progress, dynamic_ncols=True)
    try:
        futures = {pool.submit(execute_single_threaded, plan, False, resume, checkpoint_every): plan
                   for plan, resume in todo}
        for future in as_completed(futures):
            report_run(futures[future], future.result(), write=bar.write)
            bar.update()
    finally:
        bar.close()
        pool.shutdown(wait=True, cancel_futures=True)
