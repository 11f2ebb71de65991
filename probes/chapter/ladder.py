"""The ladder: from ignoring the context to two transformer blocks, one step at a time (the source
chapter's ablation ladder, SEED_NOTES section 4), trained on any task's data with its own training
settings, over seeds.

Rungs (each adds one thing to the one before, except where the chapter swaps a part):
  no context        the current token only: attention "none", no positions (a bigram model)
  uniform average   the causal prefix average REPLACES the token (residual off), no positions
  + positions       learned positions added before the average
  + residual        the average is added to the token instead of replacing it
  attention, 1 head learned softmax attention (one head) instead of the uniform average
  4 heads           four heads of a quarter width
  + MLP             the block's MLP
  + LayerNorm       pre-norm LayerNorm: a full transformer block
  2 blocks          a second block

This module measures and draws; `python -m probes.chapter.ladder TASK` (served by `toylens.ladder`) trains
them into runs/ladder/TASK/<rung>/seed<k> (kept when already trained with the same settings),
prints held-out accuracy and loss per rung with 95% intervals over seeds and the shuffle test, and
writes ladder.json and ladder.png there.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from models import ModelSpec
from common.cli import UsageError
from common.stats import Interval, mean_interval


# (folder name, label, spec fields beyond the shared base). Uniform heads all compute the same
# average, so the uniform rungs use one head.
RUNGS = (
    ("no-context", "no context", dict(attention="none", positions="none", n_heads=1)),
    ("uniform-average", "uniform average", dict(attention="uniform", positions="none", residual=False, n_heads=1)),
    ("uniform+positions", "+ positions", dict(attention="uniform", residual=False, n_heads=1)),
    ("uniform+residual", "+ residual", dict(attention="uniform", n_heads=1)),
    ("attention-1-head", "attention, 1 head", dict(n_heads=1)),
    ("attention-4-heads", "4 heads", dict()),
    ("attention+mlp", "+ MLP", dict(mlp=True)),
    ("block-1", "+ LayerNorm", dict(mlp=True, norm="LN")),
    ("block-2", "2 blocks", dict(mlp=True, norm="LN", n_layers=2)),
)


def ladder_specs(d_model: int = 128) -> dict[str, ModelSpec]:
    """Rung folder name -> spec; n_ctx and d_vocab are filled in from the task's data."""
    if d_model % 4:
        raise UsageError(f"--d-model {d_model} must be divisible by 4 (the 4-head rungs); try 128")
    base = ModelSpec(n_layers=1, d_model=d_model, n_heads=4, mlp=False, norm=None)
    return {name: replace(base, **fields) for name, _, fields in RUNGS}


LABELS = {name: label for name, label, _ in RUNGS}


@dataclass(frozen=True)
class SeedResult:
    seed: int
    accuracy: Interval          # held-out, Wilson over scored positions
    loss: float                 # held-out, mean cross-entropy of the answers (nats)
    steps: int
    stop_reason: str
    shuffle_max_logit_change: float


@dataclass(frozen=True)
class RungResult:
    rung: str
    label: str
    spec: dict
    accuracy: Interval          # mean over seeds, t interval
    loss: Interval              # mean over seeds, t interval (bounded below by 0 only)
    shuffle_max_logit_change: float   # max over seeds
    seeds: list[SeedResult]


@dataclass(frozen=True)
class LadderResult:
    task: str
    params: dict
    training: dict
    vocabulary: int             # uniform guessing scores loss ln(vocabulary)
    heldout_n: int              # scored held-out positions per seed
    rungs: list[RungResult]


def seed_result(run) -> SeedResult:
    from probes.accuracy import run_accuracy

    measured = run_accuracy(run)
    heldout = measured.splits["heldout"]
    return SeedResult(run.seed, heldout.accuracy, heldout.loss, int(run.metrics.get("steps", 0)),
                      str(run.metrics.get("stop_reason", "?")), measured.shuffle_max_logit_change)


def measure_ladder(plans: list) -> LadderResult:
    """Held-out accuracy and loss of the trained plans, per rung over seeds."""
    from tasks.runs import Run

    by_rung: dict[str, list] = {}
    for plan in plans:
        by_rung.setdefault(plan.model_name, []).append(Run(plan.run_dir))
    rungs = []
    for name, runs in by_rung.items():
        seeds = [seed_result(run) for run in runs]
        rungs.append(RungResult(
            rung=name, label=LABELS.get(name, name), spec=runs[0].config["spec"],
            accuracy=mean_interval([s.accuracy.value for s in seeds]),
            loss=mean_interval([s.loss for s in seeds], bounds=(0.0, math.inf)),
            shuffle_max_logit_change=max(s.shuffle_max_logit_change for s in seeds), seeds=seeds))
    task = plans[0].task
    return LadderResult(task.name, task.params_dict(), asdict(plans[0].settings), len(task.vocabulary()),
                        rungs[0].seeds[0].accuracy.n, rungs)


def ladder_table(result: LadderResult) -> str:
    from probes.report.render import percent, table

    rows = [[r.label, len(r.seeds), percent(r.accuracy), interval_text(r.loss),
             f"{r.shuffle_max_logit_change:.1e}", steps_text(r.seeds)] for r in result.rungs]
    return (f"{result.task}: held-out accuracy and loss at the scored positions (n = {result.heldout_n} per "
            f"seed; mean [95% t interval over seeds]); uniform guessing: loss ln {result.vocabulary} = "
            f"{math.log(result.vocabulary):.2f}\n"
            + table(["rung", "seeds", "held-out accuracy", "held-out loss (nats)", "shuffle max|dlogit|", "steps"],
                    rows))


def interval_text(interval: Interval) -> str:
    if math.isnan(interval.low):
        return f"{interval.value:.3f}"
    return f"{interval.value:.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def steps_text(seeds: list[SeedResult]) -> str:
    steps = sorted(s.steps for s in seeds)
    reasons = sorted({s.stop_reason.replace("validation ", "") for s in seeds})
    span = f"{steps[0]}" if steps[0] == steps[-1] else f"{steps[0]}-{steps[-1]}"
    return f"{span} ({', '.join(reasons)})"


def ladder_figure(result: LadderResult):
    """Held-out accuracy and loss per rung, rungs left to right: each seed a dot, the mean a bar
    with its 95% interval."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(max(7, 0.9 * len(result.rungs) + 2), 6.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    x = range(len(result.rungs))
    for ax, metric, name in ((top, "accuracy", "held-out accuracy"), (bottom, "loss", "held-out loss (nats)")):
        means = [getattr(r, metric).value for r in result.rungs]
        errors = [[m - (getattr(r, metric).low if not math.isnan(getattr(r, metric).low) else m) for m, r in
                   zip(means, result.rungs)],
                  [(getattr(r, metric).high if not math.isnan(getattr(r, metric).high) else m) - m for m, r in
                   zip(means, result.rungs)]]
        ax.bar(x, means, color="#9ecae1", yerr=errors, capsize=4)
        for i, rung in enumerate(result.rungs):
            values = [s.accuracy.value if metric == "accuracy" else s.loss for s in rung.seeds]
            ax.plot([i] * len(values), values, "o", color="#08519c", markersize=4)
        ax.set_ylabel(name)
    top.set_ylim(0, 1)
    bottom.axhline(math.log(result.vocabulary), color="grey", linestyle="--", linewidth=1)
    bottom.text(len(result.rungs) - 0.5, math.log(result.vocabulary), f"uniform guess ln {result.vocabulary}",
                ha="right", va="bottom", fontsize=8, color="grey")
    bottom.set_xticks(list(x), [r.label for r in result.rungs], rotation=30, ha="right")
    top.set_title(f"{result.task}: the ladder (n = {result.heldout_n} held-out positions per seed, "
                  f"{len(result.rungs[0].seeds)} seeds)")
    return fig


if __name__ == "__main__":
    from toylens.ladder import main  # the command trains, so it lives in the command layer

    main()
