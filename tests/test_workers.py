"""The worker pool's processes end with the process that started them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def write_pid_and_wait(path: str) -> None:
    Path(path).write_text(str(os.getpid()))
    time.sleep(60)


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone but for its entry; /proc says so.
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


# Catches: workers watching for the wrong parent (a fork server's worker ending at once, or never),
# or orphans running on after a SIGKILL of the command (seen: they overwrote a restarted family's runs).
@pytest.mark.isolated
def test_workers_end_when_the_process_that_started_them_is_killed(tmp_path):
    pid_file = tmp_path / "worker.pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import time
        import toylens.workers as workers
        from tests.test_workers import write_pid_and_wait
        workers.PRELOAD = ()   # what the worker imports does not matter here, only how it ends
        pool = workers.spawn_pool(1)
        pool.submit(write_pid_and_wait, {str(pid_file)!r})
        time.sleep(60)
        """),
        ],
        cwd=ROOT,
    )
    worker = None
    try:
        assert wait_for(pid_file.exists, 60), "the worker never ran its job"
        worker = int(wait_for(lambda: pid_file.read_text(), 5) and pid_file.read_text())
        assert running(worker)
        parent.send_signal(signal.SIGKILL)  # and left unreaped: a zombie is no parent to work for
        assert wait_for(lambda: not running(worker), 10), "the worker outlived the process that started it"
    finally:
        parent.kill()
        parent.wait()
        if worker and running(worker):  # this test failing leaves no orphan behind
            os.kill(worker, signal.SIGKILL)


def write_pid_and_hold_the_gil(path: str) -> None:
    """A job in native code that holds the GIL for hours (a backtracking regular expression): no
    other thread of its worker, a watcher included, runs until it returns."""
    import re

    Path(path).write_text(str(os.getpid()))
    re.fullmatch(r"(a+)+$", "a" * 60 + "b")


def no_outcome(item, outcome) -> None:
    pass


DRIVERS = {
    "training pool": "workers.map_jobs(write_pid_and_hold_the_gil, [path], jobs=1, desc='', progress=False, isolate=True)",
    "sweep executor": "LocalExecutor(jobs=1).run(write_pid_and_hold_the_gil, [path], no_outcome)",
}


# Catches: a worker that ends only when a thread of its own sees the driver gone (the watcher
# never runs while the job holds the GIL: seen as an orphan 5 s after the driver's SIGKILL, under
# load), or a death signal that follows the fork server, which outlived the driver while a worker lived.
@pytest.mark.isolated
@pytest.mark.parametrize("driver", DRIVERS)
def test_a_busy_worker_ends_when_its_driver_is_killed(tmp_path, driver):
    from tests.conftest import scaled_by_load

    pid_file = tmp_path / "worker.pid"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import toylens.workers as workers
        from toylens.sweeps.executors import LocalExecutor
        from tests.test_workers import no_outcome, write_pid_and_hold_the_gil
        workers.PRELOAD = ()
        path = {str(pid_file)!r}
        {DRIVERS[driver]}
        """),
        ],
        cwd=ROOT,
    )
    worker = None
    try:
        assert wait_for(lambda: pid_file.exists() and pid_file.read_text(), scaled_by_load(60)), "no job ran"
        worker = int(pid_file.read_text())
        parent.send_signal(signal.SIGKILL)  # left unreaped, as a killed driver's parent may leave it
        limit = scaled_by_load(10)
        assert wait_for(lambda: not running(worker), limit), f"the worker outlived its driver by {limit:.0f} s"
    finally:
        parent.kill()
        parent.wait()
        if worker and running(worker):  # this test failing leaves no orphan behind
            os.kill(worker, signal.SIGKILL)


def burn(seconds: float) -> float:
    began = time.process_time()
    while time.process_time() - began < seconds:
        pass
    return seconds


# The workers' CPU time is the command's (what /usr/bin/time reports). Catches: the fork server left
# to exit unreaped after the command, its workers' time with it (the whole report then read 5 s).
def test_the_workers_cpu_time_counts_as_the_commands(monkeypatch):
    import resource

    import toylens.workers as workers

    monkeypatch.setattr(workers, "PRELOAD", ())
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    assert workers.map_jobs(burn, [0.4, 0.4], jobs=2, desc="burning", progress=False) == [0.4, 0.4]
    assert resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime - before >= 0.7


def test_a_stop_raised_inside_a_finaliser_still_ends_the_worker_without_a_traceback():
    """A SIGTERM (the driver stopping its workers on Ctrl-C) that lands inside a __del__ or a weakref
    callback: Python would print "Exception ignored in ..." with a traceback and run the job on (seen
    under load while the report's workers started). The worker's hook delivers it again: the worker
    ends with Terminated's status and prints nothing."""
    child = textwrap.dedent(
        """
        import os, time
        from toylens.workers import Terminated, exit_with_parent
        exit_with_parent(os.getppid())  # set up as every pool worker is

        class Finalised:
            def __del__(self):
                raise Terminated

        Finalised()  # its __del__ runs here; what it raises cannot propagate
        time.sleep(10)
        print("ran on")
        """
    )
    done = subprocess.run([sys.executable, "-c", child], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 128 + signal.SIGTERM, (done.returncode, done.stdout, done.stderr)
    assert done.stderr == "" and "ran on" not in done.stdout, done.stderr
