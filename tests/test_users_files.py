"""toylens never changes a file it did not write, one writer holds a runs folder, and a report is
published whole: a user's files, links and manifests in every place toylens writes, and every
command's outputs checked before any work. Each case asserts exit 2 with one line (or the refusal's
message) and nothing of the user's changed."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.cli import UsageError

from tests.refusals import QUICK, RUN, TRAIN, cli, contents, copy_runs, in_process, one_line


USER_FILES = {
    "summary.json": "summary.json",
    "report": "report/report.md",
    "run folder": "attn-only-2x1/seed0/metrics.json",
    "snapshot folder": "attn-only-2x1/seed0/snapshots/keep.txt",
}


@pytest.mark.parametrize("where", USER_FILES)
def test_a_users_files_in_out_are_never_replaced(tmp_path, where):
    out = tmp_path / "U"
    (out / USER_FILES[where]).parent.mkdir(parents=True)
    (out / USER_FILES[where]).write_text("mine\n")
    before = contents(out)
    one_line(cli(*TRAIN, "--out", str(out), "--report"), "was not written by toylens", "move")
    after = contents(out)
    assert {name: after[name] for name in before} == before
    assert not (out / "attn-only-2x1" / "seed0" / "model.safetensors").exists()  # refused before training


def test_toylens_replaces_only_what_its_manifest_lists(tmp_path):
    from common.atomic import write_json
    from common.ownership import foreign_files, owned, remove

    write_json(tmp_path / "ours.json", {"a": 1})
    write_json(tmp_path / "ours.json", {"a": 2})  # its own file: replaced
    (tmp_path / "theirs.json").write_text("{}")
    assert owned(tmp_path / "ours.json") and not owned(tmp_path / "theirs.json")
    for action in (
        lambda: write_json(tmp_path / "theirs.json", {}),
        lambda: remove(tmp_path / "theirs.json"),
        lambda: write_json(tmp_path / ".toylens.json", {}),
    ):
        with pytest.raises(UsageError):
            action()
    assert (tmp_path / "theirs.json").read_text() == "{}"
    # A write killed midway leaves a toylens temp (named so): that one is toylens's, a user's is not.
    (tmp_path / ".toylens-tmp.999999999.ours.json.k1ll3d").mkdir()
    (tmp_path / ".toylens-tmp.999999999.ours.json.k1ll3d" / ".tmpXYZ").write_text("half")
    (tmp_path / ".notes.abc.tmp").write_text("mine")
    assert foreign_files(tmp_path) == [tmp_path / ".notes.abc.tmp", tmp_path / "theirs.json"]
    os.symlink(tmp_path / "ours.json", tmp_path / "link.json")
    with pytest.raises(UsageError, match="symbolic link"):
        write_json(tmp_path / "link.json", {})


def test_a_report_symlink_in_the_runs_folder_is_not_followed(tiny_runs, tmp_path):
    out = copy_runs(tiny_runs, tmp_path)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "report.md").write_text("keep me\n")
    os.symlink(target, out / "report")
    one_line(cli("probes.circuit", "report", str(out), "--jobs", "1"), "symbolic link")
    assert contents(target) == {"report.md": b"keep me\n"}


def test_accuracy_of_one_run_folder_writes_no_summary_into_it(tiny_runs, tmp_path):
    out = copy_runs(tiny_runs, tmp_path)
    before = contents(out / RUN)
    code, stdout, stderr = cli("toylens", "accuracy", str(out / RUN))
    assert code == 0, stderr
    assert "no summary.json written" in stdout
    assert contents(out / RUN) == before


HOLD = (
    "import sys, time; from common.lock import folder_lock\n"
    "with folder_lock(sys.argv[1], 'runs folder'):\n    print('held', flush=True); time.sleep(120)"
)


@pytest.mark.isolated
def test_a_second_writer_is_refused_naming_the_holder_and_a_dead_holder_is_taken_over(tiny_runs, tmp_path):
    from common.lock import folder_lock

    out = copy_runs(tiny_runs, tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = contents(out)
        for argv in (
            (*TRAIN, "--nouns", "8", "--out", str(out)),
            (*TRAIN, "--nouns", "8", "--out", str(out), "--resume"),
            ("probes.circuit", "report", str(out), "--jobs", "1"),
            ("toylens", "accuracy", str(out)),
        ):
            one_line(cli(*argv), f"is in use by process {holder.pid}")
        assert contents(out) == before
    finally:
        holder.kill()  # SIGKILL: the lock file stays behind, naming a dead process
        holder.wait()
    with folder_lock(out, "runs folder"):  # taken over at once
        assert f"process {os.getpid()}" in (out / ".toylens.lock").read_text()


def fake_report(monkeypatch, fail: bool):
    """measure and write stand-ins: a figure per run, then report.json and report.md (or a kill
    just after report.json, the moment the issue caught)."""
    import probes.report.document
    import probes.report.measure
    import toylens.report
    from common.atomic import atomic_write, write_json

    def measure(run, out, device=None, settings=None):
        atomic_write(Path(out) / "figures" / f"{run.model_name}.png", lambda t: Path(t).write_text("new figure"))
        return None, [], f"figures/{run.model_name}.png"

    def write(measured, sections, out, task, settings):
        write_json(Path(out) / "report.json", {"new": True})
        if fail:
            raise KeyboardInterrupt
        atomic_write(Path(out) / "report.md", lambda t: Path(t).write_text("new report"))
        return Path(out) / "report.md"

    def page(measured, sections, out, task, settings):
        atomic_write(Path(out) / "report.html", lambda t: Path(t).write_text("new page"))
        return Path(out) / "report.html"

    import probes.report.outputs.exports
    import probes.report.outputs.html

    monkeypatch.setattr(toylens.report, "measure_for_report", measure)
    monkeypatch.setattr(probes.report.document, "write_report", write)
    monkeypatch.setattr(probes.report.outputs.html, "write_html", page)
    monkeypatch.setattr(probes.report.outputs.exports, "write_report_mib", lambda measured, out, settings: [])
    monkeypatch.setattr(probes.report.measure, "render_parts", lambda measured, out, settings: {})


@pytest.mark.parametrize("fail", [True, False])
def test_a_report_is_published_whole_or_not_at_all(tiny_runs, tmp_path, monkeypatch, fail):
    from common.atomic import atomic_write, publish_folder, staging
    from toylens.report import report_command

    out = copy_runs(tiny_runs, tmp_path)
    with staging(out / "report") as staged:  # an earlier complete report, with a figure of its own
        atomic_write(staged / "report.md", lambda t: Path(t).write_text("old report"))
        atomic_write(staged / "figures" / "gone.png", lambda t: Path(t).write_text("old figure"))
        publish_folder(staged, out / "report")
    old = contents(out / "report")
    fake_report(monkeypatch, fail)
    if fail:
        with pytest.raises(KeyboardInterrupt):
            report_command(out, None, jobs=1)
        assert contents(out / "report") == old
    else:
        report_command(out, None, jobs=1)
        files = {k: v for k, v in contents(out / "report").items() if not k.endswith(".toylens.json")}
        assert files == {
            "report.json": b'{\n  "new": true\n}\n',
            "report.md": b"new report",
            "report.html": b"new page",
            "figures/attn-only-2x1.png": b"new figure",
            "figures/bag-of-words.png": b"new figure",
        }
    assert [p.name for p in out.iterdir() if p.name.startswith((".report", ".toylens-tmp."))] == []  # no staging left


def kept(folder: Path) -> dict:
    """contents() without the lock files, whose holder's pid a command may rewrite."""
    return {name: data for name, data in contents(folder).items() if not name.endswith(".toylens.lock")}


def test_a_report_path_that_is_a_users_file_is_refused(tiny_runs, tmp_path):
    out = copy_runs(tiny_runs, tmp_path)
    (out / "report").write_text("mine\n")
    before = kept(tmp_path)
    one_line(cli("probes.circuit", "report", str(out), "--jobs", "1"), "is a file, not a folder")
    one_line(cli(*TRAIN, "--nouns", "8", "--out", str(out), "--report"), "is a file, not a folder")
    assert kept(tmp_path) == before


@pytest.mark.parametrize(
    "where, fragment",
    [
        ("the runs folder", "not part of a folder toylens published"),
        ("a run folder", "is a run folder"),
        ("above the runs folder", "not part of a folder toylens published"),
        ("another runs folder", "not part of a folder toylens published"),
    ],
)
def test_a_report_is_never_swapped_in_for_runs(tiny_runs, tmp_path, where, fragment):
    work = tmp_path / "work"
    out, other = copy_runs(tiny_runs, work), copy_runs(tiny_runs, work / "other")
    target = {
        "the runs folder": out,
        "a run folder": out / RUN,
        "above the runs folder": work,
        "another runs folder": other,
    }[where]
    before = kept(tmp_path)
    one_line(cli("probes.circuit", "report", str(out), "--jobs", "1", "--out", str(target)), fragment)
    assert kept(tmp_path) == before


def test_a_model_folder_linked_to_a_users_folder_is_not_written_through(tmp_path):
    out, user = tmp_path / "runs", tmp_path / "mine"
    out.mkdir()
    user.mkdir()
    (user / "notes.txt").write_text("mine\n")
    os.symlink(user, out / "attn-only-2x1")
    one_line(cli(*TRAIN, "--out", str(out)), "attn-only-2x1 is a symbolic link")
    assert contents(user) == {"notes.txt": b"mine\n"}


def test_a_sweeps_point_folder_linked_elsewhere_is_not_written_through(tmp_path):
    out, user = tmp_path / "sweep", tmp_path / "mine"
    out.mkdir()
    user.mkdir()
    os.symlink(user, out / "default")
    one_line(
        cli(
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
            "--out",
            str(out),
        ),
        "default is a symbolic link",
    )
    assert list(user.iterdir()) == []


def test_a_users_file_named_like_the_manifest_is_never_replaced(tiny_runs, tmp_path, capsys):
    from toylens.accuracy import main

    out = tmp_path / "runs"
    shutil.copytree(tiny_runs / "attn-only-2x1", out / "attn-only-2x1")
    (out / ".toylens.json").write_text("my notes, not toylens's\n")
    one_line(in_process(main, [str(out)], capsys), "not an ownership manifest toylens wrote")
    assert (out / ".toylens.json").read_text() == "my notes, not toylens's\n"
    assert not (out / "summary.json").exists()


def test_edges_never_write_over_or_through_a_users_figure(tiny_runs, tmp_path, capsys):
    from toylens.edges import main

    out = copy_runs(tiny_runs, tmp_path)
    figures = out / "edges" / "figures"
    figures.mkdir(parents=True)
    (tmp_path / "target.png").write_text("mine\n")
    os.symlink(tmp_path / "target.png", figures / "edges_attn-only-2x1_seed0.png")
    one_line(in_process(main, [str(out)], capsys), "not written by toylens")
    (figures / "edges_attn-only-2x1_seed0.png").unlink()
    (figures / "edges_attn-only-2x1_seed0.png").write_text("mine\n")
    one_line(in_process(main, [str(out)], capsys), "not written by toylens")
    assert (tmp_path / "target.png").read_text() == "mine\n"
    assert contents(out / "edges") == {"figures/edges_attn-only-2x1_seed0.png": b"mine\n"}


OUTPUTS = {  # module, arguments, a file it writes last
    "ladder": (("toylens", "ladder"), ("winograd", "--rungs", "no-context", "--nouns", "4", *QUICK), "ladder.json"),
    "positions": (("toylens", "positions"), ("--kinds", "learned", "--eval-sequences", "4", *QUICK), "positions.png"),
    "scaling": (("toylens", "scaling"), ("--init-only",), "scaling.json"),
    "cost": (("toylens", "cost"), ("--max-len", "128", "--budget", "0.01"), "cost.png"),
}


@pytest.mark.parametrize("command", OUTPUTS)
def test_a_users_output_file_is_refused_before_any_work(tmp_path, command):
    module, argv, name = OUTPUTS[command]
    (tmp_path / name).write_text("mine\n")
    one_line(cli(*module, *argv, "--out", str(tmp_path)), "not written by toylens")
    assert contents(tmp_path) == {name: b"mine\n"}  # nothing trained or measured into it first


def test_a_damaged_cache_entry_holding_a_users_file_is_refused_at_once(tmp_path, monkeypatch, capsys):
    from tasks.data import cache_root, task_dataset
    from tasks.winograd import WinogradParams, WinogradTask

    monkeypatch.setenv("TOYLENS_CACHE", str(tmp_path))
    task = WinogradTask(WinogradParams(nouns=4, heldout_fraction=0.3))
    task_dataset(task, 0)
    (entry,) = cache_root().iterdir()
    (entry / "toylens-checksums.json").write_text("{junk")
    (entry / "notes.txt").write_text("mine\n")
    capsys.readouterr()
    with pytest.raises(UsageError, match="notes.txt, which toylens did not write"):
        task_dataset(task, 0)
    assert capsys.readouterr().err == ""  # no "rebuilding it" line before the refusal
    assert [p.name for p in cache_root().iterdir()] == [entry.name]  # and nothing generated


def test_a_users_file_named_like_the_lock_is_never_overwritten(tmp_path):
    from common.cli import UsageError
    from common.lock import folder_lock

    (tmp_path / ".toylens.lock").write_text("my notes")
    with pytest.raises(UsageError, match="not written by toylens"):
        with folder_lock(tmp_path, "runs folder"):
            pass
    assert (tmp_path / ".toylens.lock").read_text() == "my notes"
    (tmp_path / ".toylens.lock").unlink()
    for _ in range(2):  # its own lock, left behind by the last holder, is taken again
        with folder_lock(tmp_path, "runs folder"):
            pass
