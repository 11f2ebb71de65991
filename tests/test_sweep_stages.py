"""Where a sweep run's time goes (common.stages, each run's stages.json) and the census-only trace
(probes.report.census_trace): the same circuit.json facts, and so the same census rows, as the
full trace of the same trained runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from common.cli import UsageError
from common.stages import recording, stage, timed


def test_stages_nest_and_add_up():
    @timed("inner")
    def inner():
        return sum(range(10_000))

    with recording() as stages:
        with stage("outer"):
            inner()
            inner()
        inner()
    assert list(stages.wall) == ["outer/inner", "outer", "inner"]
    assert stages.calls == {"outer/inner": 2, "outer": 1, "inner": 1}
    assert stages.wall["outer"] >= stages.wall["outer/inner"] > 0


def test_no_recorder_records_nothing():
    with stage("alone"):
        pass
    with recording() as stages:
        pass
    assert stages.record() == {}


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("{", "not valid JSON"),
        ('{"trace": "full", "stages": {"train": {"wall_s": 1}}}', "per stage: wall_s, cpu_s, calls"),
        ('{"trace": "most", "stages": {}}', "trace must be one of full, census"),
    ],
)
def test_a_damaged_stages_file_is_one_line(tmp_path, text, fragment):
    from toylens.sweeps.job import STAGES, read_stages

    (tmp_path / STAGES).write_text(text)
    with pytest.raises(UsageError, match=fragment) as refused:
        read_stages(tmp_path)
    assert "\n" not in str(refused.value) and "--overwrite" in str(refused.value)


def full_sweep(out: Path, models: list[str], seeds: list[int], trace: str = "full"):
    from tasks.winograd import WinogradTask
    from toylens.sweeps.driver import run_sweep
    from toylens.sweeps.executors import LocalExecutor
    from toylens.sweeps.plan import Grid, plan_sweep

    runs = plan_sweep(WinogradTask, {}, {}, models, seeds, Grid(), out)
    return run_sweep(runs, out, LocalExecutor(jobs=2), "test", progress=False, write=lambda line: None, trace=trace)


def census_traced_copy(out: Path, copy: Path) -> None:
    """`out` copied to `copy` with each run's circuit.json traced again for the census alone, here."""
    from probes.census import circuit_record
    from probes.circuits.labels import CIRCUIT, summarise
    from probes.report.census_trace import CENSUS_SUMMARY, census_analysis
    from probes.report.parts import RunContext
    from tasks.training.runs import Run
    from common.atomic import write_json

    shutil.copytree(out, copy)
    shutil.rmtree(copy / "census", ignore_errors=True)
    for circuit in sorted(copy.rglob(CIRCUIT)):
        run = Run(circuit.parent)
        write_json(
            circuit, circuit_record(summarise(census_analysis(RunContext(run, None)), CENSUS_SUMMARY), run.config)
        )


def facts(path: Path) -> dict:
    """circuit.json without the report's sentence and the checksum over it."""
    return {k: v for k, v in json.loads(path.read_text()).items() if k not in ("summary", "sha256")}


def check_same_census(tmp_path: Path, models: list[str], seeds: list[int]) -> None:
    import dataclasses

    from probes.census import take_census
    from toylens.sweeps.job import read_stages

    out, copy = tmp_path / "full", tmp_path / "census"
    outcome = full_sweep(out, models, seeds)
    assert outcome.done == len(models) * len(seeds)
    census_traced_copy(out, copy)
    circuits = sorted(out.rglob("circuit.json"))
    assert len(circuits) == outcome.done
    traced = 0
    for circuit in circuits:
        assert facts(circuit) == facts(copy / circuit.relative_to(out)), circuit
        traced += bool(facts(circuit)["nodes"])
        stages = read_stages(circuit.parent)["stages"]
        assert {"startup", "train", "train/steps", "trace", "trace/activation patching", "write"} <= set(stages)
    assert traced > 0  # a comparison of untraced runs alone would hold for any trace
    full, census = take_census(out).groups, take_census(copy).groups
    assert [dataclasses.asdict(g) for g in full] == [dataclasses.asdict(g) for g in census]


@pytest.mark.slow
def test_census_trace_gives_the_full_traces_circuit_facts_and_census(tmp_path):
    """Both traced on the same trained runs (one of each Winograd shape with paths, MLPs and norms)."""
    check_same_census(tmp_path, ["attn-only-2x1", "block-2"], [0])


@pytest.mark.slow
def test_census_trace_gives_the_same_census_over_16_seeds(tmp_path):
    check_same_census(tmp_path, ["attn-only-2x1"], list(range(16)))


@pytest.mark.slow
def test_a_census_sweep_records_its_trace_and_counts_its_runs(tmp_path):
    from probes.census import take_census
    from toylens.sweeps.job import read_stages

    out = tmp_path / "sweep"
    outcome = full_sweep(out, ["attn-only-2x1"], [0], trace="census")
    run = out / "default" / "attn-only-2x1" / "seed0"
    assert outcome.done == 1 and read_stages(run)["trace"] == "census"
    assert not any(name.startswith("trace/head ablations") for name in read_stages(run)["stages"])
    assert take_census(out).groups[0].finished == 1


def test_the_time_left_scales_from_the_runs_measured_so_far():
    """Two runs measured (10 s and 30 s at one unit of cost each): four more units on two jobs
    take 4 x 20 / 2 = 40 s; the first run's line names its top-level stages."""
    from types import SimpleNamespace

    from toylens.sweeps.plan import stage_split, time_left

    plan = SimpleNamespace(spec=None, settings=SimpleNamespace(max_steps=1))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("toylens.family.step_cost", lambda spec: 1.0)
        left = time_left([(plan, 10.0), (plan, 30.0)], [SimpleNamespace(plan=plan)] * 4, jobs=2)
    assert left == "40 s"
    record = {"stages": {"train": {"wall_s": 8.1}, "trace": {"wall_s": 3.2}, "trace/composition": {"wall_s": 1.0}}}
    assert stage_split(record) == " (train 8.1 s, trace 3.2 s)"
