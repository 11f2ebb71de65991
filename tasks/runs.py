"""Run folders: `<out>/<model>/seed<k>/` holding config.json, model.safetensors, log.jsonl, metrics.json.

Training writes them; probes find and load them here, so both sides agree on one layout.
"""

from __future__ import annotations

import json
import platform
import sys
from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from models import UsageError
from models.checkpoint import CONFIG, load_checkpoint, read_config
from tasks.registry import get_task_class

METRICS = "metrics.json"
LOG = "log.jsonl"


def package_versions() -> dict:
    found = {"python": platform.python_version()}
    for package in ("torch", "transformer-lens", "toylens", "datasets", "safetensors"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


def command_line() -> str:
    return " ".join([Path(sys.executable).name, *sys.argv])


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
        return read_config(self.path)

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
        return json.loads(path.read_text()) if path.is_file() else {}

    def load_model(self):
        return load_checkpoint(self.path)[0]

    def batches(self) -> dict:
        """The run's splits as tensors, regenerated (or read from cache) from task and seed."""
        from tasks.data import task_dataset, to_batch

        data = task_dataset(self.task, int(self.config.get("data_seed", self.seed)))
        return {name: to_batch(split) for name, split in data.items()}


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
    return sorted(runs, key=lambda run: (run.model_name, run.seed))
