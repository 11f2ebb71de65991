"""`toylens positions`: train the induction models of `probes.chapter.positions` (one per kind of
position information) on short sequences through the family training (`toylens.family`), then
evaluate them on longer ones, print, and write positions.json and positions.png beside the runs."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from common.cli import Bounded, Parser, UsageError, positive_int, run_cli, width_number
from common.atomic import write_json
from common.ownership import claim_check
from probes.chapter.positions import KINDS, context_for, position_specs
from toylens.family import RunPlan

POSITIONS_JSON = "positions.json"
POSITIONS_FIGURE = "positions.png"
# Short training sequences (17-25 tokens), so that 4x (R 32-48) still draws distinct tokens from 64.
DEFAULT_REPEAT = {"min_repeat": 8, "max_repeat": 12}


def position_plans(task, kinds, seeds, settings, out: Path, factors, d_model: int = 128) -> list:
    context = context_for(task.params.max_repeat, factors)
    return [
        RunPlan(task, kind, spec, seed, settings, Path(out) / kind / f"seed{seed}", context=context)
        for kind, spec in position_specs(kinds, d_model).items()
        for seed in seeds
    ]


FACTORS = Bounded(int, 1, 64, "times the training length", many=True)


def parse_factors(values: list[int]) -> tuple[int, ...]:
    """--factors as FACTORS parsed them, sorted; the training length itself must be among them."""
    factors = tuple(sorted(values))
    if factors[0] != 1:
        raise UsageError(f"--factors {','.join(map(str, values))} must start at 1 (the training length), e.g. 1,2,4")
    return factors


def positions_command(args) -> None:
    from probes.report.figures import save
    from probes.chapter.positions import measure_positions, positions_figure, positions_table
    from tasks.induction import InductionTask
    from toylens.arguments import model_list, settings_from_args, task_from_args
    from toylens.family import train_family

    task = task_from_args(InductionTask, args)
    factors = parse_factors(args.factors)
    kinds = model_list(args.kinds, "--kinds")
    if max(factors) * task.params.max_repeat > task.params.tokens:
        raise UsageError(
            f"{max(factors)}x repeat {max(factors) * task.params.max_repeat} needs that many distinct "
            f"tokens, only --tokens {task.params.tokens}; raise --tokens or lower --max-repeat"
        )
    if args.eval_sequences > 100_000:
        raise UsageError(f"--eval-sequences {args.eval_sequences} is absurd; use at most 100000")
    settings = settings_from_args(task, args, snapshot_every=0)
    out = args.out or Path("runs") / "positions"
    plans = position_plans(task, kinds, args.seeds, settings, out, factors, args.d_model)
    for path in (out / POSITIONS_JSON, out / POSITIONS_FIGURE):  # a user's file there: refused before training
        claim_check(path)

    train_family(plans, overwrite=args.overwrite, progress=not args.no_progress, jobs=args.jobs)
    result = measure_positions(plans, factors, args.eval_sequences)
    print(positions_table(result))
    write_json(out / POSITIONS_JSON, asdict(result))
    save(positions_figure(result), out / POSITIONS_FIGURE)
    print(f"\nwrote {out / POSITIONS_JSON} and {out / POSITIONS_FIGURE}")


def main(argv=None) -> None:
    from tasks.induction import InductionTask
    from toylens.arguments import add_jobs_arguments, add_settings_arguments, add_task_params

    def body():
        parser = Parser(
            prog="toylens positions",
            description="Train induction models with each kind of position information on short "
            "sequences and evaluate them on longer ones.",
        )
        parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated (default {','.join(KINDS)})")
        parser.add_argument(
            "--factors",
            type=FACTORS,
            default=[1, 2, 4],
            help="evaluated lengths, times the training length (default 1,2,4)",
        )
        parser.add_argument(
            "--eval-sequences", type=positive_int, default=256, help="sequences per length and seed (default 256)"
        )
        parser.add_argument("--d-model", type=width_number, default=128, help="width (default 128)")
        parser.add_argument("--overwrite", action="store_true", help="retrain runs already trained")
        add_settings_arguments(parser, "runs/positions")
        add_jobs_arguments(parser)
        add_task_params(parser, InductionTask, DEFAULT_REPEAT)
        args = parser.parse_args(argv)
        positions_command(args)

    run_cli(body)
