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

RUN = Path("attn-only-2x1") / "seed0"
CHECKPOINT_EVERY = 15
TIMING = ("seconds", "train_seconds", "sha256")   # wall-clock fields (and metrics' checksum over them)


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
            os._exit(code)   # reached only when the kill point never came
    _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, \
        f"the child was not killed at {point} of {name} #{nth} (status {status})"


def leftovers(folder: Path) -> list[str]:
    """Temp files and folders anywhere under `folder`: toylens's and any a writer under it made."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.name.startswith((".toylens-tmp.", ".tmp")) or p.name.endswith(".tmp"))


def without_timing(entry: dict) -> dict:
    return {key: value for key, value in entry.items() if key not in TIMING}


def outcome(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return {"weights": load_file(str(run_dir / "model.safetensors")),
            "snapshots": {p.name: load_file(str(p)) for p in sorted((run_dir / "snapshots").glob("*.safetensors"))},
            "metrics": without_timing(json.loads((run_dir / "metrics.json").read_text())),
            "log": [without_timing(json.loads(line)) for line in (run_dir / "log.jsonl").read_text().splitlines()]}


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
def test_a_sigkill_at_each_write_point_resumes_bitwise_with_no_manual_step(tmp_path, small_winograd, straight,
                                                                          kill):
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
    assert len(list(cache_root().iterdir())) == 1   # the entry alone: the killed one's temp is gone
