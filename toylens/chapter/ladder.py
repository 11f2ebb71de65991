"""`toylens ladder TASK`: train the ladder's rungs (`probes.chapter.ladder`) on TASK's data with
its training settings over seeds, through the family training (`toylens.family`), then measure,
print, and write ladder.json and ladder.png beside the runs."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from common.cli import Parser, UsageError, run_cli, width_number
from common.atomic import write_json
from common.ownership import claim_check
from probes.chapter.ladder import LABELS, ladder_specs
from toylens.family import plan_models

LADDER_JSON = "ladder.json"
LADDER_FIGURE = "ladder.png"
MAX_WIDTH = 4096


def ladder_plans(task, seeds: list[int], settings, out: Path, d_model: int = 128, rungs=None) -> list:
    return plan_models(task, ladder_specs(d_model), rungs, seeds, settings, out, "rung(s)")


def ladder_command(args) -> None:
    from probes.report.figures import save
    from probes.chapter.ladder import ladder_figure, ladder_table, measure_ladder
    from toylens.arguments import model_list, settings_from_args, task_from_args
    from toylens.family import train_family

    task = task_from_args(args.task_cls, args)
    if args.d_model > MAX_WIDTH:
        raise UsageError(f"--d-model {args.d_model} is absurd for a toy model; use at most {MAX_WIDTH}")
    # The task's training settings; snapshots off (the ladder never replays training).
    settings = settings_from_args(task, args, snapshot_every=0)
    out = args.out or Path("runs") / "ladder" / task.name
    rungs = model_list(args.rungs, "--rungs")
    plans = ladder_plans(task, args.seeds, settings, out, args.d_model, rungs)
    for path in (out / LADDER_JSON, out / LADDER_FIGURE):  # a user's file there: refused before training
        claim_check(path)
    train_family(plans, overwrite=args.overwrite, progress=not args.no_progress, jobs=args.jobs)
    result = measure_ladder(plans)
    print(ladder_table(result))
    write_json(out / LADDER_JSON, asdict(result))
    save(ladder_figure(result), out / LADDER_FIGURE)
    print(f"\nwrote {out / LADDER_JSON} and {out / LADDER_FIGURE}")


def main(argv=None) -> None:
    import sys

    from tasks.registry import get_task_class
    from toylens.arguments import add_jobs_arguments, add_settings_arguments, add_task_params

    argv = list(sys.argv[1:] if argv is None else argv)

    def body():
        task_name = argv[0] if argv and not argv[0].startswith("-") else None
        task_cls = get_task_class(task_name) if task_name else None
        parser = Parser(
            prog="toylens ladder TASK",
            description="Train the ladder of models from no context to two blocks on TASK's data "
            "and compare them on held-out data.",
        )
        if task_cls is None:
            parser.add_argument("task", help="a registered task (toylens list)")
            parser.parse_args(argv)
            raise UsageError("toylens ladder needs a task name first, e.g. toylens ladder winograd")
        add_settings_arguments(parser, f"runs/ladder/{task_name}")
        parser.add_argument("--rungs", help=f"comma-separated rungs (default all: {', '.join(LABELS)})")
        parser.add_argument("--d-model", type=width_number, default=128, help="width of every rung (default 128)")
        parser.add_argument("--overwrite", action="store_true", help="retrain rungs already trained")
        add_jobs_arguments(parser)
        add_task_params(parser, task_cls)
        args = parser.parse_args(argv[1:])
        args.task_cls = task_cls
        ladder_command(args)

    run_cli(body)
