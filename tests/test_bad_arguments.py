"""Names, sizes and flags are checked before they are used: names that would escape their folder,
empty values, absurd sizes and seeds, a model too big to train, a full disk, a spec field given
twice, Ray addresses and GPU counts that cannot work. Each ends with exit 2 and one line."""

from __future__ import annotations

import resource
import time

import pytest

from common.cli import UsageError

from tests.conftest import scaled_by_load
from tests.refusals import QUICK, RUN, TRAIN, cli, copy_runs, edit_json, in_process, limited_memory, one_line


@pytest.mark.parametrize("name", ["../../../../escaped", "a/b", "", ".hidden", {"x": 1}, 3])
def test_a_model_name_that_would_escape_is_refused(tiny_runs, tmp_path, name):
    out = copy_runs(tiny_runs, tmp_path / "deep" / "er")
    edit_json(out / RUN / "config.json", lambda c: c.update(model_name=name), sign=True)
    one_line(cli("probes.circuit", "report", str(out), "--jobs", "1"), "model_name")
    assert not (out / "report").exists() and not list(tmp_path.rglob("*escaped*"))


@pytest.mark.parametrize(
    "argv, env, fragment",
    [
        (("--out", ""), {}, "empty path"),
        (("--models", ""), {}, "empty name"),
        (("--models", ","), {}, "empty name"),
        (("--models", "attn-only-2x1,"), {}, "empty name"),
        ((), {"TOYLENS_CACHE": ""}, "TOYLENS_CACHE is set but empty"),
    ],
)
def test_empty_values_are_refused(tmp_path, argv, env, fragment):
    train = [arg for arg in TRAIN if arg not in ("--models", "attn-only-2x1")]
    one_line(cli(*train, "--out", str(tmp_path / "runs"), *argv, cwd=tmp_path, env=env), fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["runs"])
    assert not list(tmp_path.rglob("summary.json")) and not list(tmp_path.rglob("config.json"))


@pytest.mark.parametrize(
    "argv",
    [("toylens", "accuracy", ""), ("probes.circuit", "report", ""), ("probes.circuit", "report", "runs", "--out", "")],
)
def test_empty_folders_for_probes_are_refused(tmp_path, argv):
    one_line(cli(*argv, cwd=tmp_path), "empty path")
    assert list(tmp_path.iterdir()) == []


INDUCTION = ("toylens", "train", "induction", "--no-progress", "--seeds", "0-0", "--models", "attn-only-1x4")


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (("--tokens", "100000", "--max-repeat", "100000"), "max_repeat <= 256"),
        (("--train", "1000000000"), "train must be a number of sequences from 1 to 1000000"),
        (("--min-repeat", "5000", "--max-repeat", "5000", "--train", "100"), "max_repeat <= 256"),
    ],
)
def test_absurd_task_parameters_are_refused_at_once(tmp_path, argv, fragment):
    started = time.monotonic()
    one_line(cli(*INDUCTION, *argv, "--out", str(tmp_path / "runs")), fragment)
    assert time.monotonic() - started < scaled_by_load(60) and not (tmp_path / "runs").exists()


def test_a_model_too_big_to_train_is_refused_with_its_estimate():
    from models import ModelSpec

    with pytest.raises(UsageError, match=r"would need ~[0-9.]+ GiB at batch 64, more than toylens's limit of 16 GiB"):
        ModelSpec(n_layers=2, d_model=64, n_heads=4, n_ctx=4096, d_vocab=100).check_memory(64)


def test_a_full_disk_is_one_line(tmp_path):
    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))

    out = tmp_path / "runs"
    one_line(
        cli(*TRAIN, "--out", str(out), env={"TOYLENS_CACHE": str(tmp_path / "cache")}, preexec_fn=small_files),
        "File too large",
    )
    assert not list(out.rglob("*.tmp"))


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (("tasks.winograd", "sweep", "--seeds", "0-999999999"), "more than 100000 seeds"),
        (("tasks.winograd", "sweep", "--seeds", "4294967296-4294967296"), "last <= 4294967295"),
        (("toylens", "scaling", "--seeds", "100000000000"), "a bare number is ambiguous; write 0-99999999999"),
    ],
)
def test_absurd_seeds_are_refused_before_they_fill_memory(tmp_path, argv, fragment):
    one_line(cli(*argv, "--out", str(tmp_path / "out"), preexec_fn=limited_memory), fragment)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("module, flag", [("ladder", "--rungs"), ("positions", "--kinds")])
@pytest.mark.parametrize("value", [",", ""])
def test_an_empty_list_of_names_is_refused(tmp_path, module, flag, value):
    task = ("winograd",) if module == "ladder" else ()
    one_line(
        cli("toylens", module, *task, flag, value, *QUICK, "--out", str(tmp_path / "out")),
        f"{flag} {value!r} has an empty name",
    )
    assert not (tmp_path / "out").exists()


def test_a_spec_field_given_twice_is_refused(tmp_path, capsys):
    from probes.chapter.params import main

    one_line(
        in_process(main, ["d_model=64", "d_model=128", "d_vocab=10", "--out", str(tmp_path)], capsys),
        "d_model is given twice",
    )


SWEEP = (
    "tasks.winograd",
    "sweep",
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
)


@pytest.mark.parametrize(
    "argv, env, fragment",
    [
        (("--executor", "ray"), {"RAY_ADDRESS": "garbage"}, "'garbage' is not HOST:PORT"),
        (("--executor", "ray", "--address", "127.0.0.1:1"), {}, "nothing answers at Ray address '127.0.0.1:1'"),
        (("--gpus-per-run", "inf"), {}, "argument --gpus-per-run: inf is out of range"),
    ],
)
def test_a_ray_address_or_gpu_count_that_cannot_work_is_one_line(tmp_path, argv, env, fragment):
    one_line(cli(*SWEEP, *argv, "--out", str(tmp_path / "out"), env=env), fragment)
    assert not (tmp_path / "out").exists()
