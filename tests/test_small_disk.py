"""A write the file system refuses fails the report and both exports in one line (exit 2) naming the
output folder and the free space it needs, with no partial or temp file left and an earlier output
in that folder intact: on real small tmpfs file systems (1 MB, 24 kB, 4 kB; as root, where `mount`
works) and on a full disk, an exceeded quota and a read-only file system simulated at the write
every file goes through (common.atomic.record, just before the rename)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.refusals import contents, finished
from tests.test_kill_points import gap
from tests.test_output_folders import one_line, temps


@pytest.fixture(scope="module")
def runs(tiny_runs, tmp_path_factory) -> dict[str, Path]:
    """Each tiny run in a runs folder of its own: the report of the bag of words (fast), the
    exports of the attention model."""
    base = tmp_path_factory.mktemp("small-disk-runs")
    for model in ("bag-of-words", "attn-only-2x1"):
        shutil.copytree(tiny_runs / model, base / model / "winograd" / model)
    return {model: base / model / "winograd" for model in ("bag-of-words", "attn-only-2x1")}


def command(kind: str, runs: dict, out: Path):
    """(the command's main, its argv, the folder it publishes)."""
    from toylens.export import main as export_main
    from toylens.report import main as report_main

    if kind == "report":
        return (
            report_main,
            ["report", str(runs["bag-of-words"]), "--out", str(out / "report"), "--jobs", "1"],
            out / "report",
        )
    argv = [kind, str(runs["attn-only-2x1"]), "--out", str(out / "exports"), "--pairs", "1"]
    return export_main, argv, out / "exports" / kind


KINDS = ("report", "mib", "attribution")
OWN = (".toylens.lock",)  # the lock the report takes on its folder's parent: toylens's own


def users_view(folder: Path) -> dict:
    return {name: data for name, data in contents(folder).items() if Path(name).name not in OWN}


@pytest.fixture
def small_disk(tmp_path, request):
    """A tmpfs of `request.param` bytes mounted at tmp_path/disk for the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (the simulated cases cover the rest)")
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={request.param}", "tmpfs", str(disk)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    yield disk
    subprocess.run(["umount", "-l", str(disk)], check=True)


def fill(disk: Path) -> None:
    """A user's file taking every byte left."""
    handle = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(handle, b"x" * 512):
            pass
    except OSError as error:
        assert error.errno == errno.ENOSPC
    finally:
        os.close(handle)


@pytest.mark.parametrize("small_disk", ["1m", "24k", "4k"], indirect=True)
@pytest.mark.parametrize("kind", KINDS)
def test_on_a_small_tmpfs_a_command_fits_or_fails_in_one_line_leaving_the_earlier_output(
    runs, small_disk, kind, monkeypatch, capsys, request
):
    # The commands run as users run them (their mains), so the tiny attention run's edges are traced
    # under the module's default settings.
    monkeypatch.setattr("probes.settings.DEFAULT", gap(0.0))
    main, argv, out = command(kind, runs, small_disk)
    first = finished(main, argv, capsys)
    size = request.node.callspec.params["small_disk"]
    assert (first[0] == 0) == (size != "4k") or size == "24k", first  # what fits in 1 MB never does in 4 kB
    if first[0] == 0:  # it fitted: a user's file takes the rest, and the rerun cannot fit beside it
        earlier = users_view(small_disk)
        fill(small_disk)
        filler = (small_disk / "filler").read_bytes()
        refused = finished(main, argv, capsys)
    else:
        earlier, filler, refused = {}, None, first
    line = one_line(refused, f"could not write {out}", "No space left on device", "free there", "and rerun")
    assert ".toylens-tmp" not in line
    assert temps(small_disk) == []
    left = users_view(small_disk)
    if filler is not None:
        assert left.pop("filler") == filler
    assert left == earlier  # the earlier output whole, or (none before) nothing at all
    if not earlier:  # not even the folders it would have made
        assert set(os.listdir(small_disk)) <= set(OWN), os.listdir(small_disk)


@pytest.mark.parametrize("small_disk", ["1m"], indirect=True)
@pytest.mark.parametrize("kind", KINDS)
def test_on_a_read_only_file_system_a_command_fails_in_one_line_leaving_the_earlier_output(
    runs, small_disk, kind, monkeypatch, capsys
):
    monkeypatch.setattr("probes.settings.DEFAULT", gap(0.0))
    main, argv, out = command(kind, runs, small_disk)
    assert finished(main, argv, capsys)[0] == 0
    earlier = contents(small_disk)
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    line = one_line(finished(main, argv, capsys), "could not write", "Read-only file system", "make it writable")
    assert str(small_disk) in line and ".toylens-tmp" not in line
    assert contents(small_disk) == earlier


@pytest.mark.parametrize(
    "code, fragment",
    [
        (errno.ENOSPC, "bytes free there: free some"),
        (errno.EDQUOT, "bytes free there: free some"),
        (errno.EROFS, "make it writable"),
    ],
)
@pytest.mark.parametrize("kind", KINDS)
def test_a_refused_write_fails_in_one_line_and_leaves_the_earlier_output(
    runs, tmp_path, kind, code, fragment, monkeypatch, capsys
):
    import common.atomic

    monkeypatch.setattr("probes.settings.DEFAULT", gap(0.0))
    main, argv, out = command(kind, runs, tmp_path / "area")
    assert finished(main, argv, capsys)[0] == 0
    earlier = users_view(tmp_path / "area")
    real = common.atomic.record

    def refused(path, *args, **kwargs):  # the file is written: the file system refuses its manifest entry
        if str(path).startswith(str(tmp_path)):
            raise OSError(code, os.strerror(code), str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(common.atomic, "record", refused)
    line = one_line(finished(main, argv, capsys), f"could not write {out}:", os.strerror(code), fragment)
    assert ".toylens-tmp" not in line
    assert users_view(tmp_path / "area") == earlier and temps(tmp_path) == []
