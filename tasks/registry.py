"""Tasks are found through the `toylens.tasks` entry-point group, built-ins included."""

from __future__ import annotations

import dataclasses
from importlib.metadata import entry_points

from common.cli import path_name
from models import UsageError
from tasks.base import Task, plugin_call

GROUP = "toylens.tasks"


def origin(entry) -> str:
    package = entry.dist.name if getattr(entry, "dist", None) else "unknown package"
    return f"{entry.value} from package {package}"


def shadowing_folder(module_name: str) -> str | None:
    """The folder a plugin's module resolved to when a plain folder of that name (a namespace
    package, say a project folder in the current directory) hid the installed module."""
    import sys

    module = sys.modules.get(module_name.split(".")[0])
    if module is None or getattr(module, "__file__", None) is not None:
        return None
    return ", ".join(getattr(module, "__path__", [])) or module_name


TIMEOUT = "TOYLENS_PLUGIN_TIMEOUT"  # seconds a plugin's import may take (default 60; 0: no limit)


class ImportTimedOut(BaseException):
    """Raised into a plugin's import when its time is up (a BaseException: the plugin's own
    `except Exception` does not swallow it)."""


def import_seconds() -> float:
    import math
    import os

    text = os.environ.get(TIMEOUT, "60")
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not (math.isfinite(seconds) and 0 <= seconds <= 86_400):
        raise UsageError(f"{TIMEOUT}={text!r} is not a number of seconds from 0 to 86400 (0: no limit); default 60")
    return seconds


def time_limited(load, what: str):
    """`load()` (a plugin's import: untrusted code) stopped after import_seconds(): an import that
    hangs is one line naming the plugin, not a silent hang. Only the main thread can set the alarm;
    elsewhere (a worker's thread) the import runs unlimited."""
    import signal
    import threading

    seconds = import_seconds()
    if not seconds or threading.current_thread() is not threading.main_thread():
        return load()

    def expired(signum, frame):
        raise ImportTimedOut

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return load()
    except ImportTimedOut:
        raise UsageError(
            f"{what} did not finish importing within {seconds:g} s (it hangs, or works at import); fix or "
            f"uninstall it, or allow it more time with {TIMEOUT}=SECONDS"
        ) from None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def load_task_class(entry) -> type[Task]:
    try:
        cls = time_limited(entry.load, f"task plugin {entry.name!r} ({origin(entry)})")
    # A third-party plugin can fail in any way on import (sys.exit included); say which one.
    except UsageError:
        raise
    except (Exception, SystemExit) as error:  # noqa: BLE001
        shadow = shadowing_folder(entry.module)
        if shadow:
            raise UsageError(
                f"task plugin {entry.name!r}: module {entry.module!r} was found as the folder "
                f"{shadow} (no __init__.py: e.g. the plugin's own project folder under the current "
                "directory) instead of the installed plugin; run from another folder"
            ) from None
        raise UsageError(
            f"task plugin {entry.name!r} ({origin(entry)}) failed to import: "
            f"{type(error).__name__}: {str(error)[:200]}; fix or uninstall that package"
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise UsageError(
            f"task plugin {entry.name!r} ({origin(entry)}) is not a subclass of "
            "tasks.base.Task; point the entry point at the task class"
        )
    where = f"task plugin {entry.name!r} ({origin(entry)})"
    if not isinstance(getattr(cls, "name", None), str):
        raise UsageError(f"{where} has no task name; give the class `name = {entry.name!r}`")
    path_name(cls.name, f"{where}: task name")
    if not (isinstance(cls.Params, type) and dataclasses.is_dataclass(cls.Params)):
        raise UsageError(
            f"{where}: Params must be a frozen dataclass (the class, not an instance), got "
            f"{cls.Params!r}; or leave it out if the task has no parameters"
        )
    return cls


def task_classes(entries=None, skip_broken_except: str | None = None) -> dict[str, type[Task]]:
    """Task classes by name, from `entries` (default: every installed plugin). With
    `skip_broken_except`, a plugin that fails to import is skipped unless registered under that
    name: it claims no name, so it need not stop an unrelated task."""
    found: dict[str, tuple[type[Task], object]] = {}
    for entry in entry_points(group=GROUP) if entries is None else entries:
        try:
            cls = load_task_class(entry)
        except UsageError:
            if skip_broken_except is None or entry.name == skip_broken_except:
                raise
            continue
        name = cls.name
        if name in found and found[name][0] is not cls:
            raise UsageError(
                f"two task plugins are named {name!r}: {origin(found[name][1])} and "
                f"{origin(entry)}; uninstall one or rename its task"
            )
        found[name] = (cls, entry)
    return {name: found[name][0] for name in sorted(found)}


def get_task_class(name: str) -> type[Task]:
    # Every plugin loads, since any of them may claim `name` under another entry-point name.
    classes = task_classes(skip_broken_except=name)
    if name not in classes:
        known = ", ".join(classes) or "none (is toylens installed with pip install -e .?)"
        raise UsageError(f"unknown task {name!r}; known tasks: {known}")
    return classes[name]


def build_task(cls: type[Task], values: dict) -> Task:
    """`cls(cls.Params(**values))` with each value of exactly its field's type (JSON and the command
    line give int, float, str or bool); anything a plugin raises becomes one line naming it."""
    import math

    fields = {f.name: f for f in dataclasses.fields(cls.Params)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise UsageError(f"task {cls.name!r} has no parameter(s) {unknown}; known: {sorted(fields)}")
    for name, value in values.items():
        kind = param_type(cls, fields[name])
        ok = type(value) is kind or (kind is float and type(value) is int)
        if not ok:
            raise UsageError(f"task {cls.name!r} parameter {name} must be {kind.__name__}, got {value!r}")
        if kind is float and not math.isfinite(value):  # JSON has no nan (and nan != nan: no rerun would match)
            raise UsageError(f"task {cls.name!r} parameter {name} must be a finite number, got {value!r}")
    params = plugin_call(cls, "Params", cls.Params, **values)
    return cls(params)


def param_type(cls: type[Task], field) -> type:
    """int, float, str or bool: the field types a command-line flag and a JSON file can carry."""
    kind = {"int": int, "float": float, "str": str, "bool": bool}.get(str(field.type), field.type)
    if kind not in (int, float, str, bool):
        raise UsageError(
            f"task plugin {cls.name!r}: Params field {field.name!r} has type {field.type!r}; "
            "task parameters must be int, float, str or bool"
        )
    return kind
