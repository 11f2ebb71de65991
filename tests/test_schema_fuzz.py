"""Property test: any edit of any field of config.json, metrics.json or the train state
(its type, its value, its deletion, deep nesting, an extra field) ends in one UsageError line or
in a correct run, never a traceback and never a silently different run.

An edit as a user makes it leaves the checksums alone: it must be refused unless it changed
nothing. An edit that also recomputes the checksum (a deliberate forgery, which no checksum
without a secret can catch) must still be refused or carry values of exactly the right types.
The schema functions run in process; a handful of CLI runs check the same path end to end."""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.cli import UsageError
from tests.refusals import RUN, cli, one_line

FUZZ = settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)

values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=6),
        st.sampled_from(["", "../x", "winograd", "0", "true", "LN"]),
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)),
    max_leaves=6,
)
nested = st.integers(min_value=1, max_value=60).map(lambda depth: json.loads("[" * depth + "]" * depth))


def leaf_paths(value, prefix=()) -> list[tuple]:
    """Every key path in a JSON value (dict keys and list indexes), containers included."""
    paths = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            paths += leaf_paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value[:3]):
            paths += leaf_paths(item, (*prefix, index))
    return paths


@st.composite
def edits(draw, document: dict):
    """(mutated copy of `document`, what was done)."""
    path = draw(st.sampled_from(leaf_paths(document)))
    mutated = copy.deepcopy(document)
    parent = mutated
    for key in path[:-1]:
        parent = parent[key]
    kind = draw(st.sampled_from(["replace", "delete", "nest", "extra field"]))
    if kind == "delete":
        del parent[path[-1]]
    elif kind == "extra field" and isinstance(parent, dict):
        parent[draw(st.text(min_size=1, max_size=5))] = draw(values)
    else:
        parent[path[-1]] = draw(nested if kind == "nest" else values)
    return mutated, (path, kind)


@pytest.fixture(scope="module")
def fuzz_run(tiny_runs, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fuzz") / "winograd"
    shutil.copytree(tiny_runs / RUN, out / RUN)
    return out / RUN


def read(path: Path) -> dict:
    return json.loads(path.read_text())


def write(path: Path, document) -> None:
    path.write_text(json.dumps(document))


def identity(config: dict) -> dict:
    from tasks.training.runs import RUN_IDENTITY

    return {key: config.get(key) for key in RUN_IDENTITY}


def open_run(run_dir: Path):
    """Everything a probe reads of a run before it loads the model."""
    from tasks.training.runs import Run

    run = Run(run_dir)
    run.check()
    return run, run.task, run.metrics


def assert_one_line(error: UsageError) -> None:
    assert str(error) and "\n" not in str(error)


def test_config_edits(fuzz_run):
    original = read(fuzz_run / "config.json")

    @FUZZ
    @given(edits(original), st.booleans())
    def check(edit, sign):
        from tasks.training.runs import run_sha256

        mutated, _ = edit
        if sign and isinstance(mutated, dict):
            mutated["run_sha256"] = run_sha256(mutated)
        write(fuzz_run / "config.json", mutated)
        try:
            run, task, _ = open_run(fuzz_run)
        except UsageError as error:
            assert_one_line(error)
            return
        finally:
            write(fuzz_run / "config.json", original)
        if not sign:
            assert identity(run.config) == identity(original)  # only provenance fields changed
        assert type(run.seed) is int and isinstance(run.model_name, str)
        # A parameter missing from the file takes its default (as spec fields do, so old runs load).
        assert all(task.params_dict()[k] == v for k, v in run.config["task"]["params"].items())

    check()


def test_metrics_edits(fuzz_run, monkeypatch):
    import probes.accuracy as accuracy
    from tasks.training.runs import Run, metrics_sha256

    original = read(fuzz_run / "metrics.json")
    monkeypatch.setattr(accuracy, "measure_accuracy", lambda *args: "measured again")

    @FUZZ
    @given(edits(original), st.booleans())
    def check(edit, sign):
        mutated, _ = edit
        if sign:
            mutated["sha256"] = metrics_sha256(mutated)
        write(fuzz_run / "metrics.json", mutated)
        try:
            run = Run(fuzz_run)
            metrics = run.metrics
            result = accuracy.measured_accuracy(run)  # the part that reads metrics.json
        except UsageError as error:
            assert_one_line(error)
            return
        finally:
            write(fuzz_run / "metrics.json", original)
        if not sign:
            assert metrics == original
        if result != "measured again":  # believed only if every number is a number where it should be
            for split in result.splits.values():
                assert type(split.n) is int and isinstance(split.accuracy.value, (int, float))
            accuracy.model_accuracy([result])

    check()


@pytest.fixture(scope="module")
def saved_state(small_winograd, tmp_path_factory):
    """A real train state (step 40 of 50), and what a loader needs to read it back."""
    from models import build_model
    from tasks.data import task_dataset, to_batch
    from tasks.training.loop import train
    from tasks.settings import TrainSettings
    from tests.conftest import TINY_SPECS
    from toylens.family import sized_spec

    batches = {name: to_batch(split) for name, split in task_dataset(small_winograd, 0).items()}
    spec = sized_spec(TINY_SPECS["attn-only-2x1"], small_winograd, batches)
    settings_ = TrainSettings(max_steps=50, batch_size=16, eval_every=10)
    path = tmp_path_factory.mktemp("state") / "train_state.safetensors"
    train(
        build_model(spec, seed=0),
        batches["train"],
        batches["validation"],
        settings_,
        0,
        progress=False,
        state_path=path,
        checkpoint_every=20,
    )
    return path, spec, settings_


def load_state(path: Path, spec, settings_):
    import torch

    from models import build_model
    from tasks.training.resume import load_train_state

    model = build_model(spec, seed=0)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings_.lr)
    return load_train_state(path, model, optimizer, torch.Generator(), settings_), model


TENSOR_EDITS = ["delete", "dtype", "shape", "nan", "value", "extra"]


def test_train_state_edits(saved_state, tmp_path):
    import torch

    from common.store import load_tensors
    from models.checkpoint import save_tensors
    from tasks.training.resume import state_sha256

    path, spec, settings_ = saved_state
    tensors, metadata = load_tensors(path, "")
    (progress, model) = load_state(path, spec, settings_)
    expected_weights = {k: v.clone() for k, v in model.state_dict().items()}
    names = sorted(tensors)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        edits({k: v for k, v in metadata.items() if k != "sha256"}),
        st.sampled_from([None, *TENSOR_EDITS]),
        st.sampled_from(names),
        st.booleans(),
    )
    def check(edit, tensor_edit, name, sign):
        changed, _ = edit
        edited = dict(tensors)
        if tensor_edit == "delete":
            del edited[name]
        elif tensor_edit == "dtype":
            edited[name] = edited[name].to(torch.float64 if edited[name].dtype != torch.float64 else torch.int8)
        elif tensor_edit == "shape":
            edited[name] = torch.zeros(3, 2)
        elif tensor_edit == "nan" and edited[name].is_floating_point():
            edited[name] = torch.full_like(edited[name], math.nan)
        elif tensor_edit == "value":
            edited[name] = edited[name] + 1 if edited[name].dtype != torch.bool else ~edited[name]
        elif tensor_edit == "extra":
            edited["optimizer.99.exp_avg"] = torch.zeros(2)
        checksum = state_sha256(edited, changed) if sign else metadata["sha256"]
        target = tmp_path / "edited.safetensors"
        target.unlink(missing_ok=True)
        save_tensors(target, edited, {**changed, "sha256": checksum})
        try:
            loaded, model = load_state(target, spec, settings_)
        except UsageError as error:
            assert_one_line(error)
            return
        assert all(torch.isfinite(v).all() for v in model.state_dict().values() if v.is_floating_point())
        assert type(loaded["step"]) is int and loaded["step"] <= settings_.max_steps
        if not sign:  # an unsigned edit is believed only if it changed nothing
            assert loaded == progress
            assert all(torch.equal(model.state_dict()[k], v) for k, v in expected_weights.items())

    check()


@pytest.mark.parametrize(
    "edit", [lambda c: c.update(seed=[0]), lambda c: c["spec"].update(mlp="yes"), lambda c: c.update(task=["winograd"])]
)
def test_config_edits_through_the_cli(tiny_runs, tmp_path, edit):
    from tasks.training.runs import run_sha256

    out = tmp_path / "winograd"
    shutil.copytree(tiny_runs, out)
    config = read(out / RUN / "config.json")
    edit(config)
    config["run_sha256"] = run_sha256(config)
    write(out / RUN / "config.json", config)
    one_line(cli("toylens", "accuracy", str(out)))


# ---- a sweep's own files (issue 26) ----------------------------------------------------------

from tests.test_sweep_reliability import RUN as SWEEP_RUN, plan, resign  # noqa: E402

SWEEP_FILES = {
    "circuit": SWEEP_RUN / "seed0" / "circuit.json",
    "point": Path("default") / "point.json",
    "failed": SWEEP_RUN / "seed1" / "failed.json",
    "sweep": Path("sweep.json"),
    "census": Path("census") / "census.json",
}


@pytest.fixture(scope="module")
def fuzz_sweep(finished_sweep, tmp_path_factory) -> Path:
    """The module's sweep with seed 1 recorded as failed, and a census written."""
    from toylens.census import census_command
    from tasks.training.sweeps import failed_record

    out = tmp_path_factory.mktemp("fuzz-sweep") / "sweep"
    shutil.copytree(finished_sweep, out)
    (out / SWEEP_RUN / "seed1" / "metrics.json").unlink()
    write(out / SWEEP_RUN / "seed1" / "failed.json", failed_record("default", "attn-only-2x1", 1, "RuntimeError: x"))
    census_command(out)
    return out


def counted(census) -> dict:
    """seed -> what the census made of it: its label, 'failed', or 'unreadable'."""
    found = {}
    for group in census.groups:
        found.update({seed: label for label, seeds in group.seeds.items() for seed in seeds})
        found.update({seed: "unreadable" for seed, _ in group.unreadable})
        assert all(why and "\n" not in why for _, why in group.unreadable)
        found.update({"failed": group.failed})
    return found


@pytest.mark.parametrize("kind", sorted(SWEEP_FILES))
def test_sweep_file_edits(fuzz_sweep, kind):
    """Any edit of circuit.json, point.json, failed.json, sweep.json or census.json: one line, or
    its run counted as unreadable, or (edited by hand, checksum untouched) nothing believed that
    the file did not say before. With the checksum recomputed (a forgery), still one line or a
    census of well-typed counts."""
    from probes.census import take_census
    from probes.report.outputs.census import check_census_folder

    path = fuzz_sweep / SWEEP_FILES[kind]
    original = read(path)
    baseline = counted(take_census(fuzz_sweep))

    @FUZZ
    @given(edits(original), st.booleans())
    def check(edit, sign):
        mutated, _ = edit
        if sign and isinstance(mutated, dict):
            mutated = resign(mutated)
        write(path, mutated)
        try:
            result = counted(take_census(fuzz_sweep))
            check_census_folder(fuzz_sweep / "census")
        except UsageError as error:
            assert_one_line(error)
            return
        finally:
            write(path, original)
        assert type(result["failed"]) is int
        if not sign:  # believed only as it was, or counted as unreadable: never relabelled
            assert all(
                result.get(seed) in (label, "unreadable") for seed, label in baseline.items() if seed != "failed"
            ), (result, baseline)
            assert result["failed"] <= baseline["failed"]

    check()


def test_unfinished_run_state_edits(fuzz_sweep, tmp_path):
    """An unfinished run's config.json, edited (with and without its run_sha256 recomputed): a
    sweep or `train --resume` either resumes it as the same run or refuses in one line."""
    from tasks.training.runs import run_sha256
    from toylens.family import existing_status

    out = tmp_path / "sweep"
    shutil.copytree(fuzz_sweep, out)
    (out / SWEEP_RUN / "seed0" / "metrics.json").unlink()
    run_plan = plan(out, seeds="0-0")[0].plan
    path = run_plan.run_dir / "config.json"
    original = read(path)

    @FUZZ
    @given(edits(original), st.booleans())
    def check(edit, sign):
        mutated, _ = edit
        if sign and isinstance(mutated, dict):
            mutated["run_sha256"] = run_sha256(mutated)
        write(path, mutated)
        try:
            status = existing_status(run_plan, overwrite=False, resume=True)
        except UsageError as error:
            assert_one_line(error)
            return
        finally:
            write(path, original)
        assert status == "resume"

    check()
