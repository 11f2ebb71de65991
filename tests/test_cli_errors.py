"""Bad input to every CLI ends with exit code 2 and one line naming the problem and the fix.

Each case runs the real command in a subprocess (they fail before torch is imported, so each takes
well under a second), except those caught only once runs are read (a damaged run folder, a model
that is built), which call the same `main` in this process.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BAD_RUN = Path("attn-only-2x1") / "seed0"


def cli(*argv: str, cwd: Path | None = None) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    return done.returncode, done.stderr


def assert_usage_error(result: tuple[int, str], *fragments: str) -> None:
    code, stderr = result
    lines = stderr.strip().splitlines()
    assert code == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


WINOGRAD = ("tasks.winograd", "train", "--no-progress")


@pytest.mark.parametrize(
    "argv, fragments",
    [
        (("toylens", "train", "nope"), ("unknown task 'nope'", "known tasks: ")),
        (("toylens", "frobnicate"), ("unknown command", "toylens --help")),
        (("toylens", "train"), ("train needs a task name",)),
        (("tasks.winograd",), ("the following arguments are required", "--help")),
        ((*WINOGRAD, "--models", "nope"), ("unknown model(s) ['nope']", "known: bag-of-words")),
        ((*WINOGRAD, "--seeds", "0"), ("--seeds", "write 0-0 for seed 0 alone")),
        ((*WINOGRAD, "--seeds", "0-4999"), ("--seeds asks for 5000 seeds, which is absurd", "at most 1000")),
        ((*WINOGRAD, "--steps", "-3"), ("--steps", "-3 is out of range: use an integer from 1")),
        ((*WINOGRAD, "--steps", "99999999"), ("--steps", "99999999 is out of range", "to 1e+06")),
        ((*WINOGRAD, "--batch-size", "0"), ("--batch-size", "0 is out of range: use an integer from 1")),
        ((*WINOGRAD, "--batch-size", "10000000"), ("--batch-size", "10000000 is out of range", "to 65536")),
        ((*WINOGRAD, "--lr", "0"), ("lr must lie in (0, 1)", "try 1e-3")),
        ((*WINOGRAD, "--lr", "nan"), ("--lr", "nan is out of range")),
        ((*WINOGRAD, "--lr", "fast"), ("--lr", "'fast' is not a number")),
        ((*WINOGRAD, "--nouns", "5"), ("nouns must be an even number",)),
        ((*WINOGRAD, "--heldout-fraction", "1.5"), ("heldout_fraction",)),
        ((*WINOGRAD, "--resume", "--overwrite"), ("not allowed with argument",)),
        (("toylens", "accuracy", "/no/such/runs"), ("does not exist", "train first")),
        (("probes.circuit",), ("the following arguments are required", "--help")),
        (("probes.circuit", "nope"), ("invalid choice: 'nope'",)),
        (("probes.circuit", "report", "/no/such/runs"), ("does not exist", "train first")),
        (("toylens", "params", "foo=1"), ("is not FIELD=VALUE", "fields: n_layers")),
        (("toylens", "params", "d_model=x", "d_vocab=3"), ("d_model='x': expected an integer",)),
        (("toylens", "params", "/no/such/run"), ("neither gpt2, a run folder nor key=value",)),
        (("toylens", "params", "d_model=64"), ("give d_vocab=N",)),
        (("toylens", "params", "d_model=60", "n_heads=7", "d_vocab=3"), ("does not divide d_model=60",)),
        (("toylens", "scaling", "--task", "nope"), ("unknown task 'nope'",)),
        (("toylens", "scaling", "--widths", "0"), ("--widths", "0 is out of range: use an integer from 1")),
        (("toylens", "scaling", "--widths", "4096"), ("too wide", "d_k <= 1024")),
        (("toylens", "scaling", "--steps", "10", "--every", "50"), ("--every 50 exceeds --steps 10",)),
        (("toylens", "cost", "--max-len", "64"), ("fewer than two lengths", ">= 128")),
        (("toylens", "cost", "--max-len", "16384"), ("8 GiB", "at most 8192")),
        (("toylens", "cost", "--budget", "0"), ("--budget", "0 is out of range: use a number from 0.001 to 60")),
        (("toylens", "cost", "--budget", "soon"), ("--budget", "'soon' is not a number")),
    ],
)
def test_bad_arguments(argv, fragments):
    assert_usage_error(cli(*argv), *fragments)


def test_bad_task_arguments_for_induction():
    from tasks.registry import task_classes

    if "induction" not in task_classes():
        pytest.skip("induction task not installed")
    assert_usage_error(cli("toylens", "train", "induction", "--models", "nope"), "unknown model(s) ['nope']")


def test_empty_runs_folder(tmp_path):
    assert_usage_error(cli("toylens", "accuracy", str(tmp_path)), "holds no finished runs", "train first")


def test_out_is_a_file(tmp_path):
    (tmp_path / "runs").write_text("")
    assert_usage_error(cli(*WINOGRAD, "--out", str(tmp_path / "runs")), "is a file, not a folder")


def test_out_folder_of_another_task(tiny_runs, tmp_path):
    out = copy_runs(tiny_runs, tmp_path)
    edit_config(out, lambda c: c["task"].update(name="induction"))
    assert_usage_error(
        cli(*WINOGRAD, "--out", str(out)), "already holds a run of task 'induction'", "choose another --out"
    )


def test_out_folder_with_an_incompatible_run(tiny_runs, tmp_path):
    # tiny_runs' attn-only-2x1 is narrower than the task's default one and trained differently.
    out = copy_runs(tiny_runs, tmp_path)
    assert_usage_error(
        cli(*WINOGRAD, "--models", "attn-only-2x1", "--seeds", "0-0", "--nouns", "8", "--out", str(out)),
        "holds an incompatible run (different spec.d_model",
        "pass --overwrite",
    )


def copy_runs(tiny_runs: Path, tmp_path: Path) -> Path:
    out = tmp_path / "winograd"
    shutil.copytree(tiny_runs, out)
    return out


def edit_config(out: Path, edit, sign: bool = True) -> None:
    """Edit a run's config.json. `sign` recomputes run_sha256, as a deliberate forger would, so the
    checks behind the checksum are tested too; unsigned edits of what defines a run are refused
    by the checksum (test_run_defining_edit_without_checksum)."""
    from tasks.training.runs import run_sha256

    path = out / BAD_RUN / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    if sign and "run_sha256" in config:
        config["run_sha256"] = run_sha256(config)
    path.write_text(json.dumps(config))


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def swap_two_tokens(config: dict) -> None:
    vocabulary = config["vocabulary"]
    vocabulary[-1], vocabulary[-2] = vocabulary[-2], vocabulary[-1]


def drop_spec_field(config: dict) -> None:
    del config["spec"]["n_ctx"]


def set_format(config: dict) -> None:
    config["format"] = "toylens-run/9"
    config["versions"]["toylens"] = "9.0"


WEIGHTS = BAD_RUN / "model.safetensors"
DAMAGES = {
    "weights missing": (lambda out: (out / WEIGHTS).unlink(), ("model.safetensors not found",)),
    "weights truncated": (
        lambda out: (out / WEIGHTS).write_bytes((out / WEIGHTS).read_bytes()[:500]),
        ("corrupt or truncated", "retrain"),
    ),
    "weights altered": (lambda out: flip_last_byte(out / WEIGHTS), ("SHA-256 differs",)),
    "config not JSON": (lambda out: (out / BAD_RUN / "config.json").write_text('{"spec": '), ("is not valid JSON",)),
    "config field missing": (
        lambda out: edit_config(out, lambda c: c.pop("vocabulary")),
        ("missing field(s) ['vocabulary']",),
    ),
    "config field unknown": (
        lambda out: edit_config(out, lambda c: c.update(surprise=1)),
        ("field(s) ['surprise'] that this toylens", "does not know"),
    ),
    # A missing spec field takes its default (old runs load); here the default context does not fit the weights.
    "spec field missing": (lambda out: edit_config(out, drop_spec_field), ("spec expects", "do not belong together")),
    "spec field unknown": (
        lambda out: edit_config(out, lambda c: c["spec"].update(alibi=True)),
        ("unknown field(s) ['alibi']",),
    ),
    "heads do not divide width": (
        lambda out: edit_config(out, lambda c: c["spec"].update(n_heads=3)),
        ("n_heads=3 does not divide d_model=32",),
    ),
    "vocabulary size differs": (
        lambda out: edit_config(out, lambda c: c["vocabulary"].pop()),
        ("vocabulary has", "d_vocab=", "do not belong together"),
    ),
    "vocabulary tokens differ": (
        lambda out: edit_config(out, swap_two_tokens),
        ("vocabulary differs from task 'winograd'",),
    ),
    "other format": (
        lambda out: edit_config(out, set_format),
        ("format 'toylens-run/9' (written by toylens 9.0)", "use that toylens version"),
    ),
    "metrics not JSON": (lambda out: (out / BAD_RUN / "metrics.json").write_text("{"), ("metrics.json",)),
    "other tasks mixed in": (
        lambda out: edit_config(out, lambda c: c["task"].update(name="induction")),
        ("mixes runs of tasks",),
    ),
}


def accuracy_in_process(out: Path, capsys) -> tuple[int, str]:
    """`toylens accuracy OUT` through the command's own entry, in this process: the refusal is the
    command's; a subprocess would only add seconds of imports (the circuit report's below and the
    other tests here run the real command line)."""
    from toylens.console import main

    return in_process(main, ["accuracy", str(out)], capsys)


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_run_folder(tiny_runs, tmp_path, capsys, damage):
    apply, fragments = DAMAGES[damage]
    out = copy_runs(tiny_runs, tmp_path)
    apply(out)
    assert_usage_error(accuracy_in_process(out, capsys), *fragments)


@pytest.mark.parametrize("damage", ["weights altered", "other format"])
def test_damaged_run_folder_in_the_circuit_report(tiny_runs, tmp_path, damage):
    apply, fragments = DAMAGES[damage]
    out = copy_runs(tiny_runs, tmp_path)
    apply(out)
    assert_usage_error(cli("probes.circuit", "report", str(out)), *fragments)


class Payload:
    """Unpickling this runs a shell command that leaves a marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


@pytest.mark.parametrize("name", ["model.pt", "model.safetensors"])
def test_pickled_checkpoint_is_refused_and_never_run(tiny_runs, tmp_path, capsys, name):
    out = copy_runs(tiny_runs, tmp_path)
    marker = tmp_path / "pwned"
    (out / WEIGHTS).unlink()
    (out / BAD_RUN / name).write_bytes(pickle.dumps(Payload(marker), protocol=4))
    expected = "pickled checkpoint" if name == "model.pt" else "a pickle (torch.save), not safetensors"
    assert_usage_error(accuracy_in_process(out, capsys), expected, "never unpickles")
    assert not marker.exists()


def in_process(main, argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    return stopped.value.code, capsys.readouterr().err


def test_weights_of_another_model(tiny_runs, tmp_path, capsys):
    from common.jsonfiles import sha256_file
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    shutil.copy(out / "bag-of-words" / "seed0" / "model.safetensors", out / WEIGHTS)
    edit_config(out, lambda c: c.update(weights_sha256=sha256_file(out / WEIGHTS)))
    assert_usage_error(in_process(main, [str(out)], capsys), "do not match the spec", "do not belong together")


def test_sequences_longer_than_the_context(tiny_runs, tmp_path, capsys):
    """A run whose model has a shorter context than its task's sequences (a run and a task that do
    not fit together, e.g. task parameters edited after training)."""
    from dataclasses import replace

    from models import ModelSpec, build_model
    from models.checkpoint import save_checkpoint
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    from tasks.training.runs import run_sha256

    config = json.loads((out / BAD_RUN / "config.json").read_text())
    spec = replace(ModelSpec.from_dict(config["spec"]), n_ctx=10)
    config = {**config, "spec": spec.to_dict()}
    save_checkpoint(out / BAD_RUN, build_model(spec), {**config, "run_sha256": run_sha256(config)})
    assert_usage_error(
        in_process(main, [str(out)], capsys),
        "need 17 positions",
        "n_ctx=10",
        "task parameters the run was trained with",
    )


@pytest.mark.isolated  # on the bug this guards, the process ends (os._exit) instead of the test failing
def test_a_press_that_stopped_an_earlier_command_does_not_end_a_later_one_in_the_same_process():
    """In-process callers (tests, notebooks) run several commands in one process: a Ctrl-C that
    stopped one must not make a later one end the process after it (common.interrupts.end_process)."""
    from common import interrupts
    from common.cli import entry

    interrupts._pressed.append(True)  # as interrupt_once records a press

    def refused() -> None:
        raise SystemExit(2)

    with pytest.raises(SystemExit):
        entry(refused)
