"""A SIGKILL at any write point (train state, weights, snapshots, metrics, a manifest, report
staging) leaves only toylens's own temps, which the next run deletes, and --resume then ends with
bitwise what an uninterrupted run ends with: no manual step.

Each kill is real: a forked child process (torch already imported, so no start-up to wait for)
SIGKILLs itself at the chosen moment of the chosen write."""

from __future__ import annotations

import json
import os
import signal
import tempfile
from pathlib import Path

import pytest
import torch

from tests.conftest import TINY_SPECS

# Every test here sends signals or kills processes: each runs in a forked child (tests/isolation.py).
pytestmark = pytest.mark.isolated

RUN = Path("attn-only-2x1") / "seed0"
CHECKPOINT_EVERY = 15
TIMING = ("seconds", "train_seconds", "sha256")  # wall-clock fields (and metrics' checksum over them)


def plans(out: Path, task) -> list:
    from tasks.settings import TrainSettings
    from toylens.family import RunPlan

    settings = TrainSettings(max_steps=90, batch_size=16, eval_every=10, snapshot_every=20)
    return [RunPlan(task, "attn-only-2x1", TINY_SPECS["attn-only-2x1"], 0, settings, out / RUN)]


def train(out: Path, task, resume: bool = False) -> None:
    from toylens.family import train_family

    train_family(plans(out, task), progress=False, resume=resume, checkpoint_every=CHECKPOINT_EVERY)


def arm(point: str, name: str, nth: int) -> None:
    """Make this process SIGKILL itself at the `nth` write of a file called `name`: "rename" just
    before the finished temp is renamed into place, "safetensors" while safetensors writes (it
    writes a `.tmpXXXXXX` of its own beside the path it was given, then renames that: a kill
    there left `.tmpXXXXXX` in the run folder), "write" half way through writing a text file."""
    seen = []

    def hit(path) -> bool:
        seen.append(name in Path(path).name)
        return sum(seen) == nth and seen[-1]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    if point == "rename":
        real_replace = os.replace

        def replace(source, target, *args, **kwargs):
            if hit(target):
                die()
            return real_replace(source, target, *args, **kwargs)

        os.replace = replace
    elif point == "safetensors":
        import safetensors.torch

        real_save = safetensors.torch.save_file

        def save_file(tensors, filename, metadata=None):
            if hit(filename):
                handle, _ = tempfile.mkstemp(dir=Path(filename).parent, prefix=".tmp")
                os.write(handle, b"half of a safetensors file")
                die()
            return real_save(tensors, filename, metadata=metadata)

        safetensors.torch.save_file = save_file
    else:
        real_write = Path.write_text

        def write_text(self, data, *args, **kwargs):
            if hit(self):
                real_write(self, data[: len(data) // 2])
                die()
            return real_write(self, data, *args, **kwargs)

        Path.write_text = write_text


def killed_at(point: str, name: str, nth: int, body) -> None:
    """Run `body()` in a forked child that SIGKILLs itself at that write; fail if it never got there."""
    child = os.fork()
    if child == 0:
        code = 1
        try:
            arm(point, name, nth)
            body()
            code = 0
        finally:
            os._exit(code)  # reached only when the kill point never came
    _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, (
        f"the child was not killed at {point} of {name} #{nth} (status {status})"
    )


def leftovers(folder: Path) -> list[str]:
    """Temp files and folders anywhere under `folder`: toylens's and any a writer under it made."""
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*")
        if p.name.startswith((".toylens-tmp.", ".tmp")) or p.name.endswith(".tmp")
    )


def without_timing(entry: dict) -> dict:
    return {key: value for key, value in entry.items() if key not in TIMING}


def outcome(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return {
        "weights": load_file(str(run_dir / "model.safetensors")),
        "snapshots": {p.name: load_file(str(p)) for p in sorted((run_dir / "snapshots").glob("*.safetensors"))},
        "metrics": without_timing(json.loads((run_dir / "metrics.json").read_text())),
        "log": [without_timing(json.loads(line)) for line in (run_dir / "log.jsonl").read_text().splitlines()],
    }


def assert_same(a: dict, b: dict) -> None:
    for kind in ("weights", *a["snapshots"]):
        left, right = (a[kind], b[kind]) if kind == "weights" else (a["snapshots"][kind], b["snapshots"][kind])
        assert left.keys() == right.keys() and all(torch.equal(left[k], right[k]) for k in left), kind
    assert a["snapshots"].keys() == b["snapshots"].keys()
    assert a["metrics"] == b["metrics"] and a["log"] == b["log"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory, small_winograd) -> dict:
    out = tmp_path_factory.mktemp("straight") / "winograd"
    train(out, small_winograd)
    return outcome(out / RUN)


# (point, file name, which write of it, the folder its temp is left in)
KILLS = {
    "train state, in safetensors' own temp": ("safetensors", "train_state.safetensors", 2, RUN),
    "train state, before the rename": ("rename", "train_state.safetensors", 2, RUN),
    "weights, in safetensors' own temp": ("safetensors", "model.safetensors", 1, RUN),
    "weights, before the rename": ("rename", "model.safetensors", 1, RUN),
    "snapshot, in safetensors' own temp": ("safetensors", "step40.safetensors", 1, RUN / "snapshots"),
    "snapshot, before the rename": ("rename", "step40.safetensors", 1, RUN / "snapshots"),
    "metrics, half written": ("write", "metrics.json", 1, RUN),
    "a manifest, before the rename": ("rename", ".toylens.json", 4, RUN),
}


@pytest.mark.parametrize("kill", KILLS)
def test_a_sigkill_at_each_write_point_resumes_bitwise_with_no_manual_step(tmp_path, small_winograd, straight, kill):
    point, name, nth, where = KILLS[kill]
    out = tmp_path / "winograd"
    killed_at(point, name, nth, lambda: train(out, small_winograd))
    left = leftovers(out / where)
    assert left and all(any(part.startswith(".toylens-tmp.") for part in Path(p).parts) for p in left), left
    assert not (out / RUN / "metrics.json").exists()
    train(out, small_winograd, resume=True)
    assert leftovers(out) == []
    assert_same(outcome(out / RUN), straight)


def test_a_sigkill_while_a_report_is_staged_leaves_nothing_after_the_next_report(tiny_runs, tmp_path, monkeypatch):
    from tests.refusals import contents, copy_runs
    from tests.test_users_files import fake_report
    from toylens.report import report_command

    out = copy_runs(tiny_runs, tmp_path)
    fake_report(monkeypatch, fail=False)
    killed_at("rename", "report.md", 1, lambda: report_command(out, None, jobs=1))
    assert [p.name for p in out.iterdir() if p.name.startswith(".toylens-tmp.")], "no staging folder was left"
    assert not (out / "report").exists()
    report_command(out, None, jobs=1)
    assert leftovers(out) == []
    assert contents(out / "report")["report.md"] == b"new report"


def test_a_sigkill_while_data_is_cached_leaves_nothing_after_the_next_run(tmp_path, monkeypatch, small_winograd):
    from tasks.data import cache_root, task_dataset

    monkeypatch.setenv("TOYLENS_CACHE", str(tmp_path / "cache"))
    killed_at("rename", "winograd-", 1, lambda: task_dataset(small_winograd, 0))
    assert list(cache_root().iterdir()), "the kill left no half-written entry"
    task_dataset(small_winograd, 0)
    assert leftovers(cache_root()) == []
    assert len(list(cache_root().iterdir())) == 1  # the entry alone: the killed one's temp is gone


# ---- every write point of `toylens edges`, `toylens export` and the report ---------------------


def disk_at_every_write(area: Path, body, into: Path) -> int:
    """Run `body()` in a forked child that copies `area` to `into`/<k> just before each rename and
    each deletion it makes, the k-th write point: the folder exactly as a SIGKILL there leaves it
    (every temp is closed when it is renamed, and the child, whose pid the temps carry, is gone
    before anything reads the copies). How many write points there were."""
    import shutil

    child = os.fork()
    if child == 0:
        code = 1
        try:
            real_replace, real_unlink, count = os.replace, os.unlink, [0]

            def snapshot():
                count[0] += 1
                shutil.copytree(area, into / f"{count[0]:03d}", symlinks=True)

            def replace(source, target, *args, **kwargs):
                snapshot()
                return real_replace(source, target, *args, **kwargs)

            def unlink(path, *args, **kwargs):
                snapshot()
                return real_unlink(path, *args, **kwargs)

            os.replace, os.unlink = replace, unlink
            body()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the uninterrupted run failed (status {status})"
    return len(list(into.iterdir()))


def left_by_kill(area: Path) -> tuple[str, ...]:
    """The temps a kill left under `area`, their pids and random suffixes dropped: which kind of
    leftover state a rerun starts from."""
    import re

    return tuple(
        sorted(
            {
                re.sub(r"^\.toylens-tmp\.\d+\.(.*?)(\.new)?(\.[a-z0-9_]{8})?$", r"\1\2", Path(p).name)
                for p in leftovers(area)
                if "/" not in p or not p.split("/")[0].startswith(".toylens-tmp.")
            }
        )
    )


def assert_every_kill_recovers(area: Path, out: Path, old: dict, body, rerun, same) -> None:
    """At each write point of `body()` (which replaces `old`, the earlier output in `out`): `out`
    is the old output whole, the new one whole, or (between publishing's two renames) absent, never
    a mix; from each kind of state a kill leaves, `rerun()` writes what the uninterrupted run wrote
    (compared through `same`) and leaves no temp."""
    import shutil

    from tests.refusals import contents

    points = area.parent / "points"
    points.mkdir()
    n = disk_at_every_write(area, body, points)
    new = contents(out)
    assert n >= 4 and new != old
    kinds = {}
    for snapshot in sorted(points.iterdir()):
        found = snapshot / out.relative_to(area)
        state = (
            "absent"
            if not found.exists()
            else next((name for name, files in (("old", old), ("new", new)) if contents(found) == files), None)
        )
        assert state is not None, f"write point {snapshot.name}: {out.name} mixes the old and the new output"
        assert {p.name for p in snapshot.iterdir()} <= {out.relative_to(area).parts[0], ".toylens.lock"} | {
            p.name for p in snapshot.iterdir() if p.name.startswith(".toylens-tmp.")
        }
        kinds.setdefault((state, left_by_kill(snapshot)), snapshot)
    assert {state for state, _ in kinds} >= {"old", "absent"}, kinds  # the staging and the swap were both hit
    for snapshot in kinds.values():
        shutil.rmtree(area)
        shutil.copytree(snapshot, area, symlinks=True)
        rerun()
        assert same(contents(out)) == same(new), snapshot.name
        assert leftovers(area) == [], snapshot.name


@pytest.fixture
def one_run(tiny_runs, tmp_path) -> Path:
    """The tiny runs' attention model alone (its edges are traced with min_gap 0)."""
    import shutil

    runs = tmp_path / "runs" / "winograd"
    shutil.copytree(tiny_runs / "attn-only-2x1", runs / "attn-only-2x1")
    return runs


def gap(min_gap: float):
    from probes.settings import ReportSettings

    return ReportSettings(min_gap=min_gap)


def test_a_kill_at_any_write_of_edges_leaves_no_mix_and_the_rerun_matches(one_run, tmp_path):
    from tests.refusals import contents
    from tests.test_output_folders import without_timings
    from toylens.edges import edges_command

    area = tmp_path / "area"
    edges_command(one_run, area / "edges", gap(1e9))  # the earlier output: the run not traced (edges.md alone)
    old = contents(area / "edges")
    run = lambda: edges_command(one_run, area / "edges", gap(0.0))  # noqa: E731
    assert_every_kill_recovers(area, area / "edges", old, run, run, without_timings)


@pytest.mark.parametrize("kind", ["mib", "attribution"])
def test_a_kill_at_any_write_of_an_export_leaves_no_mix_and_the_rerun_matches(one_run, tmp_path, kind):
    from tests.refusals import contents
    from toylens.export import export_command

    area = tmp_path / "area"
    # The earlier output: the run not traced (no mib files), or two attribution pairs (not one).
    export_command(kind, one_run, area / "exports", 2, gap(1e9 if kind == "mib" else 0.0))
    old = contents(area / "exports" / kind)
    run = lambda: export_command(kind, one_run, area / "exports", 1, gap(0.0))  # noqa: E731
    assert_every_kill_recovers(area, area / "exports" / kind, old, run, run, lambda files: files)


def test_a_kill_at_any_write_of_the_report_leaves_no_mix_and_the_rerun_matches(tiny_runs, one_run, tmp_path):
    from tests.refusals import contents, copy_runs
    from tests.test_output_folders import report_files
    from toylens.report import report_command

    area = tmp_path / "area"
    report_command(copy_runs(tiny_runs, tmp_path), area / "report")  # the earlier report: two runs
    old = contents(area / "report")
    run = lambda: report_command(one_run, area / "report")  # noqa: E731
    assert_every_kill_recovers(area, area / "report", old, run, run, report_files)
