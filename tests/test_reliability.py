"""Interrupted runs resume to the same result, runs are reproducible and record their provenance,
and runs from other toylens versions load or are refused with the reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import TINY_SPECS, train_tiny

# Tiny but real: the default attn-only-2x1 on 6-noun Winograd, a state saved every 15 steps and
# evaluations every 10, so a kill usually lands between a logged evaluation and the next state.
TRAIN = [
    "train",
    "--models",
    "attn-only-2x1",
    "--seeds",
    "0-0",
    "--steps",
    "120",
    "--batch-size",
    "16",
    "--nouns",
    "6",
    "--eval-every",
    "10",
    "--checkpoint-every",
    "15",
    "--no-progress",
]
RUN = Path("attn-only-2x1") / "seed0"
TIMING = ("seconds", "train_seconds", "sha256")  # wall-clock fields (and metrics' checksum over them)


def env() -> dict:
    # One thread: bitwise comparisons need the same thread count in every process (and it is faster
    # on a shared machine).
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def start(out: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tasks.winograd", *TRAIN, "--out", str(out), *extra],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(process: subprocess.Popen) -> tuple[int, str, str]:
    stdout, stderr = process.communicate(timeout=300)
    return process.returncode, stdout, stderr


def logged_steps(run_dir: Path) -> int:
    path = run_dir / "log.jsonl"
    return len(path.read_text().splitlines()) if path.is_file() else 0


def state_step(run_dir: Path) -> int:
    from safetensors import safe_open

    with safe_open(str(run_dir / "train_state.safetensors"), framework="pt") as handle:
        return json.loads(handle.metadata()["toylens"])["step"]


def stop_after(process: subprocess.Popen, run_dir: Path, evaluations: int, sig: int) -> None:
    """Send `sig` once `evaluations` lines are logged and a train state exists."""
    deadline = time.monotonic() + 240
    while logged_steps(run_dir) < evaluations or not (run_dir / "train_state.safetensors").is_file():
        if process.poll() is not None:
            pytest.fail(f"training ended before it could be stopped: {process.stderr.read()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("training made no progress in 240 s")
        time.sleep(0.02)
    process.send_signal(sig)


def without_timing(entry: dict) -> dict:
    return {key: value for key, value in entry.items() if key not in TIMING}


def run_outcome(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return {
        "weights": load_file(str(run_dir / "model.safetensors")),
        "metrics": without_timing(json.loads((run_dir / "metrics.json").read_text())),
        "log": [without_timing(json.loads(line)) for line in (run_dir / "log.jsonl").read_text().splitlines()],
        "config": json.loads((run_dir / "config.json").read_text()),
    }


def assert_same_outcome(a: dict, b: dict) -> None:
    assert a["weights"].keys() == b["weights"].keys()
    for name in a["weights"]:
        assert torch.equal(a["weights"][name], b["weights"][name]), name
    assert a["metrics"] == b["metrics"]
    assert a["log"] == b["log"]
    assert a["config"]["weights_sha256"] == b["config"]["weights_sha256"]


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> dict:
    """Ctrl-C a run, resume it, SIGKILL the resumed run, try without --resume, resume to the end."""
    out = tmp_path_factory.mktemp("interrupted") / "winograd"
    story = {}
    process = start(out)
    stop_after(process, out / RUN, evaluations=3, sig=signal.SIGINT)
    story["sigint"] = finish(process)
    story["after_sigint_step"] = state_step(out / RUN)
    process = start(out, "--resume")
    stop_after(process, out / RUN, evaluations=6, sig=signal.SIGKILL)
    story["sigkill"] = finish(process)
    story["after_sigkill_step"] = state_step(out / RUN)
    story["after_sigkill_files"] = sorted(p.name for p in (out / RUN).iterdir())
    story["no_flag"] = finish(start(out))
    story["resumed"] = finish(start(out, "--resume"))
    story["outcome"] = run_outcome(out / RUN)
    story["out"] = out
    return story


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict:
    """The same command run straight through, in this process, on one thread like the others."""
    from toylens.cli import main_for_task

    out = tmp_path_factory.mktemp("uninterrupted") / "winograd"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        main_for_task("winograd", [*TRAIN, "--out", str(out)])
    finally:
        torch.set_num_threads(threads)
    return run_outcome(out / RUN)


def test_ctrl_c_stops_with_one_line_saying_how_to_resume(interrupted):
    code, _, stderr = interrupted["sigint"]
    assert code == 130
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr
    assert lines[0].startswith("interrupted: ") and "python -m tasks.winograd train" in lines[0]
    assert lines[0].endswith("--resume")


def test_sigkill_leaves_a_loadable_state_and_no_metrics(interrupted):
    assert interrupted["after_sigkill_step"] > interrupted["after_sigint_step"] > 0
    assert "metrics.json" not in interrupted["after_sigkill_files"]


def test_unfinished_run_without_resume_is_refused(interrupted):
    code, _, stderr = interrupted["no_flag"]
    assert code == 2
    assert "holds an unfinished run; pass --resume" in stderr and "--overwrite" in stderr
    assert "Traceback" not in stderr


def test_resume_after_ctrl_c_and_sigkill_matches_an_uninterrupted_run(interrupted, uninterrupted):
    code, stdout, stderr = interrupted["resumed"]
    assert code == 0, stderr
    assert "resuming from its last checkpoint" in stdout
    assert_same_outcome(interrupted["outcome"], uninterrupted)
    assert interrupted["outcome"]["metrics"]["steps"] == 120
    assert not (interrupted["out"] / RUN / "train_state.safetensors").exists()
    assert not list((interrupted["out"] / RUN).glob(".*tmp*"))


def test_run_records_versions_and_exact_commands(interrupted):
    config = interrupted["outcome"]["config"]
    for package in ("torch", "transformer-lens", "toylens"):
        assert config["versions"][package], package
    command = "python -m tasks.winograd " + " ".join(TRAIN) + f" --out {interrupted['out']}"
    assert config["command"] == command
    assert config["resumed_by"] == [f"{command} --resume"] * 2


def test_same_command_and_seed_give_bitwise_identical_runs(tmp_path, small_winograd):
    first = train_tiny(small_winograd, tmp_path / "a" / "winograd", TINY_SPECS, steps=60)
    second = train_tiny(small_winograd, tmp_path / "b" / "winograd", TINY_SPECS, steps=60)
    for name in TINY_SPECS:
        assert_same_outcome(run_outcome(first / name / "seed0"), run_outcome(second / name / "seed0"))


def test_run_from_another_toylens_version_with_the_same_format_loads(tiny_runs, tmp_path):
    import shutil

    from tasks.training.runs import find_runs

    copy = tmp_path / "winograd"
    shutil.copytree(tiny_runs, copy)
    for config_path in copy.rglob("config.json"):
        config = json.loads(config_path.read_text())
        config["versions"]["toylens"] = "0.0.1"
        config_path.write_text(json.dumps(config))
    runs = find_runs(copy)
    assert [(run.model_name, run.seed) for run in runs] == [(run.model_name, run.seed) for run in find_runs(tiny_runs)]
    for run in runs:
        assert_holds_its_stored_weights(run)


def assert_holds_its_stored_weights(run) -> None:
    """The loaded model's parameters are the tensors in its model.safetensors, read independently."""
    from safetensors.torch import load_file

    stored = load_file(run.path / "model.safetensors")
    state = run.load_model().state_dict()
    assert stored and all(torch.equal(state[name], tensor) for name, tensor in stored.items())


def children(pid: int) -> list[int]:
    listed = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in listed.split()]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout
    return bool(status.strip()) and not status.strip().startswith("Z")


@pytest.mark.isolated
def test_parallel_workers_exit_when_the_parent_is_killed(tmp_path):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tasks.winograd",
            "train",
            "--models",
            "attn-only-1x1",
            "--seeds",
            "0-1",
            "--jobs",
            "2",
            "--steps",
            "100000",
            "--nouns",
            "6",
            "--no-progress",
            "--out",
            str(tmp_path),
        ],
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while len(list(tmp_path.rglob("log.jsonl"))) < 2:  # both workers are training
        assert time.monotonic() < deadline and process.poll() is None
        time.sleep(0.1)
    workers = children(process.pid)
    process.kill()
    process.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.2)
    survivors = [pid for pid in workers if alive(pid)]
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert workers and not survivors


def test_a_run_written_before_a_spec_field_existed_loads_with_that_fields_default(tiny_runs, tmp_path):
    """As if `scale_scores` were added to ModelSpec after these runs were written: their configs
    (signed by the version that wrote them) lack it, and they load as the same models."""
    import shutil

    from tasks.training.runs import find_runs, run_sha256

    copy = tmp_path / "winograd"
    shutil.copytree(tiny_runs, copy)
    for config_path in copy.rglob("config.json"):
        config = json.loads(config_path.read_text())
        assert config["spec"].pop("scale_scores") is True  # the default: the behaviour they have
        config["run_sha256"] = run_sha256(config)
        config_path.write_text(json.dumps(config))
    for run, original in zip(find_runs(copy), find_runs(tiny_runs), strict=True):
        assert_holds_its_stored_weights(run)
        inputs = original.batches()["heldout"].inputs[:8]  # and computes as the full spec does
        assert torch.equal(run.load_model()(inputs), original.load_model()(inputs))
