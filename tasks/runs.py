"""Run folders: `<out>/<model>/seed<k>/` holding config.json, model.safetensors, log.jsonl, metrics.json.

Training writes them; probes find and load them here, so both sides agree on one layout.
"""

from __future__ import annotations

import json
import platform
import shlex
import sys
from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from models import UsageError
from models.checkpoint import CONFIG, inspect_checkpoint, load_checkpoint, read_config, writer
from tasks.registry import get_task_class

METRICS = "metrics.json"
LOG = "log.jsonl"
# Every field a run's config.json may hold; another field means another toylens wrote it.
RUN_FIELDS = {"format", "spec", "vocabulary", "weights_sha256", "task", "model_name", "seed", "data_seed",
              "training", "versions", "command", "resumed_by"}


def package_versions() -> dict:
    found = {"python": platform.python_version()}
    for package in ("torch", "transformer-lens", "toylens", "datasets", "safetensors"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def command_argv() -> list[str]:
    """The command as typed: `python -m tasks.winograd train ...` rather than the module's file path."""
    main_spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if main_spec is not None:
        return ["python", "-m", main_spec.name.removesuffix(".__main__"), *sys.argv[1:]]
    return ["python", *sys.argv]


def command_line() -> str:
    return shlex.join(command_argv())


def read_run_config(run_dir: Path) -> dict:
    """config.json of a run folder, refusing fields this toylens does not know."""
    config = read_config(run_dir)
    unknown = sorted(set(config) - RUN_FIELDS)
    if unknown:
        raise UsageError(f"{Path(run_dir) / CONFIG} has field(s) {unknown} that this toylens "
                         f"({package_versions()['toylens']}) does not know: written by {writer(config)} or "
                         "edited by hand; remove them, use the toylens that wrote them, or retrain the run")
    return config


def task_from_config(config: dict, where: Path):
    """The task object a run was trained on, rebuilt from its recorded name and parameters."""
    task_info = config.get("task")
    if not isinstance(task_info, dict) or "name" not in task_info:
        raise UsageError(f"{where}: config.json has no task name; retrain the run")
    cls = get_task_class(task_info["name"])
    params = task_info.get("params", {})
    try:
        return cls(cls.Params(**params))
    except TypeError as error:
        raise UsageError(f"{where}: task parameters {sorted(params)} do not fit task "
                         f"{cls.name!r} ({error}); retrain the run") from None


@dataclass(frozen=True)
class Run:
    """A finished training run on disk."""

    path: Path

    @cached_property
    def config(self) -> dict:
        return read_run_config(self.path)

    @property
    def model_name(self) -> str:
        return self.config.get("model_name", self.path.parent.name)

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0))

    @cached_property
    def task(self):
        return task_from_config(self.config, self.path)

    @cached_property
    def metrics(self) -> dict:
        path = self.path / METRICS
        try:
            return json.loads(path.read_text()) if path.is_file() else {}
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise UsageError(f"{path} is not valid JSON; retrain the run") from None

    def check(self) -> None:
        """Every check that needs no torch, so a bad run fails before any model loads."""
        inspect_checkpoint(self.path)
        if not isinstance(self.metrics, dict):
            raise UsageError(f"{self.path / METRICS} must hold a JSON object; retrain the run")
        if self.config["vocabulary"] != self.task.vocabulary():
            raise UsageError(f"{self.path / CONFIG}: its vocabulary differs from task {self.task.name!r}'s "
                             "(edited, or made by another version of the task); retrain the run")

    def load_model(self):
        return load_checkpoint(self.path)[0]

    def batches(self) -> dict:
        """The run's splits as tensors, regenerated (or read from cache) from task and seed, once
        per Run: the report's probes each ask for them (~0.75 s a time for induction's 20,000
        training sequences). Callers select from them and never modify them."""
        return self._batches

    @cached_property
    def _batches(self) -> dict:
        from tasks.data import task_dataset, to_batch

        data = task_dataset(self.task, int(self.config.get("data_seed", self.seed)))
        batches = {name: to_batch(split) for name, split in data.items()}
        n_ctx = self.config["spec"]["n_ctx"]
        longest = max(batch.inputs.shape[1] for batch in batches.values())
        if longest > n_ctx:
            raise UsageError(f"{self.path}: the task's sequences need {longest} positions but the model's "
                             f"context is n_ctx={n_ctx}; use the task parameters the run was trained with")
        return batches


def find_runs(runs_dir: Path) -> list[Run]:
    """Every finished run under `runs_dir`, sorted by model then seed; one task only."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise UsageError(f"runs folder {runs_dir} does not exist; train first, e.g. "
                         "python -m tasks.winograd train")
    runs = [Run(path.parent) for path in sorted(runs_dir.rglob(CONFIG))
            if (path.parent / METRICS).is_file()]
    if not runs:
        raise UsageError(f"runs folder {runs_dir} holds no finished runs; train first, e.g. "
                         f"python -m tasks train <task> --out {runs_dir}")
    tasks = sorted({run.config.get("task", {}).get("name", "?") for run in runs})
    if len(tasks) > 1:
        raise UsageError(f"runs folder {runs_dir} mixes runs of tasks {tasks}; point at one task's folder")
    for run in runs:
        run.check()
    return sorted(runs, key=lambda run: (run.model_name, run.seed))
