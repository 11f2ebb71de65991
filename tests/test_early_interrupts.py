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

DELAYS = (0.1, 0.2, 0.3, 0.5)  # seconds after the start, before the command's own work. Earlier (50 ms on a
# loaded machine) the press lands in the interpreter's own start-up (site, the editable-install finder),
# before any toylens code runs to catch it.
TOYLENS = str(Path(sys.executable).parent / "toylens")
TRAIN = ["--models", "attn-only-2x1", "--seeds", "0-0", "--steps", "40", "--nouns", "6", "--no-progress"]


def press_early(argv: list[str], delay: float, env: dict) -> tuple[int, str, float]:
    """Start `argv`, press Ctrl-C `delay` s later (PRESSES times, 10 ms apart); (exit status, stderr,
    seconds from the press until it ended). Fails if the command had already ended: the press
    would then test nothing."""
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
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
