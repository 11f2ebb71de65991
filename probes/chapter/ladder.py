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

This module measures and draws; `toylens ladder TASK` (served by `toylens.chapter.ladder`) trains
them into runs/ladder/TASK/<rung>/seed<k> (kept when already trained with the same settings),
prints held-out accuracy and loss per rung with 95% intervals over seeds and the shuffle test, and
writes ladder.json and ladder.png there.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Protocol, Sequence

from models import ModelSpec
from models.spec import Attention, Norm, Positions
from tasks.settings import StopReason
from common.cli import UsageError
from common.stats import Interval, mean_interval
from probes.shuffle import largest_change


# (folder name, label, spec fields beyond the shared base). Uniform heads all compute the same
# average, so the uniform rungs use one head.
RUNGS = (
    ("no-context", "no context", dict(attention=Attention.NONE, positions=Positions.NONE, n_heads=1)),
    (
        "uniform-average",
        "uniform average",
        dict(attention=Attention.UNIFORM, positions=Positions.NONE, residual=False, n_heads=1),
    ),
    ("uniform+positions", "+ positions", dict(attention=Attention.UNIFORM, residual=False, n_heads=1)),
    ("uniform+residual", "+ residual", dict(attention=Attention.UNIFORM, n_heads=1)),
    ("attention-1-head", "attention, 1 head", dict(n_heads=1)),
    ("attention-4-heads", "4 heads", dict()),
    ("attention+mlp", "+ MLP", dict(mlp=True)),
    ("block-1", "+ LayerNorm", dict(mlp=True, norm=Norm.LN)),
    ("block-2", "2 blocks", dict(mlp=True, norm=Norm.LN, n_layers=2)),
)


def ladder_specs(d_model: int = 128) -> dict[str, ModelSpec]:
    """Rung folder name -> spec; n_ctx and d_vocab are filled in from the task's data."""
    if d_model % 4:
        raise UsageError(f"--d-model {d_model} must be divisible by 4 (the 4-head rungs); try 128")
    base = ModelSpec(n_layers=1, d_model=d_model, n_heads=4, mlp=False, norm=None)
    return {name: replace(base, **fields) for name, _, fields in RUNGS}


LABELS = {name: label for name, label, _ in RUNGS}
# The source's ladder (SEED_NOTES section 4: 1 MB of Shakespeare, BPE vocabulary 1024, width 128,
# context 128, 3000 AdamW steps, lr 1e-3, batch 64), validation perplexity, as the source states it.
SOURCE = {
    "no-context": "59.71",
    "uniform-average": "~4x no context (188 worse)",
    "uniform+positions": "2.14 of those 188 back",
    "uniform+residual": "60.45",
    "attention-1-head": "14 better than uniform",
    "attention-4-heads": "3 better again",
    "block-1": "1.8 better than without LN; 38.07",
    "block-2": "40.57 (train 14.49: overfits)",
}


@dataclass(frozen=True)
class SeedResult:
    seed: int
    accuracy: Interval  # held-out, Wilson over scored positions
    loss: float  # held-out, mean cross-entropy of the answers (nats)
    steps: int
    stop_reason: StopReason
    shuffle_max_logit_change: float


@dataclass(frozen=True)
class PositionBand:
    """Held-out perplexity at the scored positions first..last (inclusive), mean over seeds; nan
    where the task scores no position in the band."""

    first: int
    last: int
    perplexity: Interval


@dataclass(frozen=True)
class RungResult:
    rung: str
    label: str
    spec: ModelSpec
    accuracy: Interval  # mean over seeds, t interval
    loss: Interval  # mean over seeds, t interval (bounded below by 0 only)
    perplexity: Interval  # mean over seeds of exp(held-out loss), t interval (bounded below by 1)
    shuffle_max_logit_change: float  # max over seeds
    seeds: list[SeedResult]
    bands: list[PositionBand]  # perplexity by position: how it changes along the context


@dataclass(frozen=True)
class LadderResult:
    task: str
    params: dict
    training: dict
    vocabulary: int  # uniform guessing scores loss ln(vocabulary)
    heldout_n: int  # scored held-out positions per seed
    rungs: list[RungResult]


def seed_result(run) -> SeedResult:
    from probes.accuracy import run_accuracy

    measured = run_accuracy(run)
    heldout = measured.splits["heldout"]
    return SeedResult(
        run.seed,
        heldout.accuracy,
        heldout.loss,
        int(run.metrics.get("steps", 0)),
        run.metrics["stop_reason"],
        measured.shuffle_max_logit_change,
    )


BANDS = 4  # equal bands of positions, first to last scored position
BAND_ROWS = 256  # held-out examples (evenly spread) the bands are measured on


def band_losses(run, bands: int = BANDS) -> list[tuple[int, int, float]]:
    """(first, last, mean answer loss in nats, nan if none scored) for `bands` equal bands of
    positions 0..the last scored one, on an evenly spread BAND_ROWS-example held-out sample."""
    import torch

    from tasks.data import spread_subset
    from tasks.evaluate import logits_at_scored, run_logits

    batch = spread_subset(run.batches()["heldout"], BAND_ROWS)
    logits = logits_at_scored(run_logits(run.load_model(), batch.inputs), batch)
    losses = torch.nn.functional.cross_entropy(logits, batch.answers, reduction="none")
    top = int(batch.positions.max()) + 1
    edges = [round(i * top / bands) for i in range(bands + 1)]
    result = []
    for first, end in zip(edges, edges[1:]):
        inside = (batch.positions >= first) & (batch.positions < end)
        result.append((first, end - 1, float(losses[inside].mean()) if bool(inside.any()) else math.nan))
    return result


def position_bands(runs: list) -> list[PositionBand]:
    per_seed = [band_losses(run) for run in runs]
    return [
        PositionBand(first, last, mean_interval([math.exp(seed[i][2]) for seed in per_seed], bounds=(1.0, math.inf)))
        for i, (first, last, _) in enumerate(per_seed[0])
    ]


def measure_ladder(plans: list) -> LadderResult:
    """Held-out accuracy and loss of the trained plans, per rung over seeds."""
    from tasks.training.runs import Run

    by_rung: dict[str, list] = {}
    for plan in plans:
        by_rung.setdefault(plan.model_name, []).append(Run(plan.run_dir))
    rungs = []
    for name, runs in by_rung.items():
        seeds = [seed_result(run) for run in runs]
        rungs.append(
            RungResult(
                rung=name,
                label=LABELS.get(name, name),
                spec=runs[0].spec,
                accuracy=mean_interval([s.accuracy.value for s in seeds]),
                loss=mean_interval([s.loss for s in seeds], bounds=(0.0, math.inf)),
                perplexity=mean_interval([math.exp(s.loss) for s in seeds], bounds=(1.0, math.inf)),
                shuffle_max_logit_change=largest_change(s.shuffle_max_logit_change for s in seeds),
                seeds=seeds,
                bands=position_bands(runs),
            )
        )
    task = plans[0].task
    return LadderResult(
        task.name,
        task.params_dict(),
        asdict(plans[0].settings),
        len(task.vocabulary()),
        rungs[0].seeds[0].accuracy.n,
        rungs,
    )


def ladder_table(result: LadderResult) -> str:
    from probes.report.render import percent, table
    from probes.report.words import shuffle_text

    baseline = result.rungs[0].perplexity.value
    rows = [
        [
            r.label,
            len(r.seeds),
            percent(r.accuracy),
            interval_text(r.loss),
            interval_text(r.perplexity, 2),
            f"{r.perplexity.value / baseline:.2f}",
            SOURCE.get(r.rung, ""),
            shuffle_text(r.shuffle_max_logit_change),
            steps_text(r.seeds),
        ]
        for r in result.rungs
    ]
    return (
        f"{result.task}: held-out accuracy, loss and perplexity exp(loss) at the scored positions (n = "
        f"{result.heldout_n} per seed; mean [95% t interval over seeds]); uniform guessing: loss ln "
        f"{result.vocabulary} = {math.log(result.vocabulary):.2f}, perplexity {result.vocabulary}. Source: "
        "validation perplexity on 1 MB of Shakespeare, context 128, width 128, 3000 steps\n"
        + table(
            [
                "rung",
                "seeds",
                "held-out accuracy",
                "held-out loss (nats)",
                "held-out perplexity",
                f"/ {result.rungs[0].label}",
                "source",
                "shuffle max|dlogit|",
                "steps",
            ],
            rows,
        )
        + "\n\n"
        + bands_table(result)
    )


def bands_table(result: LadderResult) -> str:
    """Perplexity by position: the uniform average drowns the current token (its share of the
    summary at position t is 1/(t+1)), so its cost grows along the context."""
    from probes.report.render import table

    bands = result.rungs[0].bands
    rows = [
        [r.label] + [("-" if math.isnan(b.perplexity.value) else f"{b.perplexity.value:.2f}") for b in r.bands]
        for r in result.rungs
    ]
    return (
        f"held-out perplexity by position (mean over seeds; {BAND_ROWS} evenly spread held-out examples per seed; "
        "'-': no scored position there)\n" + table(["rung"] + [f"positions {b.first}-{b.last}" for b in bands], rows)
    )


def interval_text(interval: Interval, digits: int = 3) -> str:
    if math.isnan(interval.low):
        return f"{interval.value:.{digits}f}"
    return f"{interval.value:.{digits}f} [{interval.low:.{digits}f}, {interval.high:.{digits}f}]"


class Stopped(Protocol):
    """How a seed's training ended, as steps_text reads it (SeedResult here, norms.SeedScore)."""

    @property
    def steps(self) -> int: ...

    @property
    def stop_reason(self) -> StopReason: ...


def steps_text(seeds: Sequence[Stopped]) -> str:
    steps = sorted(s.steps for s in seeds)
    reasons = sorted({s.stop_reason.replace("validation ", "") for s in seeds})
    span = f"{steps[0]}" if steps[0] == steps[-1] else f"{steps[0]}-{steps[-1]}"
    return f"{span} ({', '.join(reasons)})"


def ladder_figure(result: LadderResult):
    """Held-out accuracy and loss per rung, rungs left to right: each seed a dot, the mean a bar
    with its 95% interval."""
    from common.figure import Figure

    fig = Figure(figsize=(max(7, 0.9 * len(result.rungs) + 2), 6.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    x = range(len(result.rungs))
    for ax, metric, name in ((top, "accuracy", "held-out accuracy"), (bottom, "loss", "held-out loss (nats)")):
        means = [getattr(r, metric).value for r in result.rungs]
        errors = [
            [
                m - (getattr(r, metric).low if not math.isnan(getattr(r, metric).low) else m)
                for m, r in zip(means, result.rungs)
            ],
            [
                (getattr(r, metric).high if not math.isnan(getattr(r, metric).high) else m) - m
                for m, r in zip(means, result.rungs)
            ],
        ]
        ax.bar(x, means, color="#9ecae1", yerr=errors, capsize=4)
        for i, rung in enumerate(result.rungs):
            values = [s.accuracy.value if metric == "accuracy" else s.loss for s in rung.seeds]
            ax.plot([i] * len(values), values, "o", color="#08519c", markersize=4)
        ax.set_ylabel(name)
    top.set_ylim(0, 1)
    bottom.axhline(math.log(result.vocabulary), color="grey", linestyle="--", linewidth=1)
    bottom.text(
        len(result.rungs) - 0.5,
        math.log(result.vocabulary),
        f"uniform guess ln {result.vocabulary}",
        ha="right",
        va="bottom",
        fontsize=8,
        color="grey",
    )
    bottom.set_xticks(list(x), [r.label for r in result.rungs], rotation=30, ha="right")
    top.set_title(
        f"{result.task}: the ladder (n = {result.heldout_n} held-out positions per seed, "
        f"{len(result.rungs[0].seeds)} seeds)"
    )
    return fig
