"""A pytest plugin (loaded by tests/conftest.py): a test marked `@pytest.mark.isolated` runs its body
in a forked child process in a session of its own, so nothing the test does can end pytest: a Ray
driver that loses its node and ends the process it lives in, a stray signal to a process group, a
kill that hits the wrong process. A child that dies, or runs past the hang limit, fails as that one
named test, and whatever it left in its session is killed.

Fixtures are set up and torn down in pytest's own process as usual (a session fixture is built once
and inherited by every child); only the test function runs in the child. So what must not live in
pytest's process (a Ray cluster: its gRPC threads make a later fork hang) is started in the body."""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from pathlib import Path

import pytest

HANG_LIMIT = 900.0  # seconds a child may run: generous, since a loaded 2-core machine is slow


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers",
        "isolated(limit=900): run the test's body in a forked child in its own session; a child that dies "
        "or runs past `limit` seconds fails as this test (isolated tests are slow tier too)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    marker = pyfuncitem.get_closest_marker("isolated")
    if marker is None:
        return None
    arguments = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    outcome = run_forked(lambda: pyfuncitem.obj(**arguments), marker.kwargs.get("limit", HANG_LIMIT))
    if outcome["outcome"] == "skipped":
        pytest.skip(outcome["message"])
    if outcome["outcome"] == "xfailed":
        pytest.xfail(outcome["message"])
    if outcome["outcome"] != "passed":
        pytest.fail(outcome["message"], pytrace=False)
    return True


def run_forked(body, limit: float) -> dict:
    """`body()` in a forked child in a new session; {"outcome", "message"} as the child reported it,
    or a failure saying how the child ended when it reported nothing (killed, exited, hung)."""
    sys.stdout.flush()
    sys.stderr.flush()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child never returns
        os.close(read)
        in_child(body, write)
    os.close(write)
    try:
        report = wait_for_child(child, read, time.monotonic() + limit)
    except BaseException:  # Ctrl-C at pytest (the child's own session does not get it): end the child too
        kill_session(child)
        os.waitpid(child, 0)
        raise
    finally:
        os.close(read)
    # The child has ended (or hung): what it left running in its session goes too (a fork server, a
    # Ray node), before the child is reaped, so its id cannot have been reused.
    kill_session(child)
    _, status = os.waitpid(child, 0)
    if report is None:
        return {"outcome": "failed", "message": f"isolated test hung: its child ran past {limit:.0f} s and was killed"}
    if report:
        return json.loads(report)
    return {"outcome": "failed", "message": f"isolated test's child ended without a result ({ending(status)})"}


def wait_for_child(child: int, fd: int, deadline: float) -> bytes | None:
    """What the child wrote to `fd` by the time it ended (not reaped yet), or None if `deadline`
    passed first. The end is the child's own exit, not the pipe's: a process it started may hold
    the pipe open."""
    chunks = []
    while time.monotonic() < deadline:
        ended = os.waitid(os.P_PID, child, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        while select.select([fd], [], [], 0 if ended else 0.2)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            chunks.append(chunk)
        if ended:
            return b"".join(chunks)
    return None


def in_child(body, write: int) -> None:
    """Run `body` in a session of its own, send the outcome down `write`, and exit without running
    pytest's or anyone's exit handlers (they belong to the parent)."""
    try:
        os.setsid()
        try:
            body()
            outcome = {"outcome": "passed", "message": ""}
        except BaseException as error:  # noqa: BLE001 - every outcome, SystemExit included, goes to the parent
            outcome = outcome_of(error)
        data = json.dumps(outcome).encode()
        while data:
            data = data[os.write(write, data) :]
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def outcome_of(error: BaseException) -> dict:
    if isinstance(error, pytest.skip.Exception):
        return {"outcome": "skipped", "message": error.msg}
    if isinstance(error, pytest.xfail.Exception):
        return {"outcome": "xfailed", "message": error.msg}
    info = pytest.ExceptionInfo.from_exception(error)
    here = Path(__file__)
    info.traceback = info.traceback.filter(lambda entry: Path(entry.path) != here)
    return {"outcome": "failed", "message": f"(in the isolated child)\n{info.getrepr(style='long', funcargs=True)}"}


def kill_session(leader: int) -> None:
    """SIGKILL the process group `leader` made with setsid (processes started with a session of their
    own, as the Ctrl-C tests' commands are, clean up after themselves or are checked by their test)."""
    try:
        os.killpg(leader, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def ending(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        return f"killed by signal {number}: {signal.Signals(number).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"
