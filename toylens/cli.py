"""`python -m tasks list|train|sweep NAME` and `python -m tasks.<name> train|sweep`: thin layers over
`toylens.family` and `toylens.sweep`. Heavy imports (torch, TransformerLens) happen only on the paths that train."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager, nullcontext
from pathlib import Path

from common.cli import Parser, UsageError, positive_int, run_cli
from common.io import nonempty_path, staging
from tasks.registry import build_task, get_task_class, param_type, task_classes
from tasks.validate import validate_family
from toylens.workers import default_jobs

MAX_SEEDS = 1000


def add_train_arguments(parser: Parser, task_cls: type) -> None:
    parser.add_argument("--models", help="comma-separated model names (default: the task's whole family)")
    add_settings_arguments(parser, f"runs/{task_cls.name}")
    parser.add_argument("--checkpoint-every", type=positive_int,
                        help="save the resumable train state every N steps (default: every 4th evaluation)")
    existing = parser.add_mutually_exclusive_group()
    existing.add_argument("--overwrite", action="store_true", help="replace runs that differ or exist")
    existing.add_argument("--resume", action="store_true",
                          help="continue unfinished runs from their last checkpoint (same final weights)")
    add_jobs_arguments(parser)
    parser.add_argument("--report", action="store_true",
                        help="then trace the circuits of these runs in the same worker processes and write "
                             "OUT/report (as `python -m probes.circuit report OUT` does, without its start-up)")
    parser.add_argument("--verbose", action="store_true",
                        help="with --report: print every part's sentences above the summary tables")
    add_task_params(parser, task_cls)


def add_settings_arguments(parser: Parser, default_out: str) -> None:
    """Seeds, runs folder and the training settings a command may override."""
    parser.add_argument("--seeds", type=positive_int, default=3, help="train seeds 0..N-1 (default 3)")
    parser.add_argument("--out", type=nonempty_path, help=f"runs folder (default {default_out})")
    parser.add_argument("--steps", type=positive_int, help="hard step budget per run")
    parser.add_argument("--batch-size", type=positive_int)
    parser.add_argument("--lr", type=float)
    parser.add_argument("--eval-every", type=positive_int)


def add_jobs_arguments(parser: Parser) -> None:
    parser.add_argument("--jobs", type=positive_int, default=default_jobs(),
                        help="runs trained at a time, one process and one thread each (default: CPU cores)")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def add_task_params(parser: Parser, task_cls: type, defaults: dict | None = None) -> None:
    """One flag per field of the task's Params; `defaults` replaces some of the Params defaults."""
    params = parser.add_argument_group(f"{task_cls.name} task parameters")
    taken = {option for action in parser._actions for option in action.option_strings}
    dests = {action.dest for action in parser._actions} | {"command"}
    for field in dataclasses.fields(task_cls.Params):
        flag = "--" + field.name.replace("_", "-")
        if flag in taken or field.name in dests:
            raise UsageError(f"task plugin {task_cls.name!r}: Params field {field.name!r} would be the flag "
                             f"{flag}, which is already a train option; rename the field")
        kind = param_type(task_cls, field)
        default = (defaults or {}).get(field.name, field.default)
        if kind is bool:
            params.add_argument(flag, action="store_true", default=default)
        else:
            params.add_argument(flag, type=kind, default=default, help=f"default {default}")


def task_from_args(task_cls: type, args):
    if args.seeds > MAX_SEEDS:
        raise UsageError(f"--seeds {args.seeds} is absurd; use at most {MAX_SEEDS}")
    return build_task(task_cls, {f.name: getattr(args, f.name) for f in dataclasses.fields(task_cls.Params)})


def settings_from_args(task, args, **fixed):
    """The task's training settings, then `fixed`, then what the command line overrides."""
    from tasks.settings import TrainSettings

    overrides = {**task.default_training(), **fixed,
                 **{key: value for key, value in (("max_steps", args.steps), ("batch_size", args.batch_size),
                                                  ("lr", args.lr), ("eval_every", args.eval_every))
                    if value is not None}}
    return TrainSettings.from_dict(overrides)


def train_command(task_cls: type, args) -> None:
    from tasks.data import cache_root
    from toylens.family import plan_family, train_family

    cache_root()   # refuses an empty TOYLENS_CACHE before any folder is made
    task = task_from_args(task_cls, args)
    settings = settings_from_args(task, args)
    models = model_list(args.models)
    out = args.out or Path("runs") / task.name
    plans = plan_family(task, models, list(range(args.seeds)), settings, out)
    report = out / "report" if args.report else None
    with writing_runs(out, report), (staging(report) if report is not None else nullcontext()) as staged:
        measured = train_family(plans, overwrite=args.overwrite, progress=not args.no_progress, resume=args.resume,
                                checkpoint_every=args.checkpoint_every, jobs=args.jobs, report_out=staged)
        # The comparison is a probe; the CLI composes training and probing, the packages stay apart.
        from probes.accuracy import compare_runs_command

        compare_runs_command(out)
        if report is not None:
            from toylens.report import publish_report

            print()
            publish_report(measured, report, task=task.name, staged=staged, verbose=args.verbose)


def model_list(text: str | None, flag: str = "--models") -> list[str] | None:
    """--models (or another list of names, e.g. --rungs) as names; absent means all of them, but an
    empty value is refused (it would silently mean all of them too)."""
    if text is None:
        return None
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise UsageError(f"{flag} {text!r} has an empty name; list names separated by commas, or "
                         f"leave {flag} out for all of them")
    return names


@contextmanager
def writing_runs(out: Path, report: Path | None):
    """Hold the runs folder's lock, after refusing files in the way that toylens did not write."""
    from common.io import check_publishable, claim_check
    from common.lock import folder_lock
    from probes.accuracy import SUMMARY

    with folder_lock(out, "runs folder"):
        claim_check(out / SUMMARY)
        if report is not None:
            check_publishable(report, "report folder")
        yield


def summary_line(task_cls: type) -> str:
    return (task_cls.__doc__ or task_cls.name).strip().splitlines()[0]


def task_parser(task_cls: type, prog: str) -> Parser:
    parser = Parser(prog=prog, description=task_cls.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    add_train_arguments(commands.add_parser("train", help=f"train the {task_cls.name} model family"), task_cls)
    from toylens.sweep import add_sweep_arguments

    add_sweep_arguments(commands.add_parser("sweep", help=f"train and trace {task_cls.name} runs over seeds and a "
                                            "grid of settings, locally or on Ray, then count their circuits"), task_cls)
    return parser


def run_command(task_cls: type, args) -> None:
    if args.command == "sweep":
        from toylens.sweep import sweep_command

        return sweep_command(task_cls, args)
    return train_command(task_cls, args)


def main_for_task(name: str, argv=None) -> None:
    def body():
        task_cls = get_task_class(name)
        args = task_parser(task_cls, f"python -m tasks.{name}").parse_args(argv)
        run_command(task_cls, args)

    run_cli(body)


def main(argv=None) -> None:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)

    def body():
        if argv[:1] == ["list"]:
            for name, cls in task_classes().items():
                validate_family(cls())
                print(f"{name:<16} {summary_line(cls)}")
            return
        if argv[:1] in (["train"], ["sweep"]) and len(argv) >= 2 and not argv[1].startswith("-"):
            task_cls = get_task_class(argv[1])
            parser = Parser(prog=f"python -m tasks {argv[0]} {argv[1]}", description=task_cls.__doc__)
            if argv[0] == "sweep":
                from toylens.sweep import add_sweep_arguments, sweep_command

                add_sweep_arguments(parser, task_cls)
                return sweep_command(task_cls, parser.parse_args(argv[2:]))
            add_train_arguments(parser, task_cls)
            return train_command(task_cls, parser.parse_args(argv[2:]))
        if argv[:1] in (["train"], ["sweep"]):
            raise UsageError(f"{argv[0]} needs a task name: python -m tasks {argv[0]} NAME (see python -m tasks list)")
        raise UsageError("usage: python -m tasks list | python -m tasks train|sweep NAME [options]")

    if argv in (["-h"], ["--help"], []):
        print("usage: python -m tasks list | python -m tasks train|sweep NAME [options]\n"
              "  list         registered tasks (built-in and plugins)\n"
              "  train NAME   train NAME's model family (python -m tasks train NAME --help)\n"
              "  sweep NAME   train and trace runs over seeds and a grid, locally or on Ray, then count\n"
              "               their circuits (python -m tasks sweep NAME --help)")
        return
    run_cli(body)
