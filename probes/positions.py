"""Positions beyond the training length: 2-layer attention-only models (the induction family's
attn-only-2x4) with learned, sinusoidal (fixed), rotary, ALiBi or no positions, trained on
induction sequences of one repeat-length range and evaluated on sequences 2x and 4x as long.

Each model's context covers the longest evaluation sequence while it trains only on short ones:
learned position rows past the training length keep their initial random values, and the fixed
sinusoid table, rotary angles and ALiBi's bias simply continue. The 1x evaluation uses the run's
own held-out split (never in training); the longer ones are fresh induction sequences.

`python -m probes.positions` trains into runs/induction/positions/<kind>/seed<k> (kept when already
trained with the same settings), prints accuracy and loss per length, and writes positions.json and
positions.png there.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from models import ModelSpec
from models.checkpoint import write_json
from models.errors import Parser, UsageError, positive_int, run_cli
from probes.stats import Interval, mean_interval, wilson

KINDS = ("learned", "sinusoidal", "rotary", "alibi", "none")
POSITIONS_JSON = "positions.json"
POSITIONS_FIGURE = "positions.png"


@dataclass(frozen=True)
class LengthScore:
    """One model on one length: accuracy (Wilson over scored positions) and answer loss (nats)."""

    factor: int
    accuracy: Interval
    loss: float


@dataclass(frozen=True)
class LengthResult:
    factor: int
    repeat: tuple[int, int]     # repeat lengths R evaluated (sequence = BOS + 2R tokens)
    accuracy: Interval          # mean over seeds, t interval
    loss: Interval
    seeds: list[LengthScore]


@dataclass(frozen=True)
class KindResult:
    kind: str
    steps: list[int]
    stop_reasons: list[str]
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


def position_plans(task, kinds, seeds, settings, out: Path, factors, d_model: int = 128) -> list:
    from tasks.family import RunPlan

    context = context_for(task.params.max_repeat, factors)
    return [RunPlan(task, kind, spec, seed, settings, Path(out) / kind / f"seed{seed}", context=context)
            for kind, spec in position_specs(kinds, d_model).items() for seed in seeds]


def longer_task(task, factor: int, sequences: int):
    """Induction sequences `factor` times as long as `task`'s (only the held-out split is read)."""
    from dataclasses import replace

    p = task.params
    return type(task)(replace(p, min_repeat=factor * p.min_repeat, max_repeat=factor * p.max_repeat,
                              train=1, validation=1, heldout=sequences))


def score_lengths(model, batches: dict[int, "Batch"]) -> list[LengthScore]:  # noqa: F821
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
    from tasks.runs import Run

    by_kind: dict[str, list] = {}
    for plan in plans:
        run = Run(plan.run_dir)
        by_kind.setdefault(plan.model_name, []).append((run, score_lengths(run.load_model(),
                                                                            length_batches(run, factors, sequences))))
    task = plans[0].task
    kinds = []
    for kind, measured in by_kind.items():
        lengths = []
        for i, factor in enumerate(factors):
            seeds = [scores[i] for _, scores in measured]
            lengths.append(LengthResult(factor, (factor * task.params.min_repeat, factor * task.params.max_repeat),
                                        mean_interval([s.accuracy.value for s in seeds]),
                                        mean_interval([s.loss for s in seeds], bounds=(0.0, math.inf)), seeds))
        kinds.append(KindResult(kind, [int(r.metrics.get("steps", 0)) for r, _ in measured],
                                [str(r.metrics.get("stop_reason", "?")) for r, _ in measured], lengths))
    first = Run(plans[0].run_dir)
    return PositionsResult((task.params.min_repeat, task.params.max_repeat), first.config["spec"]["n_ctx"],
                           task.params_dict(), asdict(plans[0].settings), sequences, len(task.vocabulary()), kinds)


def positions_table(result: PositionsResult) -> str:
    from probes.ladder import interval_text
    from probes.render import percent, table

    headers = ["positions"] + [f"{l.factor}x (R {l.repeat[0]}-{l.repeat[1]}) accuracy / loss"
                               for l in result.kinds[0].lengths] + ["steps"]
    rows = [[k.kind] + [f"{percent(l.accuracy)} / {interval_text(l.loss)}" for l in k.lengths]
            + [f"{min(k.steps)}-{max(k.steps)}"] for k in result.kinds]
    return (f"induction, trained on repeat length R {result.train_repeat[0]}-{result.train_repeat[1]} "
            f"(sequences of {2 * result.train_repeat[0] + 1}-{2 * result.train_repeat[1] + 1} tokens), context "
            f"{result.n_ctx}; accuracy and answer loss at the repeated positions, mean [95% t interval over seeds], "
            f"{result.eval_sequences} sequences per length and seed; chance 1/{result.vocabulary - 1}, "
            f"uniform-guess loss ln {result.vocabulary} = {math.log(result.vocabulary):.2f}\n" + table(headers, rows))


def positions_figure(result: PositionsResult):
    from probes.figures import plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for kind in result.kinds:
        x = [l.factor for l in kind.lengths]
        for ax, metric in zip(axes, ("accuracy", "loss")):
            values = [getattr(l, metric) for l in kind.lengths]
            line, = ax.plot(x, [v.value for v in values], "o-", label=kind.kind)
            if not any(math.isnan(v.low) for v in values):
                ax.fill_between(x, [v.low for v in values], [v.high for v in values], color=line.get_color(), alpha=0.15)
    for ax, name in zip(axes, ("accuracy at repeated positions", "answer loss (nats)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks([l.factor for l in result.kinds[0].lengths],
                      [f"{l.factor}x\n(R {l.repeat[0]}-{l.repeat[1]})" for l in result.kinds[0].lengths])
        ax.set_xlabel("sequence length, relative to training")
        ax.set_ylabel(name)
    axes[0].set_ylim(0, 1)
    axes[1].axhline(math.log(result.vocabulary), color="grey", linestyle="--", linewidth=1)
    axes[0].legend(title="positions")
    fig.suptitle(f"induction beyond the training length (trained on R {result.train_repeat[0]}-"
                 f"{result.train_repeat[1]}; {len(result.kinds[0].steps)} seeds, 95% t intervals)")
    fig.tight_layout()
    return fig


def parse_factors(text: str) -> tuple[int, ...]:
    try:
        factors = tuple(sorted({int(f) for f in text.split(",") if f.strip()}))
    except ValueError:
        raise UsageError(f"--factors {text!r} must be comma-separated integers, e.g. 1,2,4") from None
    if not factors or factors[0] != 1 or factors[-1] > 64:
        raise UsageError(f"--factors {text!r} must start at 1 (the training length) and stay at most 64, e.g. 1,2,4")
    return factors


def positions_command(args) -> None:
    from probes.figures import save
    from tasks.cli import settings_from_args, task_from_args
    from tasks.family import train_family
    from tasks.induction import InductionTask

    task = task_from_args(InductionTask, args)
    factors = parse_factors(args.factors)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if max(factors) * task.params.max_repeat > task.params.tokens:
        raise UsageError(f"{max(factors)}x repeat {max(factors) * task.params.max_repeat} needs that many distinct "
                         f"tokens, only --tokens {task.params.tokens}; raise --tokens or lower --max-repeat")
    if args.eval_sequences > 100_000:
        raise UsageError(f"--eval-sequences {args.eval_sequences} is absurd; use at most 100000")
    settings = settings_from_args(task, args, snapshot_every=0)
    out = args.out or Path("runs") / "induction" / "positions"
    plans = position_plans(task, kinds, list(range(args.seeds)), settings, out, factors, args.d_model)

    train_family(plans, overwrite=args.overwrite, progress=not args.no_progress, jobs=args.jobs)
    result = measure_positions(plans, factors, args.eval_sequences)
    print(positions_table(result))
    write_json(out / POSITIONS_JSON, asdict(result))
    save(positions_figure(result), out / POSITIONS_FIGURE)
    print(f"\nwrote {out / POSITIONS_JSON} and {out / POSITIONS_FIGURE}")


def main(argv=None) -> None:
    from tasks.cli import add_jobs_arguments, add_settings_arguments, add_task_parameters
    from tasks.induction import InductionTask

    def body():
        parser = Parser(prog="python -m probes.positions",
                        description="Train induction models with each kind of position information on short "
                                    "sequences and evaluate them on longer ones.")
        parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated (default {','.join(KINDS)})")
        parser.add_argument("--factors", default="1,2,4", help="evaluated lengths, times the training length "
                                                                "(default 1,2,4)")
        parser.add_argument("--eval-sequences", type=positive_int, default=256,
                            help="sequences per length and seed (default 256)")
        parser.add_argument("--d-model", type=positive_int, default=128, help="width (default 128)")
        parser.add_argument("--overwrite", action="store_true", help="retrain runs already trained")
        add_settings_arguments(parser, "runs/induction/positions")
        add_jobs_arguments(parser)
        add_task_parameters(parser, InductionTask, DEFAULT_REPEAT)
        args = parser.parse_args(argv)
        positions_command(args)

    run_cli(body)


# Short training sequences (17-25 tokens), so that 4x (R 32-48) still draws distinct tokens from 64.
DEFAULT_REPEAT = {"min_repeat": 8, "max_repeat": 12}


if __name__ == "__main__":
    main()
