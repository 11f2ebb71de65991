"""Writing a run's files into the runs folder: the driver writes what a worker returned, and a
worker tracing in its own temp folder writes a finished run's files there the same way."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from common.atomic import atomic_write
from common.cli import UsageError
from common.ownership import LOCK, MANIFEST, owned, remove
from models.checkpoint import CONFIG
from tasks.training.runs import METRICS


def write_run(run_dir: Path, files: dict) -> None:
    """Each file atomically; config.json then metrics.json last, so a folder with metrics.json is a
    whole run. What an earlier run left there (its metrics first) is removed before, so the folder
    never holds files of two runs. Names are checked: a worker's answer is data, never a path
    outside the run."""
    for name in files:
        path = PurePosixPath(name)
        if path.is_absolute() or ".." in path.parts or not path.parts:
            raise UsageError(f"a worker returned the file name {name!r} for {run_dir}; refused")
    remove(run_dir / METRICS)
    for old in sorted(run_dir.rglob("*")) if run_dir.is_dir() else []:
        if old.is_file() and old.name not in (MANIFEST, LOCK) and owned(old):
            old.unlink()
    last = [CONFIG, METRICS]
    for name in sorted(files, key=lambda n: (n in last, last.index(n) if n in last else 0, n)):
        if PurePosixPath(name).name == MANIFEST:  # the worker's own; writing here makes the driver's
            continue
        data = files[name]
        atomic_write(run_dir / name, lambda temp, data=data: Path(temp).write_bytes(data))
