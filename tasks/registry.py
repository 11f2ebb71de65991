"""Tasks are found through the `toylens.tasks` entry-point group, built-ins included."""

from __future__ import annotations

from importlib.metadata import entry_points

from models import UsageError

GROUP = "toylens.tasks"


def origin(entry) -> str:
    package = entry.dist.name if getattr(entry, "dist", None) else "unknown package"
    return f"{entry.value} from package {package}"


def load_task_class(entry) -> type:
    from tasks.base import Task

    try:
        cls = entry.load()
    # A third-party plugin can fail in any way on import; say which one, not a traceback.
    except Exception as error:  # noqa: BLE001
        raise UsageError(f"task plugin {entry.name!r} ({origin(entry)}) failed to import: "
                         f"{type(error).__name__}: {error}; fix or uninstall that package") from None
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise UsageError(f"task plugin {entry.name!r} ({origin(entry)}) is not a subclass of "
                         "tasks.base.Task; point the entry point at the task class")
    return cls


def task_classes(entries=None) -> dict[str, type]:
    """Task classes by name, from `entries` (default: every installed plugin)."""
    found: dict[str, tuple[type, object]] = {}
    for entry in entry_points(group=GROUP) if entries is None else entries:
        cls = load_task_class(entry)
        name = getattr(cls, "name", entry.name)
        if name in found and found[name][0] is not cls:
            raise UsageError(f"two task plugins are named {name!r}: {origin(found[name][1])} and "
                             f"{origin(entry)}; uninstall one or rename its task")
        found[name] = (cls, entry)
    return {name: found[name][0] for name in sorted(found)}


def get_task_class(name: str) -> type:
    # Load only the plugins registered under `name` first, so one broken unrelated plugin does not
    # stop every task; a class whose name differs from its entry point's needs the full scan.
    named = task_classes([entry for entry in entry_points(group=GROUP) if entry.name == name])
    if name in named:
        return named[name]
    classes = task_classes()
    if name not in classes:
        known = ", ".join(classes) or "none (is toylens installed with pip install -e .?)"
        raise UsageError(f"unknown task {name!r}; known tasks: {known}")
    return classes[name]
