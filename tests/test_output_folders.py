"""`toylens edges` and `toylens export mib|attribution` publish their folder all or nothing: a kill
while replacing an earlier output leaves that output whole (never a mix), and the rerun writes the
same files as an uninterrupted run; files a rerun no longer writes are gone; a full disk fails the
command in one line naming the folder, with nothing partial or temporary left; OUT may not be a
symbolic link (the census's and edges' rule)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.refusals import contents, in_process
from tests.refusals import one_line as refused_line

NO_GAP = "probes.settings.DEFAULT"


@pytest.fixture
def traced(monkeypatch):
    """A 150-step run barely tells its pairs apart: with min_gap 0 its edges are traced."""
    from probes.settings import ReportSettings

    monkeypatch.setattr(NO_GAP, ReportSettings(min_gap=0.0))


def one_line(result: tuple, *fragments: str) -> str:
    """refusals.one_line, past the progress bars (tqdm's lines, as a terminal shows them)."""
    import re

    code, out, err = result
    return refused_line(
        (code, out, "\n".join(line for line in err.splitlines() if not re.search(r"\d+%\|", line))), *fragments
    )


def temps(folder: Path) -> list[Path]:
    return [p for p in folder.rglob(".toylens-tmp*")]


# What differs between two uninterrupted runs of `edges` (wall-clock timings), and so is masked
# before comparing: the "(x.x s)" line of each run and the method table's seconds column; the
# manifests differ only by those files' checksums.
TIMINGS = (rb"\(\d+\.\d s\)", rb"(?m)^(\| [^|]+ \| )\d+\.\d+( \|)")


def without_timings(files: dict) -> dict:
    import re

    masked = {}
    for name, data in files.items():
        if not name.endswith(".toylens.json"):
            for pattern in TIMINGS:
                data = re.sub(pattern, lambda m: (m.group(1) + b"s" + m.group(2)) if m.lastindex else b"(s)", data)
            masked[name] = data
    return masked


KILLED = """
import os, signal, sys
from probes.settings import ReportSettings
import probes.settings, probes.report.outputs.exports as exports
probes.settings.DEFAULT = ReportSettings(min_gap=0.0)
real, count = exports.write_mib, [0]
def dying(*args, **kwargs):
    count[0] += 1
    if count[0] == 2:
        os.kill(os.getpid(), signal.SIGKILL)   # a kill at the second file's write point
    real(*args, **kwargs)
exports.write_mib = dying
from toylens.export import main
main(sys.argv[1:])
"""


@pytest.mark.isolated
def test_a_kill_while_replacing_an_export_leaves_the_old_one_and_the_rerun_the_same_files(tiny_runs, tmp_path, traced):
    from toylens.export import main

    main(["mib", str(tiny_runs), "--out", str(tmp_path / "exports")])
    before = contents(tmp_path / "exports")
    assert len([name for name in before if name.endswith(".json") and "toylens" not in name]) == 3
    done = subprocess.run(
        [sys.executable, "-c", KILLED, "mib", str(tiny_runs), "--out", str(tmp_path / "exports")],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == -9, done.stderr
    after_kill = {name: data for name, data in contents(tmp_path / "exports").items() if ".toylens-tmp" not in name}
    assert after_kill == before  # the old export, whole: the killed run's files are in its staging folder
    main(["mib", str(tiny_runs), "--out", str(tmp_path / "exports")])
    assert contents(tmp_path / "exports") == before and temps(tmp_path) == []


def test_an_interrupted_edges_run_changes_nothing_and_a_rerun_matches(tiny_runs, tmp_path, traced, monkeypatch):
    from probes.report.outputs import exports
    from toylens.edges import edges_command

    edges_command(tiny_runs, tmp_path / "edges")
    before = contents(tmp_path / "edges")
    assert "figures/edges-attn-only-2x1-seed0.png" in before
    real = exports.write_mib

    def interrupted(path, *args):
        if path.name.endswith("_eap.json"):
            raise KeyboardInterrupt  # Ctrl-C at a write point, after the figure and the oracle's file
        real(path, *args)

    monkeypatch.setattr(exports, "write_mib", interrupted)
    with pytest.raises(KeyboardInterrupt):
        edges_command(tiny_runs, tmp_path / "edges")
    assert contents(tmp_path / "edges") == before and temps(tmp_path) == []
    monkeypatch.setattr(exports, "write_mib", real)
    edges_command(tiny_runs, tmp_path / "edges")
    assert without_timings(contents(tmp_path / "edges")) == without_timings(before)


def test_files_a_rerun_no_longer_writes_are_removed(tiny_runs, tmp_path):
    from probes.settings import ReportSettings
    from toylens.edges import edges_command
    from toylens.export import export_command

    traced = ReportSettings(min_gap=0.0)  # a 150-step run barely tells its pairs apart
    edges_command(tiny_runs, tmp_path / "edges", traced)
    export_command("mib", tiny_runs, tmp_path / "exports", 1, traced)
    assert list((tmp_path / "edges").glob("mib_*.json")) and list((tmp_path / "exports" / "mib").glob("*.json"))
    weak = ReportSettings(min_gap=1e9)  # as a retrained run too weak to trace
    edges_command(tiny_runs, tmp_path / "edges", weak)
    export_command("mib", tiny_runs, tmp_path / "exports", 1, weak)
    assert sorted(contents(tmp_path / "edges")) == [".toylens.json", "edges.md"]
    assert sorted(contents(tmp_path / "exports" / "mib")) == [".toylens.json"]


def full_disk(monkeypatch, folder: Path):
    """Every write of a file under `folder` fails as a full file system does."""
    real = Path.write_text

    def write_text(self, *args, **kwargs):
        if str(Path(os.path.abspath(self))).startswith(str(folder)):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)


@pytest.mark.parametrize("kind", ["mib", "attribution"])
def test_a_full_disk_fails_the_export_in_one_line_and_leaves_nothing(
    tiny_runs, tmp_path, traced, monkeypatch, capsys, kind
):
    from toylens.export import main

    full_disk(monkeypatch, tmp_path)
    result = in_process(main, [kind, str(tiny_runs), "--out", str(tmp_path / "exports"), "--pairs", "1"], capsys)
    line = one_line(result, f"could not write {tmp_path / 'exports' / kind}", "No space left on device", "free there")
    assert ".toylens-tmp" not in line
    assert not (tmp_path / "exports" / kind).exists() and temps(tmp_path) == []


def test_a_full_disk_fails_edges_and_the_report_in_one_line(tiny_runs, tmp_path, traced, monkeypatch, capsys):
    from toylens.edges import main
    from toylens.report import main as circuit_main

    full_disk(monkeypatch, tmp_path)
    one_line(
        in_process(main, [str(tiny_runs), "--out", str(tmp_path / "edges")], capsys),
        f"could not write {tmp_path / 'edges'}",
        "No space left",
    )
    one_line(
        in_process(circuit_main, ["report", str(tiny_runs), "--out", str(tmp_path / "report")], capsys),
        f"could not write {tmp_path / 'report'}",
        "No space left",
    )
    # Nothing but the lock the report holds on its parent folder while it swaps (toylens's own).
    assert {p.name for p in tmp_path.iterdir()} <= {".toylens.lock"} and temps(tmp_path) == []


def test_an_export_through_a_link_is_refused_in_one_line(tiny_runs, tmp_path, capsys):
    from toylens.export import main

    users = tmp_path / "users-folder"
    users.mkdir()
    (tmp_path / "link").symlink_to(users)
    for kind in ("mib", "attribution"):
        one_line(
            in_process(main, [kind, str(tiny_runs), "--out", str(tmp_path / "link")], capsys),
            "is a symbolic link",
            "does not write through links",
        )
    assert list(users.iterdir()) == []


REPORT_KILLED = """
import os, signal, sys
import common.atomic as atomic
real = atomic.atomic_write
def dying(path, *args, **kwargs):
    if os.path.basename(path) == sys.argv[1]:
        os.kill(os.getpid(), signal.SIGKILL)   # the report's figures, report.md and report.json written
    real(path, *args, **kwargs)
atomic.atomic_write = dying
from toylens.report import main
main(sys.argv[2:])
"""
# Wall-clock timings, the one thing two uninterrupted reports differ in (report.json's and the
# page data's *_seconds, report.md's "(x.x s)"); the manifest differs only by those files' checksums.
REPORT_TIMINGS = (rb'seconds"?: ?[-+0-9.e]+', rb"\(\d+\.\d s\)")


def report_files(files: dict) -> dict:
    import re

    masked = {}
    for name, data in files.items():
        if not name.endswith(".toylens.json"):
            for pattern in REPORT_TIMINGS:
                data = re.sub(pattern, b"<time>", data)
            masked[name] = data
    return masked


@pytest.mark.isolated
def test_a_report_killed_while_replacing_an_earlier_one_leaves_it_and_the_rerun_matches(tiny_runs, tmp_path):
    from toylens.report import report_command

    out = tmp_path / "report"
    report_command(tiny_runs, out)
    before = contents(out)
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            REPORT_KILLED,
            "report.html",
            "report",
            str(tiny_runs),
            "--out",
            str(out),
            "--jobs",
            "1",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == -9, done.stderr
    assert contents(out) == before  # the earlier report, whole, not a mix with the killed one's files
    report_command(tiny_runs, out)
    assert report_files(contents(out)) == report_files(before) and temps(tmp_path) == []


@pytest.mark.parametrize("command", ["edges", "mib"])
def test_a_users_file_in_an_output_folder_is_kept_and_the_rerun_refused_in_one_line(
    tiny_runs, tmp_path, traced, capsys, command
):
    from toylens.edges import main as edges_main
    from toylens.export import main as export_main

    main, argv, folder = (
        (edges_main, [str(tiny_runs), "--out", str(tmp_path / "edges")], tmp_path / "edges")
        if command == "edges"
        else (export_main, ["mib", str(tiny_runs), "--out", str(tmp_path / "exports")], tmp_path / "exports" / "mib")
    )
    main(argv)  # the earlier output
    (folder / "notes.md").write_text("mine\n")
    before = contents(folder)
    one_line(in_process(main, argv, capsys), f"{folder / 'notes.md'}", "not written by toylens")
    assert contents(folder) == before and temps(tmp_path) == []
