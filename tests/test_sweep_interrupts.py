"""Issue 40: one Ctrl-C at any moment of a sweep (its fork server starting, a run training or being
traced, the census), with one job or two, ends the command and every worker within 10 s, with one
line and exit 130; the folder then holds whole runs only, and `--resume` gives the uninterrupted
sweep's files: every file, equal but for wall times and the command line (tests/interrupting.py)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.interrupting import (
    assert_interrupted,
    assert_same_files,
    environment,
    group_processes,
    press_ctrl_c,
    stop_limit,
)
from tests.test_sweep_reliability import RUN, TINY_ARGS

# Every test here sends signals or kills processes: each runs in a forked child (tests/isolation.py).
pytestmark = pytest.mark.isolated

SEEDS = ["--seeds", "0-1"]


def sweep_argv(out: Path, jobs: int, *extra: str) -> list[str]:
    args = [arg for arg in TINY_ARGS if arg not in ("--jobs", "1")]
    return [
        sys.executable,
        "-m",
        "tasks.winograd",
        "sweep",
        *args,
        *SEEDS,
        "--jobs",
        str(jobs),
        "--out",
        str(out),
        *extra,
    ]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("uninterrupted")
    subprocess.run(
        sweep_argv(root / "sweep", 1), check=True, capture_output=True, env=environment(root / "tmp"), timeout=600
    )
    return root / "sweep"


def written(scratch: Path, name: str) -> bool:
    """Whether a worker has written `name` under `scratch`. The workers create and remove temp
    folders while the walk runs; one vanishing under it is no answer, so the next poll looks again."""
    try:
        return any(scratch.rglob(name))
    except FileNotFoundError:
        return False


def reached(moment: str, scratch: Path, stdout: Path, pgid: int) -> bool:
    """Whether the sweep is at `moment`, by what it writes, never by a clock."""
    if moment == "start-up":  # the fork server runs: it is importing torch for the workers
        return any("multiprocessing.forkserver" in line for line in group_processes(pgid))
    if moment == "training":  # a worker's run has logged an evaluation, and is not trained yet
        return written(scratch, "log.jsonl") and not written(scratch, "metrics.json")
    if moment == "tracing":  # a worker's run has its metrics.json: it is being traced now
        return written(scratch, "metrics.json")
    return "runs done" in stdout.read_text()  # census: every run is written, the census not yet


@pytest.mark.parametrize("moment", ["start-up", "training", "tracing", "census"])
@pytest.mark.parametrize("jobs", [1, 2])
def test_ctrl_c_stops_in_seconds_with_one_line_and_resume_is_bitwise(uninterrupted, tmp_path, jobs, moment):
    out, scratch, stdout = tmp_path / "sweep", tmp_path / "tmp", tmp_path / "stdout.txt"
    code, stderr, seconds = press_ctrl_c(
        sweep_argv(out, jobs), lambda pgid: reached(moment, scratch, stdout, pgid), environment(scratch), stdout
    )
    assert_interrupted(code, stderr, seconds)
    assert "--resume" in stderr
    assert list(scratch.glob("toylens-*")) == [], "an interrupted worker left its temp folder"
    for run in (out / RUN).glob("seed*"):  # whole runs only: a run folder with files has its metrics
        assert not any(run.iterdir()) or (run / "metrics.json").is_file(), sorted(run.iterdir())
    resumed = subprocess.run(
        sweep_argv(out, jobs, "--resume"), capture_output=True, text=True, env=environment(scratch), timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr
    assert_same_files(out, uninterrupted)


def test_a_ctrl_c_inside_held_interrupts_stops_the_command_when_the_block_ends():
    """The driver writes a run's files with Ctrl-C held: the block finishes, then the command stops."""
    from common.interrupts import held_interrupts, interrupt_once

    previous = signal.signal(signal.SIGINT, interrupt_once)
    done = []
    try:
        with pytest.raises(KeyboardInterrupt):
            with held_interrupts():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)  # the handler runs here, in the block: it must not raise
                done.append("every file written")
        assert done == ["every file written"]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # a second press is ignored
    finally:
        signal.signal(signal.SIGINT, previous)


def with_scratch(scratch: Path) -> list[tuple[int, str]]:
    """(pid, command line) of every process whose environment has TMPDIR=`scratch`: the command's and
    its local Ray instance's (gcs, raylet, workers; Ray puts its workers in process groups of their
    own, so the group the Ctrl-C went to does not hold them)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"TMPDIR={scratch}".encode() in environ:
            found.append((int(proc.name), command))
    return found


def test_ctrl_c_on_a_local_ray_instance_stops_in_seconds_and_resume_is_bitwise(uninterrupted, tmp_path):
    """`--executor ray` on the fresh local instance it starts: pressed while a Ray task runs a job
    (a worker named ray::in_one_thread), the command, its tasks and the instance end within 10 s."""
    pytest.importorskip("ray")
    # Ray's sockets live under TMPDIR, and a socket path has at most 107 bytes: pytest's are longer
    scratch = Path(tempfile.mkdtemp(prefix="tl-", dir="/tmp"))
    out, stdout = tmp_path / "sweep", tmp_path / "stdout.txt"
    argv = sweep_argv(out, 2, "--executor", "ray")

    def task_running(pgid: int) -> bool:
        return any(command.startswith("ray::in_one_thread") for _, command in with_scratch(scratch))

    code, stderr, seconds = press_ctrl_c(argv, task_running, environment(scratch), stdout)
    assert_interrupted(code, stderr, seconds)
    assert "--resume" in stderr
    deadline = time.monotonic() + stop_limit(3)
    while with_scratch(scratch) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert with_scratch(scratch) == [], "a Ray process outlived the interrupted command"
    for run in (out / RUN).glob("seed*"):  # whole runs only
        assert not any(run.iterdir()) or (run / "metrics.json").is_file(), sorted(run.iterdir())
    resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, env=environment(scratch), timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    assert_same_files(out, uninterrupted)
    shutil.rmtree(scratch)
