"""Where a sweep's jobs run: a local process pool (the default) or Ray Core tasks.

Both take a picklable `function` and items and call `on_outcome(item, Outcome)` in the driver as
each job ends, in completion order. A job is tried twice; one that fails twice becomes an
Outcome carrying its error, and the others go on. Ray is imported only by RayExecutor, so nothing
else (and never `train`) pays its start-up.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from functools import partial
from typing import Callable

from common.cli import UsageError
from toylens.workers import in_one_thread, map_jobs

ATTEMPTS = 2


@dataclass(frozen=True)
class Outcome:
    result: object = None
    error: str | None = None      # the last attempt's error, one line, when every attempt failed


def one_line(error: BaseException) -> str:
    """The last line of an error's text (a Ray task error carries the worker's whole traceback)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}".strip()


def attempted(function: Callable, item) -> Outcome:
    error = None
    for _ in range(ATTEMPTS):
        try:
            return Outcome(function(item))
        except Exception as failure:  # any failure of a job is recorded; the sweep goes on
            error = one_line(failure)
    return Outcome(error=error)


@dataclass
class LocalExecutor:
    """`jobs` spawned processes on this machine (toylens's pool). A worker process that dies takes
    the pool down with it; Ray's tasks survive that (see RayExecutor)."""

    jobs: int = 1
    name: str = "local"

    def run(self, function: Callable, items: list, on_outcome: Callable, cost: Callable | None = None) -> None:
        map_jobs(partial(attempted, function), items, self.jobs, "", progress=False,
                 on_result=lambda item, outcome, _write: on_outcome(item, outcome), cost=cost)


@dataclass
class RayExecutor:
    """Ray Core tasks, 1 CPU each (and `gpus` GPUs when asked). On this machine by default: a fresh
    local instance with `cpus` CPUs (address "local", never a stale cluster a killed instance left
    behind); or the cluster at `address` (else RAY_ADDRESS). A task whose worker dies or raises is
    run once more (max_retries=1, retry_exceptions); a second failure becomes an Outcome error."""

    address: str | None = None
    cpus: int | None = None
    gpus: float = 0.0
    name: str = "ray"
    startup_seconds: float = float("nan")

    def target(self) -> str:
        return self.address or os.environ.get("RAY_ADDRESS") or "local"

    def run(self, function: Callable, items: list, on_outcome: Callable, cost: Callable | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise UsageError("--executor ray needs Ray: pip install -e '.[ray]' (or bash setup.sh)") from None
        address = self.target()
        started = time.perf_counter()
        try:
            ray.init(address=address, num_cpus=self.cpus if address == "local" else None, include_dashboard=False,
                     log_to_driver=False, logging_level="ERROR")
        except (ValueError, ConnectionError) as error:   # e.g. "auto" with no cluster running
            raise UsageError(f"Ray at {address!r}: {one_line(error)}; start the cluster (ray start --head) or fix "
                             "--address or RAY_ADDRESS") from None
        try:
            self.startup_seconds = time.perf_counter() - started
            remote = ray.remote(num_cpus=1, num_gpus=self.gpus, max_retries=ATTEMPTS - 1,
                                retry_exceptions=True)(in_one_thread)
            ordered = sorted(items, key=lambda item: -cost(item)) if cost else list(items)
            refs = {remote.remote(function, item): item for item in ordered}
            pending = list(refs)
            while pending:
                (ref,), pending = ray.wait(pending, num_returns=1)
                try:
                    outcome = Outcome(ray.get(ref))
                except ray.exceptions.RayError as error:
                    outcome = Outcome(error=one_line(error))
                # Dropping the last reference frees the run's files from the object store.
                on_outcome(refs.pop(ref), outcome)
                del ref
        finally:
            ray.shutdown()


def make_executor(name: str, jobs: int, address: str | None = None, gpus: float = 0.0):
    if name == "ray":
        executor = RayExecutor(address=address, cpus=jobs, gpus=gpus)
        check_reachable(executor.target())
        return executor
    return LocalExecutor(jobs=jobs)


def check_reachable(address: str) -> None:
    """Refuse, before any work, a Ray address that is malformed or where nothing answers: ray.init
    would end the first in a traceback and retry the second for minutes."""
    if address in ("local", "auto"):
        return
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not (colon and host and port.isdigit() and int(port) < 65536):
        raise UsageError(f"Ray address {address!r} is not HOST:PORT (e.g. 10.0.0.5:6379); fix --address or RAY_ADDRESS")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as error:
        raise UsageError(f"nothing answers at Ray address {address!r} ({error.strerror or error}); start the "
                         "cluster (ray start --head) or fix --address or RAY_ADDRESS") from None
