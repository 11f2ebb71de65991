"""Ctrl-C in a command's first half second, while its modules import (issue 40, item 1): the one
`interrupted:` line and exit 130, never a KeyboardInterrupt traceback, for the console script and
the documented `python -m` forms."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.interrupting import PRESSES, assert_interrupted, environment

# Every test here sends signals or kills processes: each runs in a forked child (tests/isolation.py).
pytestmark = pytest.mark.isolated

DELAYS = (0.0, 0.1, 0.2, 0.4)  # seconds after torch began to load (the command's heavy imports, which
# follow the handler's installation), before the command's own work. A fixed delay from the start is
# not a moment: on a loaded machine 0.1 s still lands in the interpreter's own start-up (site, the
# editable-install finder), before any toylens code runs to catch it.
TOYLENS = str(Path(sys.executable).parent / "toylens")
TRAIN = ["--models", "attn-only-2x1", "--seeds", "0-0", "--steps", "40", "--nouns", "6", "--no-progress"]


def importing_torch(process: subprocess.Popen, limit: float = 60.0) -> None:
    """Wait until `process` has mapped torch's library: its imports have begun."""
    maps = Path(f"/proc/{process.pid}/maps")
    ends = time.monotonic() + limit
    while "libtorch" not in maps.read_text(errors="replace"):
        assert process.poll() is None and time.monotonic() < ends, "torch never began to load"
        time.sleep(0.005)


def press_early(argv: list[str], delay: float, env: dict) -> tuple[int, str, float]:
    """Start `argv`, press Ctrl-C `delay` s after torch began to load (PRESSES times, 10 ms apart); (exit status, stderr,
    seconds from the press until it ended). Fails if the command had already ended: the press
    would then test nothing."""
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
    importing_torch(process)
    time.sleep(delay)
    assert process.poll() is None, f"ended before the press: {process.stderr.read()}"
    for _ in range(PRESSES):
        os.killpg(process.pid, signal.SIGINT)
        time.sleep(0.01)
    pressed = time.monotonic()
    try:
        _, stderr = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        pytest.fail("the command had not ended 10 s after Ctrl-C")
    return process.returncode, stderr, time.monotonic() - pressed


@pytest.mark.parametrize("delay", DELAYS)
def test_ctrl_c_while_train_starts(delay, tmp_path):
    argv = [TOYLENS, "train", "winograd", *TRAIN, "--out", str(tmp_path / "runs")]
    assert_interrupted(*press_early(argv, delay, environment(tmp_path / "tmp")))


@pytest.mark.parametrize("delay", DELAYS)
def test_ctrl_c_while_report_starts(delay, tiny_runs, tmp_path):
    argv = [sys.executable, "-m", "probes.circuit", "report", str(tiny_runs), "--out", str(tmp_path / "report")]
    assert_interrupted(*press_early(argv, delay, environment(tmp_path / "tmp")))
