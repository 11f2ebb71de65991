"""What the main job prints fits a terminal and says what it means (issue #37): no line over 120
characters, no interval over seeds that has zero width, one line per run as it starts, and runs
that stopped at or near their step budget flagged as budget-limited."""

from __future__ import annotations

import re

import pytest

from common.stats import wilson
from probes.accuracy import RunAccuracy, SplitAccuracy, model_accuracy
from probes.health import budget_note
from probes.report.render import WIDTH, accuracy_table
from tasks.settings import StopReason

ZERO_WIDTH = re.compile(r"\[(\d+(?:\.\d+)?%), \1\]")  # "[100.0%, 100.0%]"


def split(accuracy: float, n: int = 100) -> SplitAccuracy:
    return SplitAccuracy(
        n=n,
        accuracy=wilson(round(accuracy * n), n),
        loss=1.0,
        foil_rate=0.0,
        other_rate=0.0,
        by_group={},
        top_token=2,
        top_share=0.5,
    )


def run(seed: int, steps: int, stop: StopReason, heldout: float = 1.0, max_steps: int = 1000) -> RunAccuracy:
    return RunAccuracy(
        "attn-only-2x1",
        seed,
        "",
        steps,
        {"heldout": split(heldout), "train": split(heldout)},
        12.0,
        stop_reason=stop,
        max_steps=max_steps,
    )


def test_runs_stopped_by_or_near_their_budget_are_budget_limited_and_others_are_not():
    assert "stopped by its 1000-step budget" in budget_note(run(0, 1000, StopReason.BUDGET))
    assert "solved at step 825 of its 1000-step budget" in budget_note(run(1, 825, StopReason.SOLVED))
    assert budget_note(run(2, 400, StopReason.SOLVED)) is None  # solved with room to spare
    assert budget_note(run(3, 900, StopReason.STALLED)) is None  # stopped for its own reason
    assert budget_note(run(4, 900, StopReason.SOLVED, max_steps=0)) is None  # how it ended is unknown


def test_three_seeds_at_100_percent_get_an_interval_of_nonzero_width_and_the_table_fits():
    model = model_accuracy([run(seed, 300, StopReason.SOLVED) for seed in range(3)])
    assert model.heldout.low == model.heldout.high == 1.0  # the t interval over seeds: no information
    printed = accuracy_table([model])
    assert not ZERO_WIDTH.search(printed), printed
    assert "[98.7%, 100.0%]" in printed  # Wilson over the 3 x 100 pooled held-out positions
    assert max(map(len, printed.splitlines())) <= WIDTH


@pytest.fixture(scope="module")
def main_job(main_job_run) -> str:
    return main_job_run.printed


def test_the_main_jobs_terminal_has_no_line_over_120_characters(main_job):
    long = [line for line in main_job.splitlines() if len(line) > WIDTH]
    assert not long, "\n".join(long)


def test_the_main_jobs_terminal_has_no_zero_width_interval(main_job):
    assert not ZERO_WIDTH.findall(main_job), main_job


def test_each_run_says_it_started_and_budget_capped_runs_are_flagged(main_job):
    for model in ("bag-of-words", "attn-only-2x1"):
        for seed in range(3):
            assert f"{model} seed {seed}: training (at most 50 steps), then tracing its circuits" in main_job
    assert "3 of 3 seeds budget-limited (seed 0, 1, 2 stopped by its 50-step budget" in main_job


@pytest.mark.parametrize(
    "stop, positions, shown",
    [
        ("scored_loss", "all", "val_scored_loss"),  # Winograd: trained on every position, stopped on the scored loss
        ("loss", "scored", "val_loss"),
        ("accuracy", "scored", "val_scored_loss"),
        ("accuracy", "all", "val_loss"),
    ],
)
def test_the_bar_shows_the_loss_the_run_stops_on_else_the_one_it_descends(stop, positions, shown):
    from tasks.settings import LossPositions, StopMetric, TrainSettings
    from tasks.training.loop import bar_loss

    settings = TrainSettings(stop_metric=StopMetric(stop), loss_positions=LossPositions(positions))
    assert bar_loss(settings) == shown


def test_a_sweeps_time_left_scales_from_its_own_first_run():
    """Four runs left like the first (10 s) on 2 jobs: 20 s, whatever the up-front Winograd scale says."""
    from types import SimpleNamespace

    from models import ModelSpec
    from tasks.settings import TrainSettings
    from toylens.sweeps.plan import first_run_estimate

    plan = SimpleNamespace(spec=ModelSpec(n_layers=2, n_heads=1, mlp=False), settings=TrainSettings(max_steps=400))
    bigger = SimpleNamespace(spec=plan.spec, settings=TrainSettings(max_steps=800))
    remaining = [SimpleNamespace(plan=plan)] * 4
    files = SimpleNamespace(seconds=10.0, stages=None)  # the first run's RunFiles: no stages.json
    assert first_run_estimate(plan, files, remaining, 2) == (
        "first run took 10 s; at that rate the other 4 take roughly 20 s on 2 parallel jobs"
    )
    assert "roughly 40 s on 2" in first_run_estimate(plan, files, [SimpleNamespace(plan=bigger)] * 4, 2)
