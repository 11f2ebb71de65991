"""Ctrl-C at the edges (issue 57, item 2): pressed twice 2, 20 and 200 ms apart while Python runs
code that can only print and drop a KeyboardInterrupt (a garbage-collector callback, as a __del__ or
a weakref callback is), and pressed after the command's last write, while its exit functions run.
Each ends with the one `interrupted:` line and exit 130; before common.interrupts the first printed
"Exception ignored in ..." with a traceback and trained on to exit 0, the second printed an exit
function's traceback and exited 0 (or died by the signal in the interpreter's teardown)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.interrupting import assert_interrupted, ended_after_press, environment
from tests.refusals import copy_runs

# Every test here sends signals: each runs in a forked child (tests/isolation.py); each starts the
# real command, which trains or reports for tens of seconds.
pytestmark = [pytest.mark.isolated, pytest.mark.slow]

# The command as its `python -m` form runs it, with a hook set first that marks the moment to press
# (the file MARK) and then sleeps, so the presses land inside that hook: `WHEN` says where.
PROGRAM = """
import atexit, gc, runpy, sys, threading, time
from pathlib import Path
mark, module = Path(sys.argv[1]), sys.argv[2]
def inside():
    mark.touch()
    time.sleep(2)
{when}
sys.argv = [module, *sys.argv[3:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""
# In the main thread's first garbage collection once training has saved a checkpoint.
IN_GARBAGE_COLLECTION = """
def collecting(phase, info):
    main = threading.current_thread() is threading.main_thread()
    if phase == "start" and main and not mark.exists() and any(Path(sys.argv[-1]).rglob("train_state.*")):
        inside()
gc.callbacks.append(collecting)
"""
# Registered before the command starts, so it is the last exit function: after every write.
AT_EXIT = "atexit.register(inside)"
TRAIN = ["train", "--models", "attn-only-2x1", "--seeds", "0-0", "--steps", "100000", "--nouns", "6"]
TRAIN += ["--eval-every", "10", "--checkpoint-every", "10", "--no-progress"]


def press_at_mark(when: str, argv: list[str], gap: float, tmp_path: Path) -> tuple[int, str, float]:
    """Run `argv` (a module and its arguments) under PROGRAM's hook `when`; once it marks the
    moment, press Ctrl-C twice, `gap` seconds apart, to its process group; (exit status, stderr,
    seconds from the first press until it ended)."""
    mark = tmp_path / "mark"
    program = [sys.executable, "-c", PROGRAM.format(when=when), str(mark), *argv]
    process = subprocess.Popen(
        program,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=environment(tmp_path / "tmp"),
    )
    deadline = time.monotonic() + 600
    while not mark.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            pytest.fail(f"the command ended or hung before the moment to press: {process.stderr.read()}")
        time.sleep(0.001)
    pressed = time.monotonic()
    os.killpg(process.pid, signal.SIGINT)
    time.sleep(gap)
    os.killpg(process.pid, signal.SIGINT)
    return ended_after_press(process, pressed)


@pytest.mark.parametrize("gap", [0.002, 0.02, 0.2])
def test_ctrl_c_twice_where_python_drops_it_stops_training_in_one_line(gap, tmp_path):
    argv = ["tasks.winograd", *TRAIN, "--out", str(tmp_path / "runs")]
    line = assert_interrupted(*press_at_mark(IN_GARBAGE_COLLECTION, argv, gap, tmp_path))
    assert "--resume" in line  # stopped mid-training, not after it


@pytest.mark.parametrize("gap", [0.002, 0.2])
def test_ctrl_c_after_the_reports_last_write_is_one_line_and_130(gap, tiny_runs, tmp_path):
    runs = copy_runs(tiny_runs, tmp_path)
    argv = ["probes.circuit", "report", str(runs), "--out", str(tmp_path / "report")]
    assert_interrupted(*press_at_mark(AT_EXIT, argv, gap, tmp_path))
    assert (tmp_path / "report" / "report.html").is_file()  # pressed after the last write
