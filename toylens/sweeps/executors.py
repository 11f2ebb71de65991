"""Where a sweep's jobs run: local worker processes (the default) or Ray Core tasks.

Both take a picklable `function` and items and call `on_outcome(item, Outcome)` in the driver as
each job ends, in completion order. A job is tried twice, whether its attempt raised or its worker
process died; one that fails twice becomes an Outcome carrying its error, and the others go on.
Ray is imported only by RayExecutor, so nothing else (and never `train`) pays its start-up.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

from common.cli import UsageError
from toylens.workers import costliest_first, how_it_ended, in_one_thread, spawn_pool, stop_all, stop_fork_server

ATTEMPTS = 2


@dataclass(frozen=True)
class Outcome:
    result: object = None
    error: str | None = None  # the last attempt's error, one line, when every attempt failed


def one_line(error: BaseException) -> str:
    """The last line of an error's text (a Ray task error carries the worker's whole traceback)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1] if lines else ''}".strip()


def retire(pool) -> str:
    """Shut down a one-process pool whose worker died; say how it ended (read from the pool's
    process table, private as in stop_all: the public error says only "terminated abruptly")."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=True)
    return f"WorkerDied: the worker process running it died ({how_it_ended(processes)})"


def renew(pools: list, slot: int) -> str:
    """Replace the pool at `slot`, whose worker died, with a fresh one; say how the worker ended."""
    reason = retire(pools[slot])
    pools[slot] = spawn_pool(1)
    return reason


def start_idle(pools: list, running: dict, waiting: deque, function: Callable, items: list) -> None:
    """Give each idle pool the next waiting item."""
    from concurrent.futures.process import BrokenProcessPool

    busy = {slot for slot, _ in running.values()}
    for slot in (slot for slot in range(len(pools)) if slot not in busy):
        if not waiting:
            return
        index = waiting.popleft()
        try:
            future = pools[slot].submit(in_one_thread, function, items[index])
        except BrokenProcessPool:  # its worker died while idle (an OOM kill, say): no job was lost
            renew(pools, slot)
            future = pools[slot].submit(in_one_thread, function, items[index])
        running[future] = (slot, index)


def failure(future, pools: list, slot: int) -> str | None:
    """A finished attempt's error in one line (None if it succeeded); a dead worker's pool is renewed."""
    from concurrent.futures.process import BrokenProcessPool

    error = future.exception()
    if isinstance(error, BrokenProcessPool):
        return renew(pools, slot)
    return None if error is None else one_line(error)


@dataclass
class LocalExecutor:
    """`jobs` worker processes on this machine, each in a pool of its own. A worker that dies
    (SIGKILL, an OOM kill, os._exit in a plugin) breaks only its own pool, so only its job is lost:
    that pool is replaced and the job tried again like any failed attempt, as Ray retries a task.
    (One shared pool would fail every job in flight with BrokenProcessPool and could not say whose
    worker died.) Jobs run in workers even with jobs=1, so a run that kills its process never
    kills the driver."""

    jobs: int = 1
    name: str = "local"

    def run(self, function: Callable, items: list, on_outcome: Callable, cost: Callable | None = None) -> None:
        from concurrent.futures import FIRST_COMPLETED, wait

        waiting = deque(costliest_first(items, cost))
        failures = [0] * len(items)
        pools: list = []  # filled inside the try: a Ctrl-C while they start ends them too
        running: dict = {}  # future -> (its pool's slot, its item's index)
        try:
            pools.extend(spawn_pool(1) for _ in range(min(self.jobs, len(items))))
            while waiting or running:
                start_idle(pools, running, waiting, function, items)
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    slot, index = running.pop(future)
                    error = failure(future, pools, slot)
                    failures[index] += error is not None
                    if error is None:
                        on_outcome(items[index], Outcome(future.result()))
                    elif failures[index] < ATTEMPTS:
                        waiting.appendleft(index)  # tried again next, as Ray retries at once
                    else:
                        on_outcome(items[index], Outcome(error=error))
        except BaseException:
            # Ctrl-C, or the driver failed writing a result: nobody will take the other jobs'
            # results, so end their workers now rather than wait for them to finish.
            stop_all(pools)
            raise
        finally:
            for pool in pools:
                pool.shutdown(wait=True, cancel_futures=True)
            stop_fork_server()


@dataclass
class RayExecutor:
    """Ray Core tasks, 1 CPU each (and `gpus` GPUs when asked). On this machine by default: a fresh
    local instance with `cpus` CPUs (address "local", never a stale cluster a killed instance left
    behind); or the cluster at `address` (else RAY_ADDRESS). A task whose worker dies or raises is
    run once more (max_retries=1, retry_exceptions); a second failure becomes an Outcome error.
    With many jobs per CPU, several go in one task (toylens.sweeps.batches, which says how each
    is still tried twice)."""

    address: str | None = None
    cpus: int | None = None
    gpus: float = 0.0
    name: str = "ray"
    startup_seconds: float = float("nan")
    batch: int | None = None  # jobs per task; None: as toylens.sweeps.batches.batch_size chooses

    def target(self) -> str:
        return self.address or os.environ.get("RAY_ADDRESS") or "local"

    def check_gpus(self, nodes: list) -> None:
        """A task asking for more GPUs than any node has waits forever, and Ray says so only in its
        logs (hidden here), so refuse at once. (An autoscaling cluster could add a GPU node later;
        the clusters this README starts by hand cannot.)"""
        most = max((node["Resources"].get("GPU", 0.0) for node in nodes if node["Alive"]), default=0.0)
        if self.gpus > most:
            raise UsageError(
                f"--gpus-per-run {self.gpus:g}: no node of the Ray cluster ({self.target()}) has "
                f"that many GPUs (most: {most:g}); ask for fewer, or leave it out to train on CPUs"
            )

    def run(self, function: Callable, items: list, on_outcome: Callable, cost: Callable | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise UsageError("--executor ray needs Ray: pip install -e '.[ray]' (or bash setup.sh)") from None
        address = self.target()
        started = time.perf_counter()
        try:
            ray.init(
                address=address,
                num_cpus=self.cpus if address == "local" else None,
                include_dashboard=False,
                log_to_driver=False,
                logging_level=logging.ERROR,
            )
        except (ValueError, ConnectionError) as error:  # e.g. "auto" with no cluster running
            raise UsageError(
                f"Ray at {address!r}: {one_line(error)}; start the cluster (ray start --head) or fix "
                "--address or RAY_ADDRESS"
            ) from None
        try:
            self.startup_seconds = time.perf_counter() - started
            self.check_gpus(ray.nodes())
            self.run_tasks(ray, function, items, on_outcome, costliest_first(items, cost))
        finally:
            ray.shutdown()

    def run_tasks(self, ray, function: Callable, items: list, on_outcome: Callable, order: list[int]) -> None:
        """Send the jobs (in `order`) as Ray tasks, in batches where toylens.sweeps.batches says
        that is cheaper, and hand each job's Outcome to `on_outcome` as its task ends."""
        from toylens.sweeps.batches import batch_size, batches

        size = self.batch or batch_size(len(items), ray.cluster_resources().get("CPU", 1.0))
        task = ray.remote(num_cpus=1, num_gpus=self.gpus, max_retries=0)
        alone = task(in_one_thread)  # a batched job's second attempt: its own task, not retried again
        pending: dict = {}  # ref -> (its jobs' indices, whether it is a batch)
        if size == 1:
            retried = ray.remote(num_cpus=1, num_gpus=self.gpus, max_retries=ATTEMPTS - 1, retry_exceptions=True)
            pending = {retried(in_one_thread).remote(function, items[i]): ([i], False) for i in order}
        else:
            batch = task(run_batch)
            pending = {batch.remote(function, [items[i] for i in b]): (b, True) for b in batches(order, size)}
        try:
            while pending:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                indices, batched = pending.pop(ref)
                try:
                    results = ray.get(ref) if batched else [(ray.get(ref), None)]
                except ray.exceptions.RayError as lost:
                    results = [(None, one_line(lost))] * len(indices)
                del ref  # dropping the last reference frees the runs' files from the object store
                for index, (result, failed) in zip(indices, results):
                    if failed is not None and batched:  # its first attempt failed (or its batch's worker died)
                        pending[alone.remote(function, items[index])] = ([index], False)
                    else:
                        on_outcome(items[index], Outcome(result) if failed is None else Outcome(error=failed))
        except BaseException:
            # Ctrl-C (or a failed write here): on an existing cluster the tasks would run on
            # with nobody to take their files; ended at once, not retried.
            for ref in pending:
                ray.cancel(ref, force=True, recursive=True)
            raise


def run_batch(function: Callable, items: list) -> list[tuple[object, str | None]]:
    """In a Ray worker: `function(item)` for each item, one torch thread each (toylens.workers.in_one_thread),
    as (result, None), or (None, the error in one line) for one that raised."""
    results: list[tuple[object, str | None]] = []
    for item in items:
        try:
            results.append((in_one_thread(function, item), None))
        except Exception as error:  # noqa: BLE001  (any job error is its first attempt; the driver sends it again alone)
            results.append((None, one_line(error)))
    return results


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
        raise UsageError(
            f"nothing answers at Ray address {address!r} ({error.strerror or error}); start the "
            "cluster (ray start --head) or fix --address or RAY_ADDRESS"
        ) from None
