"""Issue 15, items 1-7: an adversarial user's files, folders and edits. Each case builds its own
fixture and asserts exit 2 with one line, nothing of the user's changed and nothing mixed.
(Items 8-13 are in tests/test_adversarial_more.py; the schema fuzz in tests/test_schema_fuzz.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.cli import UsageError

RUN = Path("attn-only-2x1") / "seed0"
TRAIN = ("tasks.winograd", "train", "--models", "attn-only-2x1", "--seeds", "1", "--no-progress",
         "--steps", "5", "--nouns", "6", "--jobs", "1")


def cli(*argv: str, cwd: Path | None = None, env: dict | None = None, **popen) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True, timeout=300, cwd=cwd,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}, **popen)
    return done.returncode, done.stdout, done.stderr


def one_line(result: tuple, *fragments: str) -> str:
    code, _, stderr = result
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr, stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def contents(folder: Path) -> dict:
    """Every file under `folder` (links as their target), to show nothing was changed."""
    return {p.relative_to(folder).as_posix(): (os.readlink(p) if p.is_symlink() else p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file() or p.is_symlink()}


def copy_runs(tiny_runs: Path, tmp_path: Path) -> Path:
    out = tmp_path / "winograd"
    shutil.copytree(tiny_runs, out)
    return out


def edit_json(path: Path, edit, sign: bool = False) -> None:
    from tasks.runs import run_sha256

    config = json.loads(path.read_text())
    edit(config)
    if sign:
        config["run_sha256"] = run_sha256(config)
    path.write_text(json.dumps(config))


# --- 1. a user's files are never replaced -------------------------------------------------------------

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
    assert not (out / "attn-only-2x1" / "seed0" / "model.safetensors").exists()   # refused before training


def test_toylens_replaces_only_what_its_manifest_lists(tmp_path):
    from common.io import claim, foreign_files, owned, remove, write_json

    write_json(tmp_path / "ours.json", {"a": 1})
    write_json(tmp_path / "ours.json", {"a": 2})          # its own file: replaced
    (tmp_path / "theirs.json").write_text("{}")
    assert owned(tmp_path / "ours.json") and not owned(tmp_path / "theirs.json")
    for action in (lambda: write_json(tmp_path / "theirs.json", {}), lambda: remove(tmp_path / "theirs.json"),
                   lambda: claim(tmp_path / ".toylens.json")):
        with pytest.raises(UsageError):
            action()
    assert (tmp_path / "theirs.json").read_text() == "{}"
    # A write killed midway leaves atomic_write's temp file beside a claimed name: that one is toylens's.
    (tmp_path / ".ours.json.k1ll3d.tmp").write_text("half")
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
    code, stdout, stderr = cli("probes.accuracy", str(out / RUN))
    assert code == 0, stderr
    assert "no summary.json written" in stdout
    assert contents(out / RUN) == before


# --- 2. one writer per runs folder --------------------------------------------------------------------

HOLD = ("import sys, time; from common.lock import folder_lock\n"
        "with folder_lock(sys.argv[1], 'runs folder'):\n    print('held', flush=True); time.sleep(120)")


def test_a_second_writer_is_refused_naming_the_holder_and_a_dead_holder_is_taken_over(tiny_runs, tmp_path):
    from common.lock import folder_lock

    out = copy_runs(tiny_runs, tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = contents(out)
        for argv in ((*TRAIN, "--nouns", "8", "--out", str(out)),
                     (*TRAIN, "--nouns", "8", "--out", str(out), "--resume"),
                     ("probes.circuit", "report", str(out), "--jobs", "1"),
                     ("probes.accuracy", str(out))):
            one_line(cli(*argv), f"is in use by process {holder.pid}")
        assert contents(out) == before
    finally:
        holder.kill()   # SIGKILL: the lock file stays behind, naming a dead process
        holder.wait()
    with folder_lock(out, "runs folder"):   # taken over at once
        assert f"process {os.getpid()}" in (out / ".toylens.lock").read_text()


# --- 3. a report is published as a whole -------------------------------------------------------------

def fake_report(monkeypatch, fail: bool):
    """measure and write stand-ins: a figure per run, then report.json and report.md (or a kill
    just after report.json, the moment the issue caught)."""
    import probes.report.document
    import probes.report.parts
    import toylens.report
    from common.io import atomic_write, write_json

    def measure(run, out, device=None):
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

    import probes.report.exports
    import probes.report.html

    monkeypatch.setattr(toylens.report, "measure_for_report", measure)
    monkeypatch.setattr(probes.report.document, "write_report", write)
    monkeypatch.setattr(probes.report.html, "write_html", page)
    monkeypatch.setattr(probes.report.exports, "write_report_mib", lambda measured, out, settings: [])
    monkeypatch.setattr(probes.report.parts, "render_parts", lambda measured, out, settings: {})


@pytest.mark.parametrize("fail", [True, False])
def test_a_report_is_published_whole_or_not_at_all(tiny_runs, tmp_path, monkeypatch, fail):
    from common.io import atomic_write, publish_folder, staging
    from toylens.report import report_command

    out = copy_runs(tiny_runs, tmp_path)
    with staging(out / "report") as staged:   # an earlier complete report, with a figure of its own
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
        assert files == {"report.json": b'{\n  "new": true\n}\n', "report.md": b"new report", "report.html": b"new page",
                         "figures/attn-only-2x1.png": b"new figure", "figures/bag-of-words.png": b"new figure"}
    assert [p.name for p in out.iterdir() if p.name.startswith(".report")] == []   # no staging left


# --- 4. the dataset cache is verified ----------------------------------------------------------------

def swap_answers(entry: Path) -> None:
    """Valid Arrow with different content: every heldout example's answer and foil swapped."""
    from datasets import load_from_disk

    data = load_from_disk(str(entry))
    split = data["heldout"].to_dict()
    for tokens, positions, foils in zip(split["tokens"], split["positions"], split["foils"]):
        tokens[positions[0] + 1], foils[0] = foils[0], tokens[positions[0] + 1]
    from datasets import Dataset

    replaced = Dataset.from_dict(split)
    temp = entry.parent / "swap"
    replaced.save_to_disk(str(temp))
    for name in os.listdir(temp):
        if name.endswith(".arrow"):
            target = next((entry / "heldout").glob("*.arrow"))
            shutil.copy(temp / name, target)


CACHE_DAMAGE = {
    "answers swapped": swap_answers,
    "arrow truncated": lambda e: next((e / "train").glob("*.arrow")).write_bytes(
        next((e / "train").glob("*.arrow")).read_bytes()[:300]),
    "junk dataset_dict.json": lambda e: (e / "dataset_dict.json").write_text("{junk"),
    "empty state.json": lambda e: (e / "train" / "state.json").write_text(""),
    "checksums deleted": lambda e: (e / "toylens-checksums.json").unlink(),
}


@pytest.mark.parametrize("damage", CACHE_DAMAGE)
def test_damaged_cached_data_is_rebuilt_with_one_line(tmp_path, monkeypatch, capsys, damage):
    from tasks.data import cache_root, task_dataset
    from tasks.winograd import WinogradParams, WinogradTask

    monkeypatch.setenv("TOYLENS_CACHE", str(tmp_path))
    task = WinogradTask(WinogradParams(nouns=4, heldout_fraction=0.3))
    fresh = {name: split.to_dict() for name, split in task_dataset(task, 0).items()}
    (entry,) = [p for p in cache_root().iterdir() if not p.name.startswith(".")]
    capsys.readouterr()
    CACHE_DAMAGE[damage](entry)
    again = {name: split.to_dict() for name, split in task_dataset(task, 0).items()}
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and "rebuilding it" in lines[0], lines
    assert again == fresh
    assert {name: s.to_dict() for name, s in task_dataset(task, 0).items()} == fresh   # and it stays so
    assert capsys.readouterr().err == ""


# --- 5. names that become paths ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../../../../escaped", "a/b", "", ".hidden", {"x": 1}, 3])
def test_a_model_name_that_would_escape_is_refused(tiny_runs, tmp_path, name):
    out = copy_runs(tiny_runs, tmp_path / "deep" / "er")
    edit_json(out / RUN / "config.json", lambda c: c.update(model_name=name), sign=True)
    one_line(cli("probes.circuit", "report", str(out), "--jobs", "1"), "model_name")
    assert not (out / "report").exists() and not list(tmp_path.rglob("*escaped*"))


# --- 6. exact types, and what defines a run is protected ---------------------------------------------

EDITS = {   # (edit, signed as a forger would, fragment of the one line)
    "leaky as a string": (lambda c: c["task"]["params"].update(leaky="false"), True, "leaky must be bool"),
    "seed 1.5": (lambda c: c.update(seed=1.5), True, "seed must be an integer"),
    "scale_scores 'no'": (lambda c: c["spec"].update(scale_scores="no"), True, "scale_scores must be true or false"),
    "n_layers true": (lambda c: c["spec"].update(n_layers=True), True, "n_layers must be an integer"),
    "another task variant": (lambda c: c["task"]["params"].update(leaky=True), False, "run_sha256 differs"),
    "another seed": (lambda c: c.update(seed=1), False, "run_sha256 differs"),
    "checksum deleted": (lambda c: c.pop("run_sha256"), False, "missing field 'run_sha256'"),
}


@pytest.mark.parametrize("edit", EDITS)
def test_an_edited_config_is_refused(tiny_runs, tmp_path, capsys, edit):
    from probes.accuracy import main

    change, sign, fragment = EDITS[edit]
    out = copy_runs(tiny_runs, tmp_path)
    edit_json(out / RUN / "config.json", change, sign)
    with pytest.raises(SystemExit) as stopped:
        main([str(out)])
    one_line((stopped.value.code, "", capsys.readouterr().err), fragment)


@pytest.mark.parametrize("dtype", ["int8", "bool"])
def test_weights_of_another_dtype_are_refused(tiny_runs, tmp_path, capsys, dtype):
    import torch
    from safetensors.torch import load_file, save_file

    from common.io import sha256_file
    from probes.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    weights = out / RUN / "model.safetensors"
    save_file({k: v.to(getattr(torch, dtype)) for k, v in load_file(str(weights)).items()}, str(weights))
    edit_json(out / RUN / "config.json", lambda c: c.update(weights_sha256=sha256_file(weights)))
    with pytest.raises(SystemExit) as stopped:
        main([str(out)])
    one_line((stopped.value.code, "", capsys.readouterr().err), f"is torch.{dtype}", "do not belong together")


# --- 7. an empty value never means "here" --------------------------------------------------------------

@pytest.mark.parametrize("argv, env, fragment", [
    (("--out", ""), {}, "empty path"),
    (("--models", ""), {}, "empty name"),
    (("--models", ","), {}, "empty name"),
    (("--models", "attn-only-2x1,"), {}, "empty name"),
    ((), {"TOYLENS_CACHE": ""}, "TOYLENS_CACHE is set but empty"),
])
def test_empty_values_are_refused(tmp_path, argv, env, fragment):
    train = [arg for arg in TRAIN if arg not in ("--models", "attn-only-2x1")]
    one_line(cli(*train, "--out", str(tmp_path / "runs"), *argv, cwd=tmp_path, env=env), fragment)
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["runs"])
    assert not list(tmp_path.rglob("summary.json")) and not list(tmp_path.rglob("config.json"))


@pytest.mark.parametrize("argv", [("probes.accuracy", ""), ("probes.circuit", "report", ""),
                                  ("probes.circuit", "report", "runs", "--out", "")])
def test_empty_folders_for_probes_are_refused(tmp_path, argv):
    one_line(cli(*argv, cwd=tmp_path), "empty path")
    assert list(tmp_path.iterdir()) == []
