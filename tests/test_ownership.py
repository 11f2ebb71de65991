"""toylens replaces only files whose content it can vouch for, checks every output before it trains,
refuses folders too broad to walk, and never vouches for weights it did not load."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from common.cli import UsageError
from tests.refusals import RUN, contents, copy_runs, edit_json, one_line


def in_process(main, argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    captured = capsys.readouterr()
    return stopped.value.code, captured.out, captured.err


def accuracy_main(argv):
    from toylens.accuracy import main

    main(argv)


def census_main(argv):
    from toylens.census import main

    main(argv)


# (the command that writes it, the runs it reads, the file it writes, what its refusal says)
WRITTEN = {
    "summary.json": (accuracy_main, "tiny_runs", lambda out: out / "summary.json", "was not written by toylens"),
    "census.md": (
        census_main,
        "finished_sweep",
        lambda out: out / "census" / "census.md",
        "was changed or replaced after the census wrote it",
    ),
}


@pytest.mark.parametrize("name", WRITTEN)
def test_a_users_file_saved_under_a_name_toylens_wrote_is_never_replaced(request, tmp_path, capsys, name):
    # Seen: delete toylens's summary.json, save your own under that name, and the next command
    # overwrote it, because the manifest recorded the name and not the content.
    main, runs, where, refusal = WRITTEN[name]
    out = copy_runs(request.getfixturevalue(runs), tmp_path)
    main([str(out)])
    capsys.readouterr()
    path = where(out)
    path.unlink()
    path.write_text("my own notes\n")
    before = contents(out)
    one_line(in_process(main, [str(out)], capsys), str(path), refusal)
    assert contents(out) == before  # refused before anything else was written (census.png, census.json)


def test_a_file_toylens_wrote_is_still_its_own_after_being_rewritten(tmp_path):
    from common.atomic import atomic_write, write_json
    from common.ownership import owned, remove

    path = tmp_path / "ours.json"
    for value in range(3):
        write_json(path, {"value": value})
    assert owned(path)
    atomic_write(tmp_path / "log.jsonl", lambda temp: Path(temp).write_text("a\n"), grows=True)
    with open(tmp_path / "log.jsonl", "a") as log:  # how training appends to its log
        log.write("b\n")
    assert owned(tmp_path / "log.jsonl")
    (tmp_path / "log.jsonl").write_text("c\n")  # not what toylens wrote first
    assert not owned(tmp_path / "log.jsonl")
    remove(path)
    assert not path.exists()


def test_a_sweep_into_a_folder_with_a_users_failed_json_refuses_before_training(tmp_path, capsys):
    # Seen: the sweep trained every run and only then stopped on the user's own OUT/failed.json
    # (one of the shape the census reads would have been counted as a failed run).
    from toylens.cli import main_for_task

    out = tmp_path / "sweep"
    out.mkdir()
    (out / "failed.json").write_text('{"model_name": "mine", "seed": 0, "error": "my notes"}\n')
    argv = [
        "sweep",
        "--out",
        str(out),
        "--models",
        "bag-of-words",
        "--seeds",
        "0-0",
        "--steps",
        "5",
        "--nouns",
        "6",
        "--jobs",
        "1",
        "--no-progress",
    ]
    one_line(
        in_process(lambda a: main_for_task("winograd", a), argv, capsys),
        str(out / "failed.json"),
        "was not written by toylens",
    )
    assert contents(out) == {
        "failed.json": b'{"model_name": "mine", "seed": 0, "error": "my notes"}\n'
    }  # nothing trained


ROOTS = {
    "train": lambda out: ("winograd", ["train", "--out", out]),
    "sweep": lambda out: ("winograd", ["sweep", "--out", out]),
    "accuracy": lambda out: (None, [out]),
}


@pytest.mark.parametrize("command", ROOTS)
@pytest.mark.parametrize("root", ["/", "home", "above home"])
def test_a_root_or_home_folder_is_refused_in_one_line_before_any_walk(tmp_path, monkeypatch, capsys, command, root):
    # Seen: `--out /` walked the whole file system for config.json, then reported a /proc error.
    from toylens.cli import main_for_task

    home = tmp_path / "home" / "me"
    home.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    folder = {"/": "/", "home": str(home), "above home": str(home.parent)}[root]

    def walked(*args, **kwargs):
        raise AssertionError("walked the folder")

    monkeypatch.setattr(os, "walk", walked)
    monkeypatch.setattr(Path, "rglob", walked)
    task, argv = ROOTS[command](folder)
    main = (lambda a: main_for_task(task, a)) if task else accuracy_main
    one_line(in_process(main, argv, capsys), folder, "walk every file under it")
    assert not (home / ".toylens.lock").exists()


def test_the_library_refuses_a_root_runs_folder_too():
    from toylens.family import check_out_folder

    with pytest.raises(UsageError, match="the file-system root"):
        check_out_folder(Path("/"), None)


def forge(out: Path, change) -> None:
    """Replace a run's weights by `change(tensor)` of each, recomputing every checksum that covers
    them (config's weights_sha256 and run_sha256, metrics' own): a forgery, not damage."""
    from safetensors.torch import load_file, save_file

    from common.jsonfiles import sha256_file
    from tasks.training.runs import metrics_sha256

    weights = out / RUN / "model.safetensors"
    save_file({name: change(tensor) for name, tensor in load_file(str(weights)).items()}, str(weights))
    digest = sha256_file(weights)
    edit_json(out / RUN / "config.json", lambda c: c.update(weights_sha256=digest), sign=True)
    metrics = json.loads((out / RUN / "metrics.json").read_text())
    metrics["evaluation"]["weights_sha256"] = digest
    metrics["sha256"] = metrics_sha256(metrics)
    (out / RUN / "metrics.json").write_text(json.dumps(metrics))


FORGERIES = {
    "all NaN": (lambda t: t * float("nan"), "NaN or infinite"),
    "float64": (lambda t: t.double(), "torch.float64"),
    "all zero": (lambda t: t * 0, "but the run's weights score"),
}


@pytest.mark.parametrize("forgery", FORGERIES)
def test_accuracy_never_vouches_for_weights_it_did_not_load(tiny_runs, tmp_path, capsys, forgery):
    # Seen: probes.accuracy printed the stored 100% for all-NaN, float64 and all-zero weights.
    change, fragment = FORGERIES[forgery]
    out = copy_runs(tiny_runs, tmp_path)
    forge(out, change)
    one_line(in_process(accuracy_main, [str(out)], capsys), fragment)


def test_accuracy_says_how_its_numbers_were_checked(tiny_runs, tmp_path, capsys):
    out = copy_runs(tiny_runs, tmp_path)
    accuracy_main([str(out)])
    assert "re-scored on held-out" in capsys.readouterr().out


def test_a_lock_toylens_makes_in_a_folder_it_owns_nothing_in_is_removed_whatever_the_outcome(tmp_path):
    """Seen: a report onto a full disk left .toylens.lock in the user's parent folder."""
    from common.atomic import write_json
    from common.lock import folder_lock

    users = tmp_path / "users"
    users.mkdir()
    (users / "notes.md").write_text("mine\n")
    with folder_lock(users, "folder"):
        assert (users / ".toylens.lock").is_file()
    with pytest.raises(RuntimeError), folder_lock(users, "folder"):
        raise RuntimeError("the command failed")
    assert sorted(p.name for p in users.iterdir()) == ["notes.md"]
    ours = tmp_path / "ours"
    with folder_lock(ours, "folder"):
        write_json(ours / "summary.json", {})
    assert (ours / ".toylens.lock").is_file()  # toylens's own folder keeps its lock file
