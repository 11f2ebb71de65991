"""Helpers for the Ctrl-C tests (issue 40): press Ctrl-C as a terminal does at a moment the command
itself marks, check the one line, and compare a resumed folder with an uninterrupted one. Not a
test module."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

import pytest

from common.ownership import LOCK, MANIFEST
from tests.conftest import scaled_by_load

# What legitimately differs between two runs of one command, per file name; everything else must be
# equal byte for byte. Wall times, and what is computed over them: metrics.json's sha256 is its
# own checksum. config.json records the command line (--resume, --jobs, --out) and who resumed it.
VOLATILE = {
    "log.jsonl": ("seconds",),
    "metrics.json": ("train_seconds", "sha256"),
    "config.json": ("command", "resumed_by"),
    "stages.json": ("began_at", "seconds", "stages", "worker_pid", "worker_run"),  # timings: all but the trace kind
}
# The manifest records the checksum and size of each version toylens wrote of a file: for the files
# above they differ with them, and so do those of files since removed (the train state, holding its
# wall time); a resumed run's log has the version it was cut back to as well. The manifest's names,
# and the versions of every other file, must be equal. The lock file holds its writer's process id.
UNCOMPARED = {LOCK}

PRESSES = 2  # pressed twice 10 ms apart (issue 38, item 7): the second lands during the shutdown
STOP_SECONDS = 10.0  # what a command may take to stop after Ctrl-C, on a quiet machine


def stop_limit(seconds: float = STOP_SECONDS) -> float:
    """`seconds` on a quiet machine, scaled by this one's load (conftest.scaled_by_load)."""
    return scaled_by_load(seconds)


def environment(scratch: Path) -> dict:
    """One torch thread, and the workers' temp folders under `scratch`, so a test sees when a run
    trains or is traced and that an interrupt leaves none behind."""
    scratch.mkdir(exist_ok=True)
    return {**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(scratch)}


def press_ctrl_c(argv: list[str], ready: Callable[[int], bool], env: dict, stdout: Path) -> tuple[int, str, float]:
    """Run `argv` (stdout into the file `stdout`), press Ctrl-C once `ready(its process group)`, to
    the whole group; (exit status, stderr, seconds from the press until it ended). Fails if the
    command ends before `ready`, or outlives the press by `stop_limit()` or leaves a process behind."""
    with open(stdout, "w") as sink:
        process = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
        )
        deadline = time.monotonic() + 300
        while not ready(process.pid):
            if process.poll() is not None or time.monotonic() > deadline:
                if process.poll() is None:
                    os.killpg(process.pid, signal.SIGKILL)
                pytest.fail(f"the command ended or hung before the moment to press Ctrl-C: {process.stderr.read()}")
            time.sleep(0.02)
        for _ in range(PRESSES):
            os.killpg(process.pid, signal.SIGINT)
            time.sleep(0.01)
        pressed = time.monotonic()
        try:
            _, stderr = process.communicate(timeout=stop_limit())
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            pytest.fail(f"the command had not ended {stop_limit():.0f} s after Ctrl-C")
    seconds = time.monotonic() - pressed
    assert group_left(process.pid) == [], "a worker or the fork server outlived the interrupted command"
    return process.returncode, stderr, seconds


def ended_after_press(process: subprocess.Popen, pressed: float) -> tuple[int, str, float]:
    """(exit status, stderr, seconds from `pressed` until it ended) of a `process` Ctrl-C was pressed
    in; fails if it outlives the press by `stop_limit()`."""
    try:
        _, stderr = process.communicate(timeout=stop_limit())
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        pytest.fail(f"the command had not ended {stop_limit():.0f} s after Ctrl-C")
    return process.returncode, stderr, time.monotonic() - pressed


def assert_interrupted(code: int, stderr: str, seconds: float) -> str:
    """Exit 130 within 10 s (`stop_limit`), one line on stderr (a progress bar's redraws aside), no traceback."""
    lines = [line for line in stderr.splitlines() if line.strip() and "%|" not in line]
    assert code == 130 and seconds < stop_limit(), (code, seconds, stderr)
    assert len(lines) == 1 and lines[0].startswith("interrupted: ") and "Traceback" not in stderr, stderr
    return lines[0]


def group_processes(pgid: int) -> list[str]:
    """The command lines of process group `pgid`'s live processes."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                found.append((stat.parent / "cmdline").read_text().replace("\0", " ")[:200])
        except (OSError, IndexError, ValueError):  # ended while read
            continue
    return found


def group_left(pgid: int, seconds: float = 3.0) -> list[str]:
    """`pgid`'s processes still running after `seconds` (`stop_limit`: a worker that lost its driver
    ends itself within about 0.5 s on a quiet machine, toylens.workers.exit_with_parent)."""
    deadline = time.monotonic() + stop_limit(seconds)
    while (left := group_processes(pgid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def comparable(path: Path):
    """A file's contents less its VOLATILE fields (a manifest less those files' checksums)."""
    if path.name in VOLATILE:
        records = (
            [json.loads(line) for line in path.read_text().splitlines()]
            if path.suffix == ".jsonl"
            else [json.loads(path.read_text())]
        )
        return [{k: v for k, v in record.items() if k not in VOLATILE[path.name]} for record in records]
    if path.name == MANIFEST:
        files = json.loads(path.read_text())["files"]
        return {
            name: entry if name not in VOLATILE and (path.parent / name).exists() else None
            for name, entry in files.items()
        }
    return path.read_bytes()


def assert_same_files(folder: Path, reference: Path) -> None:
    """`folder` holds the same files as `reference`, equal but for VOLATILE fields."""

    def files(root: Path) -> list[str]:
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())

    assert files(folder) == files(reference)
    for name in files(reference):
        if Path(name).name not in UNCOMPARED:
            assert comparable(folder / name) == comparable(reference / name), name
