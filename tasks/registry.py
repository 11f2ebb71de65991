"""Tasks are found through the `toylens.tasks` entry-point group, built-ins included."""

from __future__ import annotations

from importlib.metadata import entry_points

from models import UsageError

GROUP = "toylens.tasks"


def task_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for entry in entry_points(group=GROUP):
        cls = entry.load()
        name = getattr(cls, "name", entry.name)
        if name in found and found[name] is not cls:
            raise UsageError(f"two task plugins are named {name!r} ({found[name].__module__} and "
                             f"{cls.__module__}); uninstall or rename one")
        found[name] = cls
    return dict(sorted(found.items()))


def get_task_class(name: str) -> type:
    classes = task_classes()
    if name not in classes:
        known = ", ".join(classes) or "none (is toylens installed with pip install -e .?)"
        raise UsageError(f"unknown task {name!r}; known tasks: {known}")
    return classes[name]
