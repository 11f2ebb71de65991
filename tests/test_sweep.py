"""Sweeps: grid and seed parsing, a tiny sweep on the local pool (layout, census, reruns, --resume,
a worker killed mid-run retried, a run that keeps killing its worker recorded as failed), and the
same on a real two-node Ray cluster on this machine (retry of a killed worker, a job that fails
twice, results written through the driver equal to a local run bitwise, --gpus-per-run)."""

from __future__ import annotations

import json
import os
import signal
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest

from common.cli import UsageError
from models.spec import Attention, Norm
from tasks.winograd import WinogradTask
from toylens.sweeps.executors import LocalExecutor, Outcome, RayExecutor
from tasks.training.sweeps import FAILED
from toylens.sweeps.plan import parse_grid, plan_sweep
from toylens.arguments import parse_seeds
from toylens.sweeps.driver import SweepJob, run_job, run_sweep

TINY = {"max_steps": 20, "eval_every": 10, "batch_size": 32}
PARAMS = {"nouns": 8, "heldout_fraction": 0.5, "validation_fraction": 0.1, "leaky": False}


def tiny_sweep(out: Path, grid=("d_model=16,32",), seeds="0-0"):
    return plan_sweep(
        WinogradTask, PARAMS, TINY, ["attn-only-2x1"], parse_seeds(seeds), parse_grid(list(grid), WinogradTask), out
    )


def killed_in_training(deaths: dict, markers: str, function, job: SweepJob):
    """`function(job)` (a real sweep run) in a worker process that is SIGKILLed once training
    starts (a node lost, an OOM kill mid-run) on the first `deaths[point]` attempts at the run's
    grid point. Attempts are counted in a marker file per point, which outlives the process."""
    attempts = Path(markers) / job.plan.run_dir.parts[-3]
    attempts.write_text((attempts.read_text() if attempts.exists() else "") + "x")
    if len(attempts.read_text()) <= deaths.get(attempts.name, 0):
        import tasks.training.loop

        tasks.training.loop.train = lambda *args, **kwargs: os.kill(os.getpid(), signal.SIGKILL)
    return function(job)


@dataclass
class Killing:
    """`executor`, its sweep runs killed as `killed_in_training` says."""

    executor: object
    deaths: dict
    markers: str
    name: str = "killing"

    def run(self, function, items, on_outcome, cost=None):
        self.executor.run(partial(killed_in_training, self.deaths, self.markers, function), items, on_outcome, cost)


def sweep(out: Path, executor, **options):
    return run_sweep(
        tiny_sweep(out),
        out,
        executor,
        "python -m tasks.winograd sweep (test)",
        progress=False,
        write=lambda line: None,
        **options,
    )


# ---- parsing -------------------------------------------------------------------------------


def test_seeds_ranges_and_lists():
    assert parse_seeds("0-3") == [0, 1, 2, 3]
    assert parse_seeds("5,1,1-2") == [1, 2, 5]
    assert parse_seeds("7-7") == [7]


@pytest.mark.parametrize("text", ["3-1", "a", "-2", "1-b", "", "7"])
def test_bad_seeds(text):
    with pytest.raises(UsageError, match="--seeds"):
        parse_seeds(text)


def test_grid_values_get_their_fields_types():
    grid = parse_grid(
        ["d_model=64,128", "lr=1e-3,3e-3", "mlp=false", "norm=none,LN", "nouns=8", "residual=false"], WinogradTask
    )
    assert dict(grid.axes) == {
        "d_model": (64, 128),
        "lr": (0.001, 0.003),
        "mlp": (False,),
        "norm": (None, "LN"),
        "nouns": (8,),
        "residual": (False,),
    }
    assert len(grid.points()) == 2 * 2 * 2
    assert dict(grid.axes)["norm"][1] is Norm.LN
    assert dict(parse_grid(["attention=uniform,none"], WinogradTask).axes)["attention"] == (
        Attention.UNIFORM,
        Attention.NONE,
    )
    assert parse_grid([], WinogradTask).points() == [{}]


@pytest.mark.parametrize(
    "item, fragment",
    [
        ("width=64", "unknown key 'width'"),
        ("d_model=sixty", "'sixty' is not a int"),
        ("lr=fast", "'fast' is not a float"),
        ("mlp=maybe", "is not a bool"),
        ("attention=sparse", "choose one of softmax, uniform"),
        ("d_model", "write KEY=V1,V2"),
        ("d_model=", "write KEY=V1,V2"),
    ],
)
def test_bad_grid(item, fragment):
    with pytest.raises(UsageError, match=fragment.replace("(", r"\(")):
        parse_grid([item], WinogradTask)


@pytest.mark.parametrize(
    "grid, fragment",
    [
        (["d_model=30"], "does not divide d_model=30"),  # attn-only-2x1 has 1 head: fine; block-1 has 4
        (["lr=2"], "lr must lie in"),
        (["nouns=1"], "nouns"),
    ],
)
def test_bad_points_are_refused_before_anything_runs(tmp_path, grid, fragment):
    with pytest.raises(UsageError, match=fragment):
        plan_sweep(WinogradTask, PARAMS, TINY, ["block-1"], [0], parse_grid(grid, WinogradTask), tmp_path)


def test_a_grid_value_cannot_name_a_folder_outside_the_sweep():
    from toylens.sweeps.plan import point_id

    assert point_id({"d_model": 64, "lr": 0.001}) == "d_model=64_lr=0.001"
    with pytest.raises(UsageError, match="names a folder"):
        point_id({"tag": "../../etc"})


def test_bad_grid_on_the_command_line_is_one_line(capsys):
    from toylens.cli import main_for_task

    with pytest.raises(SystemExit) as stopped:
        main_for_task("winograd", ["sweep", "--grid", "width=64"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1 and "unknown key 'width'" in err


def test_ray_stays_optional(monkeypatch):
    import subprocess

    code = "import sys, toylens.cli, toylens.family, toylens.sweeps.plan, toylens.sweeps.executors; print('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
    monkeypatch.setitem(sys.modules, "ray", None)  # as if Ray were not installed
    with pytest.raises(UsageError, match=r"pip install -e '.\[ray\]'"):
        RayExecutor().run(len, [], print)


# ---- a tiny sweep on the local pool --------------------------------------------------------


@pytest.fixture(scope="module")
def local_sweep(tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "sweep"
    return out, sweep(out, LocalExecutor(jobs=1))


def test_local_sweep_writes_each_point_and_the_census(local_sweep):
    from probes.census import take_census
    from toylens.census import census_command

    out, outcome = local_sweep
    assert (outcome.done, outcome.failed, outcome.kept) == (2, 0, 0)
    for width in (16, 32):
        run = out / f"d_model={width}" / "attn-only-2x1" / "seed0"
        assert json.loads((out / f"d_model={width}" / "point.json").read_text())["values"] == {"d_model": width}
        assert json.loads((run / "config.json").read_text())["spec"]["d_model"] == width
        assert {"config.json", "model.safetensors", "metrics.json", "log.jsonl", "circuit.json"} <= {
            p.name for p in run.iterdir()
        }
    census_command(out)
    groups = take_census(out).groups
    assert [(g.point, g.finished) for g in groups] == [("d_model=16", 1), ("d_model=32", 1)]
    assert all(sum(s.count for s in g.circuits) == g.finished for g in groups)
    assert (out / "census" / "census.png").stat().st_size > 0


def test_rerun_keeps_finished_runs(local_sweep):
    out, _ = local_sweep
    before = (out / "d_model=16" / "attn-only-2x1" / "seed0" / "metrics.json").stat().st_mtime_ns
    again = sweep(out, LocalExecutor(jobs=1))
    assert (again.kept, again.done) == (2, 0)
    assert (out / "d_model=16" / "attn-only-2x1" / "seed0" / "metrics.json").stat().st_mtime_ns == before


def test_interrupted_write_needs_resume_and_resume_redoes_only_it(local_sweep):
    out, _ = local_sweep
    run = out / "d_model=32" / "attn-only-2x1" / "seed0"
    weights = (run / "model.safetensors").read_bytes()
    (run / "metrics.json").unlink()  # as a driver killed between its writes leaves it
    with pytest.raises(UsageError, match="unfinished run; pass --resume"):
        sweep(out, LocalExecutor(jobs=1))
    resumed = sweep(out, LocalExecutor(jobs=1), resume=True)
    assert (resumed.kept, resumed.done) == (1, 1)
    assert (run / "model.safetensors").read_bytes() == weights and (run / "metrics.json").is_file()


SWEEP_ARGS = [
    "sweep",
    "--models",
    "attn-only-2x1",
    "--seeds",
    "0-0",
    "--grid",
    "d_model=16,32",
    "--steps",
    "20",
    "--eval-every",
    "10",
    "--batch-size",
    "32",
    "--nouns",
    "8",
    "--no-progress",
]


@pytest.mark.isolated
def test_local_pool_retries_a_killed_worker_and_records_a_run_that_keeps_killing_it(
    local_sweep, tmp_path, monkeypatch, capsys
):
    """Both runs at once, in two workers: d_model=16's worker is killed once, d_model=32's on every
    attempt. The first is run again whole (bitwise the clean run's weights), untouched by the second's
    deaths; the second is recorded as failed with how its worker ended, and the sweep finishes. The
    killed workers' temp folders, which they could not remove, are gone at the end."""
    import tempfile

    import toylens.sweeps.executors
    from toylens.cli import main_for_task

    local, _ = local_sweep
    out, markers, scratch = tmp_path / "sweep", tmp_path / "markers", tmp_path / "tmp"
    markers.mkdir()
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # the workers' (their fork server starts with this sweep)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # this process's, which tempfile caches
    make = toylens.sweeps.executors.make_executor
    monkeypatch.setattr(
        toylens.sweeps.executors,
        "make_executor",
        lambda *args: Killing(make(*args), {"d_model=16": 1, "d_model=32": 2}, str(markers)),
    )
    main_for_task("winograd", [*SWEEP_ARGS, "--jobs", "2", "--out", str(out)])  # exits 0: no SystemExit
    printed = capsys.readouterr().out
    assert {p.name: p.read_text() for p in markers.iterdir()} == {"d_model=16": "xx", "d_model=32": "xx"}
    retried, lost = (out / f"d_model={width}" / "attn-only-2x1" / "seed0" for width in (16, 32))
    clean = local / "d_model=16" / "attn-only-2x1" / "seed0" / "model.safetensors"
    assert (retried / "model.safetensors").read_bytes() == clean.read_bytes() and not (retried / FAILED).exists()
    error = json.loads((lost / FAILED).read_text())["error"]
    assert error == "WorkerDied: the worker process running it died (killed by signal 9: Killed)"
    assert not (lost / "metrics.json").exists()
    assert f"{lost}: failed twice ({error}); recorded in {FAILED}\n" in printed
    assert "sweep: 1 runs done, 1 failed, 0 kept" in printed
    assert sorted(scratch.glob("toylens-*")) == [], "a killed worker's temp folder was left"


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["--gpus-per-run", "1"], "reserves GPUs for Ray tasks: add --executor ray"),
        (["--gpus-per-run", "1.5", "--executor", "ray"], "above 1 it must be a whole number"),
        (["--gpus-per-run", "-1", "--executor", "ray"], "--gpus-per-run: -1 is out of range"),
    ],
)
def test_bad_gpus_per_run_is_one_line_before_anything_runs(tmp_path, capsys, argv, fragment):
    from toylens.cli import main_for_task

    with pytest.raises(SystemExit) as stopped:
        main_for_task("winograd", [*SWEEP_ARGS, *argv, "--out", str(tmp_path / "sweep")])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and err.count("\n") == 1 and fragment in err
    assert not (tmp_path / "sweep").exists()


class FailingExecutor:
    name = "failing"

    def run(self, function, items, on_outcome, cost=None):
        for item in items:
            on_outcome(item, Outcome(error="RuntimeError: out of memory"))


def test_a_run_failing_twice_is_recorded_and_rerun_later(tmp_path):
    from probes.census import take_census

    out = tmp_path / "sweep"
    outcome = sweep(out, FailingExecutor())
    assert (outcome.done, outcome.failed) == (0, 2)
    record = json.loads((out / "d_model=16" / "attn-only-2x1" / "seed0" / FAILED).read_text())
    assert record["error"] == "RuntimeError: out of memory"
    with pytest.raises(UsageError, match="no finished runs"):
        take_census(out)
    again = run_sweep(
        tiny_sweep(out, grid=("d_model=16",)),
        out,
        LocalExecutor(jobs=1),
        "test",
        progress=False,
        write=lambda line: None,
    )
    assert again.done == 1 and not (out / "d_model=16" / "attn-only-2x1" / "seed0" / FAILED).exists()
    assert take_census(out).groups[0].failed == 0


# ---- a real two-node Ray cluster on this machine -------------------------------------------


@contextmanager
def two_node_cluster():
    """Started in the test's body, which runs in an isolated child (tests/isolation.py): a cluster
    started in pytest's own process leaves gRPC threads there, and a later fork can hang on them."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    # Shipped by value: Ray's workers cannot import this test module by name.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        cluster.shutdown()


def always_die(marker: str) -> int:
    Path(marker).write_text((Path(marker).read_text() if Path(marker).exists() else "") + "x")
    os.kill(os.getpid(), signal.SIGKILL)


def collect(executor, function, items) -> dict:
    found = {}
    executor.run(function, items, lambda item, outcome: found.__setitem__(item, outcome))
    return found


@pytest.mark.isolated
def test_ray_retries_a_worker_killed_mid_run_and_records_a_job_that_dies_twice(local_sweep, tmp_path):
    local, _ = local_sweep
    run = tiny_sweep(tmp_path / "sweep")[0]
    job = SweepJob(run.plan, "test")
    killed_once = partial(killed_in_training, {run.point: 1}, str(tmp_path), run_job)
    with two_node_cluster() as ray_cluster:
        found = collect(RayExecutor(address=ray_cluster.address), killed_once, [job])
        assert found[job].error is None
        assert (tmp_path / run.point).read_text() == "xx"  # killed once mid-run, run again once
        weights = (local / run.point / "attn-only-2x1" / "seed0" / "model.safetensors").read_bytes()
        assert found[job].result.files["model.safetensors"] == weights
        lost = str(tmp_path / "lost")
        found = collect(RayExecutor(address=ray_cluster.address), always_die, [lost])
        assert found[lost].result is None and "died" in found[lost].error.lower()
        assert Path(lost).read_text() == "xx"  # tried twice, then given up


@pytest.mark.isolated
def test_ray_sweep_in_a_batch_through_the_driver_equals_the_local_run_bitwise(local_sweep, tmp_path):
    local, _ = local_sweep
    out = tmp_path / "sweep"
    with two_node_cluster() as ray_cluster:
        outcome = sweep(out, RayExecutor(address=ray_cluster.address, batch=2))  # both runs in one task
        assert (outcome.done, outcome.failed) == (2, 0)
        for width in (16, 32):
            mine, theirs = (base / f"d_model={width}" / "attn-only-2x1" / "seed0" for base in (out, local))
            assert (mine / "model.safetensors").read_bytes() == (theirs / "model.safetensors").read_bytes()
            metrics = [json.loads((d / "metrics.json").read_text()) for d in (mine, theirs)]
            for m in metrics:
                m.pop("train_seconds")
                m.pop("sha256")  # covers the wall-clock training time too
            assert metrics[0] == metrics[1]
            assert (mine / "circuit.json").read_text() == (theirs / "circuit.json").read_text()
            assert (mine / "log.jsonl").read_text().count("\n") == (theirs / "log.jsonl").read_text().count("\n")
        again = sweep(out, RayExecutor(address=ray_cluster.address))
        assert (again.kept, again.done) == (2, 0)  # finished runs are never sent again


def fail_first_time(marker: str) -> str:
    """Raises on its first attempt at `marker` (attempts counted in that file), then returns it."""
    Path(marker).write_text((Path(marker).read_text() if Path(marker).exists() else "") + "x")
    if Path(marker).read_text() == "x":
        raise RuntimeError("first attempt fails")
    return marker


@pytest.mark.slow  # 26 s at load 23: trains and traces a run, then trains it again
def test_a_sweep_run_saves_no_train_state_on_the_way(tmp_path, monkeypatch):
    """A sweep run trains in its worker's temp folder and is run again from its start if it does
    not finish, so the train states a train command saves for --resume would never be read."""
    import tasks.training.loop

    saved = []
    monkeypatch.setattr(tasks.training.loop, "save_train_state", lambda *args, **kwargs: saved.append(args[0]))
    # A train state is due every 4 evaluations: at step 20 here, the budget (20 steps of a tiny
    # model never solve validation: no early stop)
    (run,) = plan_sweep(
        WinogradTask, PARAMS, {**TINY, "eval_every": 5}, ["attn-only-2x1"], [0], parse_grid([], WinogradTask), tmp_path
    )
    files = run_job(SweepJob(run.plan, "test", trace="census")).files
    assert json.loads(files["metrics.json"])["steps"] == 20 and saved == []
    from toylens.family import execute

    execute(run.plan, progress=False)  # the train command's path still saves them
    assert len(saved) == 1


def test_ray_batches_only_with_many_jobs_per_cpu():
    from toylens.sweeps.batches import MOST_PER_BATCH, TASKS_PER_CPU, batch_size, batches

    assert batch_size(200, 64) == 1  # under TASKS_PER_CPU jobs per CPU: one task each
    assert batch_size(TASKS_PER_CPU * 2 * 3, 2) == 3  # TASKS_PER_CPU tasks per CPU are left
    assert batch_size(200, 2) == MOST_PER_BATCH and batch_size(5, 0) == 1
    assert batches([4, 2, 0, 1, 3], 2) == [[4, 2], [0, 1], [3]]  # the costliest order kept


@pytest.mark.isolated
def test_ray_batches_try_each_job_twice_and_a_dying_job_loses_none_of_its_batch(tmp_path):
    markers = [str(tmp_path / name) for name in ("a", "b", "c")]
    with two_node_cluster() as ray_cluster:
        found = collect(RayExecutor(address=ray_cluster.address, batch=3), fail_first_time, markers)
        assert [found[m].result for m in markers] == markers
        assert [Path(m).read_text() for m in markers] == ["xx"] * 3  # in its batch, then alone
        lost, kept = str(tmp_path / "lost"), str(tmp_path / "kept")
        found = collect(RayExecutor(address=ray_cluster.address, batch=2), always_die_but_kept, [kept, lost])
        assert found[lost].result is None and "died" in found[lost].error.lower()
        assert Path(lost).read_text() == "xx"  # its batch, then alone: tried twice, then given up
        assert found[kept].error is None and Path(kept).read_text() == "xx"  # finished, its batch died: run alone


def always_die_but_kept(marker: str) -> str:
    """`always_die` for a marker named lost, else `marker` itself (its attempts counted in it)."""
    if Path(marker).name == "lost":
        always_die(marker)
    Path(marker).write_text((Path(marker).read_text() if Path(marker).exists() else "") + "x")
    return marker


def assigned_gpus(_item) -> list:
    import ray

    return ray.get_gpu_ids()


@pytest.mark.isolated
def test_ray_reserves_gpus_per_run_and_refuses_more_than_any_node_has(tmp_path, capsys):
    from toylens.cli import main_for_task

    with two_node_cluster() as ray_cluster:
        # No node has a GPU (nor has this machine): refused in one line, not left waiting forever.
        with pytest.raises(SystemExit) as stopped:
            main_for_task(
                "winograd",
                [
                    *SWEEP_ARGS,
                    "--executor",
                    "ray",
                    "--address",
                    ray_cluster.address,
                    "--gpus-per-run",
                    "1",
                    "--out",
                    str(tmp_path / "sweep"),
                ],
            )
        err = capsys.readouterr().err
        assert stopped.value.code == 2 and err.count("\n") == 1 and "has that many GPUs (most: 0)" in err
        node = ray_cluster.add_node(num_cpus=1, num_gpus=1)  # Ray takes a node's word for its GPUs
        try:
            ray_cluster.wait_for_nodes()
            found = collect(RayExecutor(address=ray_cluster.address, gpus=1), assigned_gpus, [0])
        finally:
            ray_cluster.remove_node(node)
        assert len(found[0].result) == 1  # the task was given one GPU
