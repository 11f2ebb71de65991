"""Train a task's model family over seeds into run folders, refusing to mix incompatible runs."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from models import ModelSpec, UsageError
from models.checkpoint import CONFIG, read_config, save_checkpoint, write_json
from tasks.base import Task
from tasks.runs import LOG, METRICS, command_line, package_versions
from tasks.training import TrainSettings, settings_dict, train


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


def existing_status(plan: RunPlan, overwrite: bool) -> str:
    """'new', 'done' (identical finished run: skip) or 'redo'; refuses to overwrite a different run."""
    if not (plan.run_dir / CONFIG).is_file():
        return "new"
    if overwrite:
        return "redo"
    config = read_config(plan.run_dir)
    recorded = {key: config.get(key) for key in plan.identity()}
    recorded["spec"] = {**(config.get("spec") or {}), "n_ctx": 0, "d_vocab": 0}
    wanted = {**plan.identity(), "spec": {**plan.spec.to_dict(), "n_ctx": 0, "d_vocab": 0}}
    differing = sorted(key for key in wanted if recorded.get(key) != wanted[key])
    if differing:
        raise UsageError(f"{plan.run_dir} holds an incompatible run (different {', '.join(differing)}); "
                         "pass --overwrite to replace it or choose another --out")
    return "done" if (plan.run_dir / METRICS).is_file() else "redo"


def check_out_folder(out: Path, task: Task) -> None:
    for config_path in sorted(Path(out).rglob(CONFIG)) if Path(out).is_dir() else []:
        try:
            name = json.loads(config_path.read_text()).get("task", {}).get("name")
        except (json.JSONDecodeError, AttributeError, UnicodeDecodeError):
            name = None
        if name != task.name:
            raise UsageError(f"{out} already holds a run of task {name!r} ({config_path.parent}); "
                             f"choose another --out for task {task.name!r}")


def execute(plan: RunPlan, progress: bool = True) -> dict:
    """Train one run and write its folder; returns its metrics."""
    from models import build_model
    from tasks.data import task_dataset, to_batch
    from tasks.evaluate import score_model

    data = task_dataset(plan.task, plan.seed)
    batches = {name: to_batch(split) for name, split in data.items()}
    spec = sized_spec(plan.spec, plan.task, batches)
    model = build_model(spec, seed=plan.seed)
    plan.run_dir.mkdir(parents=True, exist_ok=True)
    (plan.run_dir / METRICS).unlink(missing_ok=True)
    result = train(model, batches["train"], batches["validation"], plan.settings, plan.seed,
                   log_path=plan.run_dir / LOG, progress=progress,
                   label=f"{plan.model_name} seed {plan.seed}")
    config = {**plan.identity(), "spec": spec.to_dict(), "vocabulary": plan.task.vocabulary(),
              "versions": package_versions(), "command": command_line()}
    save_checkpoint(plan.run_dir, model, config)
    metrics = {"steps": result.steps, "stop_reason": result.stop_reason,
               "train_seconds": round(result.seconds, 3),
               "accuracy": {name: score_model(model, batch).accuracy for name, batch in batches.items()}}
    write_json(plan.run_dir / METRICS, metrics)
    return metrics


def train_family(plans: list[RunPlan], overwrite: bool = False, progress: bool = True) -> list[RunPlan]:
    if plans:
        check_out_folder(plans[0].run_dir.parent.parent, plans[0].task)
    statuses = [existing_status(plan, overwrite) for plan in plans]
    for plan, status in zip(plans, statuses):
        if status == "done":
            print(f"{plan.run_dir}: already trained with these settings, kept (--overwrite retrains)")
            continue
        metrics = execute(plan, progress=progress)
        heldout = metrics["accuracy"]["heldout"]
        print(f"{plan.model_name:>16} seed {plan.seed}: {metrics['steps']:>5} steps "
              f"({metrics['stop_reason']}, {metrics['train_seconds']:.1f} s), held-out {heldout:.1%}")
    return plans
