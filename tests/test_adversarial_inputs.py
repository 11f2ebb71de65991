"""Adversarial input to the commands and the files they read, beyond the other refusal tests:
settings that would silently change what a run means, snapshots renamed from another step,
runs folders mixing task variants or holding a run twice, JSON saying two things, safetensors
headers that lie, and module forms that ran nothing. Each ends with exit 2 and one line naming
the file or flag (or the refusal's message), and nothing of the user's changed."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tests.refusals import RUN, contents, copy_runs, edit_json, in_process, one_line


def train_main(argv, capsys):
    from toylens.cli import main

    return in_process(
        main,
        [
            "train",
            "winograd",
            "--models",
            "attn-only-2x1",
            "--seeds",
            "0-0",
            "--steps",
            "5",
            "--nouns",
            "6",
            "--jobs",
            "1",
            "--no-progress",
            *argv,
        ],
        capsys,
    )


# ---- settings that change what a run means -----------------------------------------------------


@pytest.mark.parametrize(
    "flag, value, fragment",
    [
        ("--stop-accuracy", "-5", "--stop-accuracy: -5 is out of range"),  # every evaluation "solved"
        ("--stop-accuracy", "0", "stop_accuracy must be > 0"),
        (
            "--plateau-tolerance",
            "-1",
            "--plateau-tolerance: -1 is out of range",
        ),  # a worse loss "improves": never stalls
    ],
)
def test_stopping_settings_that_would_misreport_why_a_run_stopped_are_refused(tmp_path, capsys, flag, value, fragment):
    out = tmp_path / "runs"
    one_line(train_main([flag, value, "--out", str(out)], capsys), fragment)
    assert not out.exists()


def test_a_stored_run_with_such_a_setting_is_refused_even_when_re_signed(tiny_runs, tmp_path, capsys):
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    edit_json(out / RUN / "config.json", lambda c: c["training"].__setitem__("stop_accuracy", -5.0), sign=True)
    one_line(in_process(main, [str(out)], capsys), "config.json: training: stop_accuracy must be > 0")


# ---- snapshots ---------------------------------------------------------------------------------


def snapshots(out: Path) -> Path:
    """Two genuine snapshots (steps 0 and 50) of the tiny attention run, as training writes them."""
    from safetensors.torch import load_file

    from models.checkpoint import save_tensors

    state = load_file(str(out / RUN / "model.safetensors"))
    for step in (0, 50):
        save_tensors(out / RUN / "snapshots" / f"step{step}.safetensors", state, {"step": step})
    return out / RUN / "snapshots"


def test_a_snapshot_copied_from_another_run_is_refused(tiny_runs, tmp_path, capsys):
    from safetensors.torch import load_file, save_file

    from probes.report.dynamics import main

    out = copy_runs(tiny_runs, tmp_path)
    other = snapshots(copy_runs(tiny_runs, tmp_path / "other"))
    mine = snapshots(out)
    # Of the same spec and step, with the right metadata, finite: but another run's weights.
    state = load_file(str(other / "step50.safetensors"))
    state = {name: tensor * 2 for name, tensor in state.items()}
    save_file(state, str(other / "step50.safetensors"), metadata={"toylens": json.dumps({"step": 50})})
    shutil.copy(other / "step50.safetensors", mine / "step50.safetensors")
    one_line(in_process(main, [str(out)], capsys), "step50.safetensors is not the snapshot training wrote there")


@pytest.mark.parametrize("how", ["renamed to another step", "copied to a zero-padded name", "metadata a list"])
def test_a_snapshot_that_is_not_the_step_its_name_says_is_refused(tiny_runs, tmp_path, capsys, how):
    from models.checkpoint import save_tensors
    from probes.report.dynamics import main

    out = copy_runs(tiny_runs, tmp_path)
    folder = snapshots(out)
    if how == "renamed to another step":
        (folder / "step50.safetensors").rename(folder / "step20.safetensors")
        bad = "step20.safetensors"
    elif how == "copied to a zero-padded name":
        shutil.copy(folder / "step50.safetensors", folder / "step050.safetensors")
        bad = "step050.safetensors"
    else:
        from safetensors.torch import load_file

        save_tensors(folder / "step50.safetensors", load_file(str(folder / "step50.safetensors")), [50])
        bad = "step50.safetensors"
    one_line(in_process(main, [str(out)], capsys), bad, "not the step", "retrain the run")


def header_lie(path: Path, how: str) -> None:
    """Rewrite a safetensors file's header (8-byte little-endian length, then JSON) to lie."""
    raw = path.read_bytes()
    length = struct.unpack("<Q", raw[:8])[0]
    header, body = json.loads(raw[8 : 8 + length]), raw[8 + length :]
    name = sorted(k for k in header if k != "__metadata__")[0]
    if how == "huge header length":
        path.write_bytes(struct.pack("<Q", 2**62) + raw[8:])
        return
    if how == "wrong dtype":
        header[name]["dtype"] = "I32"  # same byte size: the header is self-consistent
    elif how == "offsets past the end":
        header[name]["data_offsets"] = [o + 10**9 for o in header[name]["data_offsets"]]
    elif how == "extra tensor":
        header["extra.weight"] = dict(header[name])
    elif how == "missing tensor":
        del header[name]
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + body)


LIES = ["huge header length", "wrong dtype", "offsets past the end", "extra tensor", "missing tensor"]


@pytest.mark.parametrize("how", LIES)
def test_weights_whose_header_lies_are_refused_even_with_a_matching_checksum(tiny_runs, tmp_path, capsys, how):
    from common.jsonfiles import sha256_file
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    weights = out / RUN / "model.safetensors"
    header_lie(weights, how)
    # A forger also rewrites the recorded checksum: the header's own checks must still hold.
    edit_json(out / RUN / "config.json", lambda c: c.__setitem__("weights_sha256", sha256_file(weights)))
    one_line(in_process(main, [str(out)], capsys), "model.safetensors")


@pytest.mark.parametrize("how", LIES + ["a folder", "a dangling link"])
def test_a_snapshot_whose_header_lies_is_refused(tiny_runs, tmp_path, capsys, how):
    from probes.report.dynamics import main

    out = copy_runs(tiny_runs, tmp_path)
    path = snapshots(out) / "step50.safetensors"
    if how == "a folder":
        path.unlink()
        path.mkdir()
    elif how == "a dangling link":
        path.unlink()
        path.symlink_to(tmp_path / "nowhere.safetensors")
    else:
        header_lie(path, how)
    fragment = " is not a regular file" if how in ("a folder", "a dangling link") else ""
    one_line(in_process(main, [str(out)], capsys), "step50.safetensors" + fragment)


# ---- runs folders ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def other_variant(tmp_path_factory) -> Path:
    """attn-only-2x1 seed 1 of 6-noun Winograd: the tiny runs are 8-noun, seed 0."""
    from tests.conftest import TINY_SPECS, train_tiny
    from tasks.winograd import WinogradParams, WinogradTask

    out = tmp_path_factory.mktemp("variant") / "winograd"
    train_tiny(
        WinogradTask(WinogradParams(nouns=6)), out, {"attn-only-2x1": TINY_SPECS["attn-only-2x1"]}, seeds=(1,), steps=5
    )
    return out / "attn-only-2x1" / "seed1"


@pytest.mark.parametrize("command", ["accuracy", "report"])
def test_a_runs_folder_mixing_task_variants_is_refused(tiny_runs, other_variant, tmp_path, capsys, command):
    from toylens.accuracy import main as accuracy
    from toylens.report import main as report

    out = copy_runs(tiny_runs, tmp_path)
    shutil.copytree(other_variant, out / "attn-only-2x1" / "seed1")
    before = contents(out)
    argv = [str(out)] if command == "accuracy" else ["report", str(out), "--jobs", "1"]
    one_line(
        in_process(accuracy if command == "accuracy" else report, argv, capsys),
        "mixes variants of task 'winograd'",
        "differ in nouns",
    )
    assert contents(out) == before


def test_the_report_counts_each_seed_once(tiny_runs, tmp_path, capsys):
    from toylens.report import main

    out = copy_runs(tiny_runs, tmp_path)
    shutil.copytree(out / RUN, out / "attn-only-2x1" / "seed0-copy")
    one_line(
        in_process(main, ["report", str(out), "--jobs", "1"], capsys),
        "both attn-only-2x1 seed 0",
        "counts each seed once",
    )
    assert not (out / "report").exists()


def test_a_foreign_folder_in_a_runs_folder_is_named(tiny_runs, tmp_path, capsys):
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    (out / "hf-model").mkdir()
    (out / "hf-model" / "config.json").write_text('{"architectures": ["GPT2LMHeadModel"]}')
    (out / "hf-model" / "metrics.json").write_text("{}")
    before = contents(out)
    one_line(in_process(main, [str(out)], capsys), "hf-model/config.json")
    one_line(train_main(["--out", str(out)], capsys), "hf-model", "a config.json that is not a toylens run's")
    assert contents(out) == before


# ---- JSON that says two things -----------------------------------------------------------------


def test_json_with_a_key_twice_is_refused(tiny_runs, tmp_path, capsys):
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    config = out / RUN / "config.json"
    # The last "seed" is the recorded one, so the checksum still matches; another reader may take the first.
    config.write_text(config.read_text().replace('"seed": 0', '"seed": 7, "seed": 0', 1))
    one_line(in_process(main, [str(out)], capsys), "config.json is not valid JSON", "key 'seed' twice")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -0.0, 1.5, "0", None, [0], {}, True, -1, 2**64])
def test_a_seed_of_the_wrong_type_or_value_is_one_line_even_when_re_signed(tiny_runs, tmp_path, capsys, value):
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    edit_json(out / RUN / "config.json", lambda c: c.__setitem__("seed", value), sign=True)
    one_line(in_process(main, [str(out)], capsys), "config.json: seed must be an integer from 0 to")


@pytest.mark.parametrize("text", ["", "{", "\xff\xfe", "[]", '"config"', "null", "[" * 100_000])
def test_a_config_that_is_not_a_json_object_is_one_line(tiny_runs, tmp_path, capsys, text):
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    (out / RUN / "config.json").write_bytes(text.encode("latin-1"))
    one_line(in_process(main, [str(out)], capsys), "config.json")


# ---- commands --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["census", "NOWHERE"],
        ["report", "NOWHERE"],
        ["ladder", "no-such-task"],
        ["norms", "no-such-task"],
        ["positions", "--kinds", "bogus"],
    ],
)
def test_every_command_runs_through_python_m_toylens(argv, tmp_path):
    """`python -m toylens COMMAND` reaches the command (a missing `__main__` ran nothing and exited 0).
    In a process of its own: as a program, the command ends its process (common.interrupts.end_process)."""
    argv = [str(tmp_path / "nowhere") if a == "NOWHERE" else a for a in argv]
    done = subprocess.run([sys.executable, "-m", "toylens", *argv], capture_output=True, text=True, timeout=600)
    one_line((done.returncode, "", done.stderr))


def test_tasks_list_refuses_arguments_it_would_ignore(capsys):
    from toylens.cli import main

    one_line(in_process(main, ["list", "winograd"], capsys), "list takes no arguments")


@pytest.mark.parametrize(
    "where, fragment",
    [
        ("a user's file", "is a file, not a folder"),
        ("a dangling link", "is a symbolic link"),
        ("a user's folder", "summary.json was not written by toylens"),
    ],
)
def test_a_train_out_path_that_is_not_toylens_s_is_never_written(tmp_path, capsys, where, fragment):
    out = tmp_path / "my runs ü"  # spaces and unicode are fine; what is there is not toylens's
    if where == "a user's file":
        out.write_text("my notes\n")
    elif where == "a dangling link":
        out.symlink_to(tmp_path / "nowhere")
    else:
        out.mkdir()
        (out / "summary.json").write_text('{"mine": true}\n')
    before = contents(tmp_path)
    one_line(train_main(["--out", str(out)], capsys), str(out), fragment)
    # The lock toylens takes on the folder is its own file (common.ownership: names beginning .toylens).
    assert {k: v for k, v in contents(tmp_path).items() if not Path(k).name.startswith(".toylens")} == before


# ---- files that are not regular files: a FIFO blocks whoever opens it to read ------------------

# Opens the FIFO for writing, again and again, after 20 s: a reader blocked on it gets end-of-file.
RELEASE = "import os, sys, time\ntime.sleep(20)\nfor _ in range(100):\n    os.close(os.open(sys.argv[1], os.O_WRONLY))"


def unblocked(command, fifo: Path):
    """`command()`'s result; a command that waited on `fifo` (a FIFO blocks whoever opens it to
    read until a writer comes, and safetensors waits holding the GIL, so no thread of this process
    could let it go) is let go by another process after 20 s, and fails the test."""
    import subprocess
    import time

    release = subprocess.Popen([sys.executable, "-c", RELEASE, str(fifo)])
    start = time.monotonic()
    try:
        result = command()
    finally:
        release.kill()
        release.wait()
    assert time.monotonic() - start < 20, f"the command waited on the FIFO {fifo}"
    return result


@pytest.mark.parametrize(
    "where, fragment",
    [
        ("x/config.json", "config.json is not a regular file"),
        (".toylens.json", "is not an ownership manifest toylens wrote"),
        (".toylens.lock", ".toylens.lock is not a regular file"),
    ],
)
def test_a_fifo_where_train_reads_a_file_is_refused_not_waited_on(tmp_path, capsys, where, fragment):
    import os

    out = tmp_path / "runs"
    (out / where).parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(out / where)
    one_line(unblocked(lambda: train_main(["--out", str(out)], capsys), out / where), fragment)


def test_a_fifo_snapshot_is_refused_not_waited_on(tiny_runs, tmp_path, capsys):
    import os

    from probes.report.dynamics import main

    out = copy_runs(tiny_runs, tmp_path)
    path = snapshots(out) / "step50.safetensors"
    path.unlink()
    os.mkfifo(path)
    one_line(unblocked(lambda: in_process(main, [str(out)], capsys), path), "step50.safetensors is not a regular file")


def test_a_fifo_named_like_a_lock_below_the_runs_folder_is_not_waited_on(tiny_runs, tmp_path, capsys):
    import os

    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    fifo = out / "attn-only-2x1" / ".toylens.lock"
    os.mkfifo(fifo)
    unblocked(lambda: main([str(out)]) or True, fifo)
    assert "wrote" in capsys.readouterr().out


def test_training_another_variant_into_a_runs_folder_is_refused_before_training(tiny_runs, tmp_path, capsys):
    """The readers refuse a folder mixing variants; train says so before spending the training."""
    out = copy_runs(tiny_runs, tmp_path)  # 8-noun runs; train_main asks for 6 nouns
    before = contents(out)
    one_line(
        train_main(["--out", str(out)], capsys), "holds runs of another variant of task 'winograd'", "differs in nouns"
    )
    assert contents(out) == before
