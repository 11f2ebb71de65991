"""Where a job's time goes: named stages, timed in wall and CPU seconds while a recorder is active
(a sweep's worker runs each run under one), free otherwise. A stage entered inside another is
recorded under both names joined by '/' ("trace/activation patching"), so a parent's seconds
include its children's and the rest is the parent's own work. A stage entered twice adds up."""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

_RECORDER: ContextVar[Stages | None] = ContextVar("stages", default=None)
_PATH: ContextVar[tuple[str, ...]] = ContextVar("stage_path", default=())


@dataclass
class Stages:
    """Seconds per stage path, in the order the stages were first entered."""

    wall: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, wall: float, cpu: float) -> None:
        self.wall[name] = self.wall.get(name, 0.0) + wall
        self.cpu[name] = self.cpu.get(name, 0.0) + cpu
        self.calls[name] = self.calls.get(name, 0) + 1

    def record(self) -> dict:
        """As stored: per stage path, its wall and CPU seconds and how many times it ran."""
        return {
            name: {"wall_s": round(self.wall[name], 4), "cpu_s": round(self.cpu[name], 4), "calls": self.calls[name]}
            for name in self.wall
        }


@contextmanager
def recording():
    """Record every stage entered inside this block (in this thread) into the Stages yielded."""
    stages = Stages()
    token, path = _RECORDER.set(stages), _PATH.set(())
    try:
        yield stages
    finally:
        _PATH.reset(path)
        _RECORDER.reset(token)


@contextmanager
def stage(name: str):
    """Time this block as `name` (under the enclosing stages' names) when a recorder is active."""
    stages = _RECORDER.get()
    if stages is None:
        yield
        return
    path = (*_PATH.get(), name)
    token = _PATH.set(path)
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield
    finally:
        stages.add("/".join(path), time.perf_counter() - wall, time.process_time() - cpu)
        _PATH.reset(token)


def timed(name: str):
    """Decorator: every call of the function is the stage `name`."""

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            with stage(name):
                return function(*args, **kwargs)

        return wrapper

    return decorate
