"""Run folders: `<out>/<model>/seed<k>/` holding config.json, model.safetensors, log.jsonl, metrics.json.

Training writes them; probes find and load them here, so both sides agree on one layout.
"""

from __future__ import annotations

import math
import platform
import shlex
import sys
from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from common.cli import MAX_SEED as CLI_MAX_SEED, path_name
from common.jsonfiles import canonical_sha256, differences, short
from common.store import read_json
from models import UsageError
from models.checkpoint import CONFIG, inspect_checkpoint, load_checkpoint, read_config, writer
from models.spec import ModelSpec, stored_spec
from tasks.registry import build_task, get_task_class
from tasks.settings import StopReason, TrainSettings
from tasks.validate import is_int

METRICS = "metrics.json"
LOG = "log.jsonl"
# Every field a run's config.json may hold; another field means another toylens wrote it.
RUN_FIELDS = {
    "format",
    "spec",
    "vocabulary",
    "weights_sha256",
    "task",
    "model_name",
    "seed",
    "data_seed",
    "training",
    "versions",
    "command",
    "resumed_by",
    "run_sha256",
}
# What defines a run: protected by run_sha256 the way the weights are by weights_sha256, so an edit
# (another task variant, seed, spec or vocabulary) is refused rather than believed.
RUN_IDENTITY = ("spec", "task", "seed", "data_seed", "vocabulary", "model_name", "training")
MAX_SEED = CLI_MAX_SEED  # one bound for a seed, stored or given as a flag
MAX_VOCABULARY = 1_000_000


def run_sha256(config: dict) -> str:
    return canonical_sha256({key: config[key] for key in RUN_IDENTITY if key in config})


def package_versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
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
    if sys.argv and Path(sys.argv[0]).name == "toylens":  # the console script: `toylens train ...`
        return ["toylens", *sys.argv[1:]]
    return ["python", *sys.argv]


def command_line() -> str:
    return shlex.join(command_argv())


def read_run_config(run_dir: Path) -> dict:
    """config.json of a run folder after its one schema check: known fields only, each of exactly
    its type, and what defines the run unchanged since toylens wrote it."""
    config = read_config(run_dir)
    where = Path(run_dir) / CONFIG
    unknown = sorted(set(config) - RUN_FIELDS)
    if unknown:
        raise UsageError(
            f"{where} has field(s) {unknown} that this toylens "
            f"({package_versions()['toylens']}) does not know: written by {writer(config)} or "
            "edited by hand; remove them, use the toylens that wrote them, or retrain the run"
        )
    check_config_types(config, where)
    if config["run_sha256"] != run_sha256(config):
        raise UsageError(
            f"{where}: what defines the run ({', '.join(RUN_IDENTITY)}) was changed after "
            "toylens wrote it (run_sha256 differs); restore the file or retrain the run"
        )
    return config


def check_config_types(config: dict, where: Path) -> None:
    def bad(field: str, rule: str) -> UsageError:
        return UsageError(
            f"{where}: {field} must be {rule}, got {short(config.get(field))}; restore the file or retrain the run"
        )

    for field in ("task", "model_name", "seed", "training", "run_sha256"):
        if field not in config:
            raise UsageError(f"{where} is missing field {field!r}; retrain the run")
    task = config["task"]
    if not (
        isinstance(task, dict)
        and set(task) == {"name", "params"}
        and isinstance(task["name"], str)
        and isinstance(task["params"], dict)
    ):
        raise bad("task", 'an object {"name": str, "params": object}')
    path_name(task["name"], f"{where}: task name")
    path_name(config["model_name"], f"{where}: model_name")
    for field in ("seed", "data_seed"):
        if field in config and not (is_int(config[field]) and 0 <= config[field] <= MAX_SEED):
            raise bad(field, f"an integer from 0 to {MAX_SEED}")
    vocabulary = config["vocabulary"]
    if not (
        isinstance(vocabulary, list)
        and 0 < len(vocabulary) <= MAX_VOCABULARY
        and all(isinstance(token, str) for token in vocabulary)
    ):
        raise bad("vocabulary", f"a list of 1 to {MAX_VOCABULARY} strings")
    if not isinstance(config["training"], dict):
        raise bad("training", "an object of training settings")
    stored_spec(config["spec"], where)
    try:
        TrainSettings.from_dict(config["training"])
    except UsageError as error:
        raise UsageError(f"{where}: training: {error}") from None
    for field in ("weights_sha256", "run_sha256"):
        if field in config and not (isinstance(config[field], str) and len(config[field]) == 64):
            raise bad(field, "a SHA-256 hex string")
    if "command" in config and not isinstance(config["command"], str):
        raise bad("command", "a string")
    if "resumed_by" in config and not (
        isinstance(config["resumed_by"], list) and all(isinstance(c, str) for c in config["resumed_by"])
    ):
        raise bad("resumed_by", "a list of strings")
    if "versions" in config and not (
        isinstance(config["versions"], dict)
        and all(isinstance(v, (str, type(None))) for v in config["versions"].values())
    ):
        raise bad("versions", "an object of version strings")


def metrics_sha256(metrics: dict) -> str:
    return canonical_sha256({key: value for key, value in metrics.items() if key != "sha256"})


def check_metrics(metrics, path: Path, config: dict) -> dict:
    """metrics.json's one schema check: exact types, and unchanged since toylens wrote it (an edited
    accuracy is refused, never printed); returned with its stop_reason as a StopReason."""
    fix = "retrain the run (or restore the file)"
    if not isinstance(metrics, dict):
        raise UsageError(f"{path} must hold a JSON object; {fix}")
    steps, accuracy = metrics.get("steps"), metrics.get("accuracy")
    if not (is_int(steps) and 0 <= steps <= TrainSettings.from_dict(config["training"]).max_steps):
        raise UsageError(f"{path}: steps must be an integer from 0 to the run's max_steps, got {short(steps)}; {fix}")
    if not (
        isinstance(accuracy, dict)
        and set(accuracy) == {"train", "validation", "heldout"}
        and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= 1
            for v in accuracy.values()
        )
    ):
        raise UsageError(
            f"{path}: accuracy must map train, validation and heldout to numbers in [0, 1], "
            f"got {short(accuracy)}; {fix}"
        )
    reasons = [reason.value for reason in StopReason]
    if metrics.get("stop_reason") not in reasons:
        raise UsageError(
            f"{path}: stop_reason must be one of {reasons}, got {short(metrics.get('stop_reason'))}; {fix}"
        )
    if not isinstance(metrics.get("evaluation"), dict):
        raise UsageError(f"{path}: evaluation must be an object, got {short(metrics.get('evaluation'))}; {fix}")
    if metrics.get("sha256") != metrics_sha256(metrics):
        raise UsageError(
            f"{path} was changed after toylens wrote it (its sha256 differs), so its numbers cannot be believed; {fix}"
        )
    return {**metrics, "stop_reason": StopReason(metrics["stop_reason"])}


def task_from_config(config: dict, where: Path):
    """The task object a run was trained on, rebuilt from its recorded name and parameters."""
    task_info = config["task"]
    cls = get_task_class(task_info["name"])
    try:
        return build_task(cls, task_info["params"])
    except UsageError as error:
        raise UsageError(f"{where}: {error}; retrain the run") from None


@dataclass(frozen=True)
class Run:
    """A finished training run on disk."""

    path: Path

    @cached_property
    def config(self) -> dict:
        return read_run_config(self.path)

    @cached_property
    def spec(self) -> ModelSpec:
        """The model's spec, parsed from config.json (read_run_config has refused a malformed one)."""
        return ModelSpec.from_dict(self.config["spec"])

    @property
    def model_name(self) -> str:
        return self.config["model_name"]

    @property
    def seed(self) -> int:
        return self.config["seed"]

    @cached_property
    def task(self):
        return task_from_config(self.config, self.path)

    @cached_property
    def metrics(self) -> dict:
        path = self.path / METRICS
        return check_metrics(read_json(path, "retrain the run"), path, self.config)

    def check(self) -> None:
        """Every check that needs no torch, so a bad run fails before any model loads."""
        inspect_checkpoint(self.path)
        _ = self.metrics
        if self.config["vocabulary"] != self.task.vocabulary():
            raise UsageError(
                f"{self.path / CONFIG}: its vocabulary differs from task {self.task.name!r}'s "
                "(edited, or made by another version of the task); retrain the run"
            )

    def load_model(self, device=None):
        """The trained model in eval mode, on the CPU or `device` ("cuda", ...): probes follow the
        model to whichever device it is on."""
        model = load_checkpoint(self.path)[0]
        return model if device is None else model.to(device, print_details=False)

    def batches(self) -> dict:
        """The run's splits as tensors, regenerated (or read from cache) from task and seed, once
        per Run: the report's probes each ask for them (~0.75 s a time for induction's 20,000
        training sequences). Callers select from them and never modify them."""
        return self._batches

    @cached_property
    def _batches(self) -> dict:
        from tasks.data import task_dataset, to_batch

        data = task_dataset(self.task, self.config.get("data_seed", self.seed))
        batches = {name: to_batch(split) for name, split in data.items()}
        n_ctx = self.spec.n_ctx
        longest = max(batch.inputs.shape[1] for batch in batches.values())
        if longest > n_ctx:
            raise UsageError(
                f"{self.path}: the task's sequences need {longest} positions but the model's "
                f"context is n_ctx={n_ctx}; use the task parameters the run was trained with"
            )
        return batches


def find_runs(runs_dir: Path, family: bool = True) -> list[Run]:
    """Every finished run under `runs_dir`, sorted by model then seed; one task only. With `family`
    (a train's runs folder, a sweep's grid point: what a comparison or report reads) also one task
    variant and one run per model and seed, else a copied run folder or runs of other task
    parameters would count as more seeds of one experiment; a sweep's root repeats both."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        raise UsageError(f"runs folder {runs_dir} does not exist; train first, e.g. python -m tasks.winograd train")
    if runs_dir.is_symlink():
        raise UsageError(f"runs folder {runs_dir} is a symbolic link; point at the folder itself")
    runs = [
        Run(path.parent)
        for path in sorted(runs_dir.rglob(CONFIG))
        if (path.parent / METRICS).is_file() and not path.parent.is_symlink()
    ]
    if not runs:
        raise UsageError(
            f"runs folder {runs_dir} holds no finished runs; train first, e.g. toylens train <task> --out {runs_dir}"
        )
    tasks = sorted({run.config["task"]["name"] for run in runs})
    if len(tasks) > 1:
        raise UsageError(f"runs folder {runs_dir} mixes runs of tasks {tasks}; point at one task's folder")
    for run in runs:
        run.check()
    if family:
        check_one_family(runs_dir, runs)
    return sorted(runs, key=lambda run: (run.model_name, run.seed))


def check_one_family(runs_dir: Path, runs: list[Run]) -> None:
    """One task variant, and one run per model and seed."""
    first, seen = runs[0], {}
    for run in runs:
        differing = differences(first.config["task"]["params"], run.config["task"]["params"])
        if differing:
            raise UsageError(
                f"runs folder {runs_dir} mixes variants of task {first.config['task']['name']!r}: "
                f"{first.path} and {run.path} differ in {', '.join(differing)}; point at a folder "
                "of one variant (a train's runs folder, or one grid point of a sweep)"
            )
        other = seen.setdefault((run.model_name, run.seed), run.path)
        if other != run.path:
            raise UsageError(
                f"{other} and {run.path} are both {run.model_name} seed {run.seed}: a comparison counts "
                "each seed once; point at a folder holding one of them (a sweep's grid point, or a "
                "train's runs folder)"
            )
