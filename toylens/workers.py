"""Independent jobs (training runs, per-run report analyses) side by side in worker processes,
one torch thread each.

The models are tiny: a second intra-op thread adds synchronisation, not speed, and loses badly to
oversubscription (measured: 17 -> 1.6 steps/s on a busy 2-core machine). Parallelism comes from
whole jobs running side by side, so results are the same whatever the number of jobs.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

from common.cli import UsageError
from common.interrupts import deliver_again, held_interrupts


def default_jobs() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def in_one_thread(function: Callable, *args):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return function(*args)
    except Terminated:
        # Its job has unwound (temp folders and half-written temp files removed): end the worker
        # now, rather than hand the pool a result nobody will read.
        os._exit(Terminated.CODE)
    finally:
        torch.set_num_threads(threads)


class Terminated(SystemExit):
    """Raised in a worker by SIGTERM (the driver stopping it on Ctrl-C): a SystemExit, so a worker
    waiting idle for a job ends quietly, and a job's `finally` and `with` blocks clean up first."""

    CODE = 128 + signal.SIGTERM

    def __init__(self):
        super().__init__(self.CODE)


def terminate(signum, frame) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends it at once
    raise Terminated


def terminate_not_dropped(unraisable) -> None:
    """sys.unraisablehook in a worker. A Terminated raised inside a __del__ or a weakref callback
    cannot stop the job: Python prints "Exception ignored in ..." with its traceback on the user's
    terminal and carries on (seen under load, a Ctrl-C while the report's workers started). Not
    printed here: the stop is delivered again, a moment later, where it can end the job."""
    main = threading.current_thread() is threading.main_thread()
    if not isinstance(unraisable.exc_value, Terminated) or not main:
        sys.__unraisablehook__(unraisable)
        return
    signal.signal(signal.SIGTERM, terminate)
    deliver_again(signal.SIGTERM)


STARTED = 0.0  # time.time() when this worker process started (exit_with_parent); 0 outside a worker


def exit_with_parent(parent: int) -> None:
    """Worker initializer (it records STARTED, for a run's start-up stage): a killed parent (SIGKILL included) must not leave workers running on,
    writing into folders nobody watches (seen: orphans overwrote a restarted family's runs).
    Ctrl-C reaches the whole process group; the parent alone handles it (and stops the workers),
    so no idle worker prints a traceback of its own."""

    global STARTED
    STARTED = time.time()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # tqdm's default lock is a multiprocessing semaphore; a worker stopped on Ctrl-C cannot release
    # it, and the resource tracker then warns about it. Workers draw no shared bars: a thread lock does.
    from tqdm.auto import tqdm

    tqdm.set_lock(threading.RLock())

    die_with_fork_server(parent)

    # Where prctl is missing (not Linux), or a process the driver forked still holds the fork
    # server's pipe open, the worker watches `parent` itself (while its job lets the thread run).
    def watch():
        while alive(parent):
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()
    # Last: a SIGTERM during the set-up above ends the worker by the default action (nothing of a
    # job to clean up yet); as Terminated it would surface as the pool's "Exception in
    # initializer" traceback (seen once in CI: the thread start was waiting when the driver stopped it).
    sys.unraisablehook = terminate_not_dropped
    signal.signal(signal.SIGTERM, terminate)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_fork_server(parent: int) -> None:
    """Linux: the kernel SIGKILLs this worker when the fork server, its parent, ends, and the server
    ends when `parent` (the driver) does: it waits for the end of a pipe whose write ends are the
    driver's and a copy in each worker, closed here (the worker starts no processes of its own).
    Unlike the watch thread this needs nothing of the worker, which may hold the GIL in native code
    for minutes (seen: an orphan still running 5 s after its driver was SIGKILLed, under load)."""

    if not sys.platform.startswith("linux"):
        return
    import ctypes
    from multiprocessing import forkserver

    server = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    liveness = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)  # private: no public way
    if liveness is not None:
        os.close(liveness)
        forkserver._forkserver._forkserver_alive_fd = None  # type: ignore[attr-defined]
    if os.getppid() != server or not alive(parent):  # it ended before the death signal was set
        os._exit(1)


def alive(pid: int) -> bool:
    """Whether process `pid` runs: a killed process stays a zombie until its own parent reaps it."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # PermissionError: another user's process took the number
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):  # no /proc (not Linux): the signal test is all there is
        return True


def costliest_first(items: list, cost: Callable | None) -> list[int]:
    """Indices of `items`, the highest `cost(item)` first so no long job starts last (as given
    without `cost`)."""
    indices = range(len(items))
    return sorted(indices, key=lambda i: -cost(items[i])) if cost else list(indices)


class WorkerDied(UsageError):
    """A worker process ended without returning its job's result; `how` says how it ended."""

    def __init__(self, how: str, desc: str):
        super().__init__(
            f"a worker process died ({how}) while {desc}: the system killed it (out of memory?) "
            "or code it ran ended it (os._exit, a signal)"
        )
        self.how = how


def how_it_ended(processes: list) -> str:
    """How dead worker processes ended, in words: "killed by signal 9: Killed" is what points at an
    out-of-memory kill or a SIGKILL, "exit code 0" at an os._exit."""
    for process in processes:
        process.join(timeout=5)
    codes = [process.exitcode for process in processes if process.exitcode is not None]
    # When one worker dies the pool terminates the others (SIGTERM): name the one that died.
    codes = [code for code in codes if code != -signal.SIGTERM] or codes
    if not codes:
        return "it ended abruptly"
    if codes[0] < 0:
        return f"killed by signal {-codes[0]}: {signal.strsignal(-codes[0])}"
    return f"exit code {codes[0]}"


# What every job imports (torch, TransformerLens, the measures and the training loop, and what a
# report job imports on its first run: matplotlib for its figures, scipy's statistics): the fork
# server imports it once and each worker starts from that copy instead of importing it again
# (about 4.6 s of CPU per process on the report's 15 runs, and 2 s more for the figures).
PRELOAD = (
    "torch",
    "transformer_lens",
    "probes.report.measure",
    "probes.report.figures",
    "scipy.stats",
    "tasks.training.loop",
    "models.fused",  # TransformerLens's model bridge: models.resume imports it only when a forward resumes
)


def spawn_pool(workers: int):
    """A pool of `workers` processes that end with this process, forked from a fork server that has
    imported PRELOAD. Forking this process instead could hang: once torch has run an op here, its
    intra-op (OpenMP) thread pool is started and does not survive a fork. The fork server never runs
    an op; it only imports (the threads it then holds, OpenBLAS's pool and jemalloc's background
    thread, are idle and both libraries reset them across fork with pthread_atfork handlers), and
    each worker starts torch's thread pool fresh."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    start_fork_server()
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=exit_with_parent, initargs=(os.getpid(),)
    )


def map_jobs(
    function: Callable,
    items: Iterable,
    jobs: int,
    desc: str,
    progress: bool = True,
    on_result: Callable | None = None,
    cost: Callable | None = None,
    isolate: bool = False,
) -> list:
    """`[function(item) for item in items]`, each in one torch thread; with jobs > 1 (or `isolate`),
    `jobs` at a time in worker processes (spawn_pool), the highest `cost(item)` first. One bar counts finished
    jobs; `on_result(item, result, write)` sees each result as it arrives. A worker process that
    dies (os._exit or a signal in the job's code, an out-of-memory kill) is WorkerDied."""
    from concurrent.futures import as_completed
    from concurrent.futures.process import BrokenProcessPool

    from tqdm.auto import tqdm

    items = list(items)
    bar = tqdm(total=len(items), desc=desc, unit="job", disable=not progress, dynamic_ncols=True, leave=False)
    results = [None] * len(items)

    def record(index, result):
        results[index] = result
        if on_result:
            on_result(items[index], result, bar.write)
        bar.update()

    try:
        if not isolate and (jobs <= 1 or len(items) <= 1):
            for index, item in enumerate(items):
                record(index, in_one_thread(function, item))
            return results
        pools = []  # empty while the fork server starts: a Ctrl-C then must still end it
        try:
            pools.append(spawn_pool(max(1, min(jobs, len(items)))))
            pool = pools[0]
            futures = {
                pool.submit(in_one_thread, function, items[index]): index for index in costliest_first(items, cost)
            }
            processes = list((getattr(pool, "_processes", None) or {}).values())  # private, as in stop_all
            try:
                for future in as_completed(futures):
                    record(futures[future], future.result())
            except BrokenProcessPool:
                # The pool's own thread is reaping the workers; a fork server's worker reports its
                # exit code once, so how_it_ended reads it after that thread is done.
                pool.shutdown(wait=True)
                raise WorkerDied(how_it_ended(processes), desc) from None
        except KeyboardInterrupt:
            stop_all(pools)
            raise
        finally:
            for pool in pools:
                pool.shutdown(wait=True, cancel_futures=True)
            stop_fork_server()
        return results
    finally:
        bar.close()


def start_fork_server() -> None:
    """Start the fork server (if not running) with SIGINT blocked, so that a Ctrl-C during its
    imports (seconds; it ignores SIGINT only once they are done) prints no traceback there: a
    blocked signal stays blocked across the spawn, in it and in the workers it forks. This process
    keeps its handler meanwhile, so a Ctrl-C then is not lost (ignoring it here for the spawn, for
    the server to inherit, dropped the presses of those milliseconds and the sweep ran on); it stops
    the command once the server's process id is recorded, for stop_all to find. The resource tracker
    is started first because its own start unblocks SIGINT."""
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()
    with held_interrupts():
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            forkserver.ensure_running()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def stop_all(pools: list, grace: float = 3.0) -> None:
    """On Ctrl-C: end the fork server and every worker at once, in well under 10 s. The server is
    frozen first (it may be importing, or forking a worker this process asked for before the
    Ctrl-C: such a worker is in no pool's table yet, and an idle one would keep the server, and so
    this process's exit, waiting forever); its workers get SIGTERM (each unwinds its job, removing
    its temp files: Terminated), and SIGKILL after `grace` seconds; the server is killed last."""
    server = fork_server_pid()
    if server is not None:
        signal_quietly(server, signal.SIGSTOP)
    pids = set(children(server) if server is not None else ())
    for pool in pools:
        pids |= set(getattr(pool, "_processes", None) or {})  # private: the executor has no public way
        queue = getattr(pool, "_call_queue", None)
        if queue is not None:  # a job no worker will read must not hold this process's exit
            queue.cancel_join_thread()
    for pid in pids:
        signal_quietly(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        signal_quietly(pid, signal.SIGKILL)
    # Last: its end SIGKILLs its workers at once (die_with_fork_server), before their cleanup.
    if server is not None:
        signal_quietly(server, signal.SIGKILL)


def signal_quietly(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):  # gone already (its number possibly reused)
        pass


def fork_server_pid() -> int | None:
    from multiprocessing import forkserver

    return getattr(forkserver._forkserver, "_forkserver_pid", None)  # private: no public way


def children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (Linux's /proc; elsewhere none are found)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):  # ended while read
            continue
    return found


def stop_fork_server() -> None:
    """End and reap the fork server once its workers are gone. Left alone it would exit only after
    this process, unreaped by it, and its CPU time (its workers' included) would be missing from
    this command's (what /usr/bin/time and RUSAGE_CHILDREN count). The module offers no public way."""
    from multiprocessing import forkserver

    forkserver._forkserver._stop()  # type: ignore[attr-defined]  # private: no public way (above)
