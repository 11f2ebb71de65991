"""Ctrl-C with worker processes (training and the report with `--jobs 2`), pressed twice mid-way,
gives the one `interrupted:` line within 10 s, exit 130 and no worker tracebacks; what the command
leaves lets it finish as if never interrupted (issue 40)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.interrupting import (
    UNCOMPARED,
    assert_interrupted,
    assert_same_files,
    environment,
    group_processes,
    press_ctrl_c,
)
from tests.refusals import contents, copy_runs
from tasks.training.resume import STATE

# Every test here sends signals or kills processes: each runs in a forked child (tests/isolation.py).
pytestmark = pytest.mark.isolated

TRAIN = ["--models", "attn-only-2x1", "--seeds", "0-1", "--jobs", "2", "--no-progress"]
TRAIN += ["--steps", "40", "--eval-every", "10", "--checkpoint-every", "10", "--nouns", "6"]


def train_argv(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "tasks.winograd", "train", *TRAIN, "--out", str(out), *extra]


def workers_running(pgid: int) -> bool:
    """Whether a worker has been forked: it carries its fork server's command line."""
    return sum("multiprocessing.forkserver" in line for line in group_processes(pgid)) >= 2


def test_ctrl_c_mid_training_with_two_jobs_then_resume_gives_the_uninterrupted_runs(tmp_path):
    """Pressed once a run has saved a checkpoint (mid-training): `--resume` continues from it and
    ends with the files of the same training uninterrupted, made first in the same folder (the
    runs' summary names their folders)."""
    out, reference, scratch = tmp_path / "runs", tmp_path / "reference", tmp_path / "tmp"
    subprocess.run(train_argv(out), check=True, capture_output=True, env=environment(scratch), timeout=600)
    out.rename(reference)
    mid_training = lambda pgid: any(out.rglob(STATE))  # noqa: E731
    code, stderr, seconds = press_ctrl_c(train_argv(out), mid_training, environment(scratch), tmp_path / "out")
    assert "--resume" in assert_interrupted(code, stderr, seconds)
    resumed = subprocess.run(
        train_argv(out, "--resume"), capture_output=True, text=True, env=environment(scratch), timeout=600
    )
    assert resumed.returncode == 0, resumed.stderr
    assert_same_files(out, reference)


def test_ctrl_c_mid_report_with_two_jobs_leaves_the_folder_as_it_was(tiny_runs, tmp_path):
    """Pressed while the workers analyse the runs: every file in the folder is as before, byte for
    byte, and no temp file is left (the report is published whole or not at all). So the report run
    next reads what an uninterrupted one reads, and writes its files."""
    out = copy_runs(tiny_runs, tmp_path)

    def files() -> dict:
        return {name: data for name, data in contents(out).items() if Path(name).name not in UNCOMPARED}

    before = files()
    argv = [sys.executable, "-m", "probes.circuit", "report", str(out), "--jobs", "2"]
    code, stderr, seconds = press_ctrl_c(argv, workers_running, environment(tmp_path / "tmp"), tmp_path / "out")
    assert_interrupted(code, stderr, seconds)
    assert files() == before
