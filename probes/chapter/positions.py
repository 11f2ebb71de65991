"""Positions beyond the training length: 2-layer attention-only models (the induction family's
attn-only-2x4) with learned, sinusoidal (fixed), rotary, ALiBi or no positions, trained on
induction sequences of one repeat-length range and evaluated on sequences 2x and 4x as long.

Each model's context covers the longest evaluation sequence while it trains only on short ones:
learned position rows past the training length keep their initial random values, and the fixed
sinusoid table, rotary angles and ALiBi's bias simply continue. The 1x evaluation uses the run's
own held-out split (never in training); the longer ones are fresh induction sequences.

This module measures and draws; `toylens positions` (served by `toylens.chapter.positions`) trains
into runs/positions/<kind>/seed<k> (kept when already trained with the same settings),
prints accuracy and loss per length, and writes positions.json and positions.png there.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from models import ModelSpec
from models.spec import Positions
from models import Model
from tasks.settings import StopReason
from common.cli import UsageError
from common.stats import Interval, mean_interval, wilson

if TYPE_CHECKING:
    from tasks.data import Batch

KINDS = (Positions.LEARNED, Positions.SINUSOIDAL, Positions.ROTARY, Positions.ALIBI, Positions.NONE)


@dataclass(frozen=True)
class LengthScore:
    """One model on one length: accuracy (Wilson over scored positions) and answer loss (nats)."""

    factor: int
    accuracy: Interval
    loss: float


@dataclass(frozen=True)
class LengthResult:
    factor: int
    repeat: tuple[int, int]  # repeat lengths R evaluated (sequence = BOS + 2R tokens)
    accuracy: Interval  # mean over seeds, t interval
    loss: Interval
    seeds: list[LengthScore]


@dataclass(frozen=True)
class KindResult:
    kind: str
    steps: list[int]
    stop_reasons: list[StopReason]
    lengths: list[LengthResult]


@dataclass(frozen=True)
class PositionsResult:
    train_repeat: tuple[int, int]
    n_ctx: int
    task_params: dict
    training: dict
    eval_sequences: int
    vocabulary: int
    kinds: list[KindResult]


def position_specs(kinds, d_model: int = 128) -> dict[str, ModelSpec]:
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise UsageError(f"unknown position kind(s) {unknown}; known: {', '.join(KINDS)}")
    if d_model % 4:
        raise UsageError(f"--d-model {d_model} must be divisible by 4 (4 heads); try 128")
    return {kind: ModelSpec(n_layers=2, d_model=d_model, n_heads=4, mlp=False, positions=kind) for kind in kinds}


def context_for(max_repeat: int, factors) -> int:
    """Inputs of the longest evaluation sequence: BOS + 2R tokens, less the last (only an answer)."""
    return 2 * max(factors) * max_repeat


def longer_task(task, factor: int, sequences: int):
    """Induction sequences `factor` times as long as `task`'s (only the held-out split is read)."""
    from dataclasses import replace

    p = task.params
    return type(task)(
        replace(
            p,
            min_repeat=factor * p.min_repeat,
            max_repeat=factor * p.max_repeat,
            train=1,
            validation=1,
            heldout=sequences,
        )
    )


def score_lengths(model: Model, batches: dict[int, Batch]) -> list[LengthScore]:
    """Accuracy and answer loss of `model` on each length's batch."""
    from tasks.evaluate import score_split

    scores = []
    for factor, batch in batches.items():
        scored, _ = score_split(model, batch)
        scores.append(LengthScore(factor, wilson(int(scored.correct.sum()), len(scored.correct)), scored.loss.item()))
    return scores


def length_batches(run, factors, sequences: int) -> dict:
    from tasks.data import spread_subset, task_dataset, to_batch

    batches = {}
    for factor in factors:
        if factor == 1:
            batches[1] = spread_subset(run.batches()["heldout"], sequences)
        else:
            batches[factor] = to_batch(task_dataset(longer_task(run.task, factor, sequences), run.seed)["heldout"])
    return batches


def measure_positions(plans: list, factors, sequences: int) -> PositionsResult:
    from tasks.training.runs import Run

    by_kind: dict[str, list] = {}
    for plan in plans:
        run = Run(plan.run_dir)
        by_kind.setdefault(plan.model_name, []).append(
            (run, score_lengths(run.load_model(), length_batches(run, factors, sequences)))
        )
    task = plans[0].task
    kinds = []
    for kind, measured in by_kind.items():
        lengths = []
        for i, factor in enumerate(factors):
            seeds = [scores[i] for _, scores in measured]
            lengths.append(
                LengthResult(
                    factor,
                    (factor * task.params.min_repeat, factor * task.params.max_repeat),
                    mean_interval([s.accuracy.value for s in seeds]),
                    mean_interval([s.loss for s in seeds], bounds=(0.0, math.inf)),
                    seeds,
                )
            )
        kinds.append(
            KindResult(
                kind,
                [int(r.metrics.get("steps", 0)) for r, _ in measured],
                [r.metrics["stop_reason"] for r, _ in measured],
                lengths,
            )
        )
    first = Run(plans[0].run_dir)
    return PositionsResult(
        (task.params.min_repeat, task.params.max_repeat),
        first.spec.n_ctx,
        task.params_dict(),
        asdict(plans[0].settings),
        sequences,
        len(task.vocabulary()),
        kinds,
    )


def positions_table(result: PositionsResult) -> str:
    from probes.chapter.ladder import interval_text
    from probes.report.render import percent, table

    headers = (
        ["positions"]
        + [f"{l.factor}x (R {l.repeat[0]}-{l.repeat[1]}) accuracy / loss" for l in result.kinds[0].lengths]
        + ["steps"]
    )
    rows = [
        [k.kind]
        + [f"{percent(l.accuracy)} / {interval_text(l.loss)}" for l in k.lengths]
        + [f"{min(k.steps)}-{max(k.steps)}"]
        for k in result.kinds
    ]
    return (
        f"induction, trained on repeat length R {result.train_repeat[0]}-{result.train_repeat[1]} "
        f"(sequences of {2 * result.train_repeat[0] + 1}-{2 * result.train_repeat[1] + 1} tokens), context "
        f"{result.n_ctx}; accuracy and answer loss at the repeated positions, mean [95% t interval over seeds], "
        f"{result.eval_sequences} sequences per length and seed; chance 1/{result.vocabulary - 1}, "
        f"uniform-guess loss ln {result.vocabulary} = {math.log(result.vocabulary):.2f}\n" + table(headers, rows)
    )


def positions_figure(result: PositionsResult):
    from common.figure import Figure

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    axes = fig.subplots(1, 2)
    for kind in result.kinds:
        x = [l.factor for l in kind.lengths]
        for ax, metric in zip(axes, ("accuracy", "loss")):
            values = [getattr(l, metric) for l in kind.lengths]
            (line,) = ax.plot(x, [v.value for v in values], "o-", label=kind.kind)
            if not any(math.isnan(v.low) for v in values):
                ax.fill_between(
                    x, [v.low for v in values], [v.high for v in values], color=line.get_color(), alpha=0.15
                )
    for ax, name in zip(axes, ("accuracy at repeated positions", "answer loss (nats)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(
            [l.factor for l in result.kinds[0].lengths],
            [f"{l.factor}x\n(R {l.repeat[0]}-{l.repeat[1]})" for l in result.kinds[0].lengths],
        )
        ax.set_xlabel("sequence length, relative to training")
        ax.set_ylabel(name)
    axes[0].set_ylim(0, 1)
    axes[1].axhline(math.log(result.vocabulary), color="grey", linestyle="--", linewidth=1)
    axes[0].legend(title="positions")
    fig.suptitle(
        f"induction beyond the training length (trained on R {result.train_repeat[0]}-"
        f"{result.train_repeat[1]}; {len(result.kinds[0].steps)} seeds, 95% t intervals)"
    )
    return fig
