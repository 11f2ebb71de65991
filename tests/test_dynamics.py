"""Snapshots written during training and the replay probe over them."""

from __future__ import annotations

import pytest

from models import ModelSpec
from probes.dynamics import SnapshotPoint, phase_change
from tasks.induction import InductionParams, InductionTask


def point(step: int, scored_loss: float) -> SnapshotPoint:
    return SnapshotPoint(step, scored_loss, 4.0, 0.0, 0.0, [[0.0]], [[0.0]])


def test_phase_change_is_the_steepest_fall_per_step():
    points = [point(0, 4.2), point(50, 4.1), point(100, 3.0), point(200, 1.5), point(250, 1.4)]
    # falls per step: 0.002, 0.022, 0.015, 0.002 -> steepest between 50 and 100
    assert phase_change(points)[:2] == (75, (50, 100))
    assert phase_change([point(0, 4.0), point(50, 4.1)]) == (None, None, 0.0)  # never falls
    assert phase_change([point(0, 4.0)]) == (None, None, 0.0)


@pytest.fixture(scope="module")
def snapshot_run(tmp_path_factory):
    from toylens.family import RunPlan, train_family
    from tasks.settings import TrainSettings

    task = InductionTask(InductionParams(tokens=8, min_repeat=3, max_repeat=5, train=300, validation=20, heldout=40))
    spec = ModelSpec(n_layers=2, d_model=16, n_heads=2, mlp=False, norm=None)
    settings = TrainSettings(max_steps=40, batch_size=16, eval_every=20, snapshot_every=20)
    out = tmp_path_factory.mktemp("runs") / "induction"
    train_family([RunPlan(task, "attn-only-2x2", spec, 0, settings, out / "attn-only-2x2" / "seed0")], progress=False)
    return out


def test_training_writes_weight_snapshots(snapshot_run):
    from probes.dynamics import snapshot_files

    files = snapshot_files(snapshot_run / "attn-only-2x2" / "seed0")
    assert [step for step, _ in files] == [0, 20, 40]


def test_replay_scores_every_snapshot_and_the_last_matches_the_final_model(snapshot_run):
    from probes.dynamics import run_dynamics
    from tasks.evaluate import score_model
    from tasks.training.runs import find_runs

    run = find_runs(snapshot_run)[0]
    result = run_dynamics(run)
    assert [p.step for p in result.points] == [0, 20, 40]
    assert all(len(p.induction) == 2 and len(p.induction[0]) == 2 for p in result.points)
    # Step 40 is the final model: its scored loss is the loss score_model reports on the same rows.
    from tasks.data import spread_subset

    batch = spread_subset(run.batches()["heldout"], 128)
    assert result.points[-1].scored_loss == pytest.approx(score_model(run.load_model(), batch).loss.item(), rel=1e-5)


def test_dynamics_command_writes_json_and_figure(snapshot_run, capsys):
    from probes.report.dynamics import dynamics_command

    import json

    dynamics_command(snapshot_run)
    printed = capsys.readouterr().out
    written = json.loads((snapshot_run / "dynamics.json").read_text())["runs"]
    assert [p["step"] for p in written[0]["points"]] == [0, 20, 40]  # every snapshot, in order
    row = next(line for line in printed.splitlines() if line.startswith("attn-only-2x2"))
    # The printed row carries the stored numbers: the phase change and the last scored loss.
    phase = written[0]["phase_change_step"]
    assert f"  {phase if phase is not None else 'none'}  " in row
    assert f"{written[0]['points'][-1]['scored_loss']:.2f}" in row
    assert (snapshot_run / "dynamics_attn-only-2x2.png").stat().st_size > 1000


def test_runs_without_snapshots_are_refused_in_one_line(snapshot_run, tmp_path):
    import shutil
    import subprocess
    import sys

    bare = tmp_path / "induction"
    shutil.copytree(snapshot_run, bare)
    shutil.rmtree(bare / "attn-only-2x2" / "seed0" / "snapshots")
    done = subprocess.run([sys.executable, "-m", "toylens", "dynamics", str(bare)], capture_output=True, text=True)
    assert done.returncode == 2 and "snapshot" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_induction_report_adds_head_roles_and_dynamics_sections(snapshot_run, tmp_path, capsys):
    import json

    from toylens.report import report_command

    report_command(snapshot_run, tmp_path / "report", jobs=1, verbose=True)
    markdown = (tmp_path / "report" / "report.md").read_text()
    assert "Head roles" in markdown and "Training dynamics" in markdown
    data = json.dumps(json.loads((tmp_path / "report" / "report.json").read_text()))
    assert "induction_share" in data and "phase_change_step" in data
    # The dynamics section replays the run's own snapshots: the same numbers as the probe alone.
    from probes.dynamics import run_dynamics
    from tasks.training.runs import find_runs

    alone = run_dynamics(find_runs(snapshot_run)[0])
    summary = capsys.readouterr().out
    if alone.phase_change_step is None:
        assert "attn-only-2x2 seed 0: no phase change" in summary and "no phase change" in markdown
    else:
        assert f"attn-only-2x2 seed 0: phase change at step ~{alone.phase_change_step} " in summary
        assert f"step ~{alone.phase_change_step}" in summary.split("attn-only-2x2  ")[-1]  # the table's cell
