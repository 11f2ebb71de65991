"""Ctrl-C in a command's first seconds, while its modules import (issue 40, item 1): the one
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

from tests.interrupting import PRESSES, assert_interrupted, ended_after_press, environment

# Every test here sends signals or kills processes: each runs in a forked child (tests/isolation.py).
pytestmark = pytest.mark.isolated

# Moments in the command's heavy imports, which follow the handler's installation: a library each
# import maps (numpy, torch, pyarrow through datasets), seen in
# /proc/PID/maps. Never a delay: on a loaded machine 0.1 s from the start still lands in the
# interpreter's own start-up, and 0.4 s after torch began to load may be before or after its end.
MOMENTS = ("libtorch_cpu.so", "_multiarray_umath.", "libarrow.so")
TOYLENS = str(Path(sys.executable).parent / "toylens")
TRAIN = ["--models", "attn-only-2x1", "--seeds", "0-0", "--steps", "40", "--nouns", "6", "--no-progress"]


def importing(process: subprocess.Popen, library: str, limit: float = 300.0) -> None:
    """Wait until `process` has mapped `library`: its import has begun."""
    maps = Path(f"/proc/{process.pid}/maps")
    ends = time.monotonic() + limit
    while library not in maps.read_text(errors="replace"):
        assert process.poll() is None and time.monotonic() < ends, f"{library} never began to load"
        time.sleep(0.005)


def press_early(argv: list[str], moment: str, env: dict) -> tuple[int, str, float]:
    """Start `argv`, press Ctrl-C once it maps the library `moment` (PRESSES times, 10 ms apart);
    (exit status, stderr, seconds from the press until it ended). Fails if the command had already
    ended: the press would then test nothing."""
    process = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env
    )
    importing(process, moment)
    assert process.poll() is None, f"ended before the press: {process.stderr.read()}"
    for _ in range(PRESSES):
        os.killpg(process.pid, signal.SIGINT)
        time.sleep(0.01)
    pressed = time.monotonic()
    return ended_after_press(process, pressed)


@pytest.mark.parametrize("moment", MOMENTS)
def test_ctrl_c_while_train_starts(moment, tmp_path):
    argv = [TOYLENS, "train", "winograd", *TRAIN, "--out", str(tmp_path / "runs")]
    assert_interrupted(*press_early(argv, moment, environment(tmp_path / "tmp")))


@pytest.mark.parametrize("moment", MOMENTS)
def test_ctrl_c_while_report_starts(moment, tiny_runs, tmp_path):
    argv = [sys.executable, "-m", "probes.circuit", "report", str(tiny_runs), "--out", str(tmp_path / "report")]
    assert_interrupted(*press_early(argv, moment, environment(tmp_path / "tmp")))
