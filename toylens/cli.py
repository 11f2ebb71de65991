"""`toylens list|train|sweep NAME` (and the alias `python -m tasks.winograd train|sweep`): thin layers over
`toylens.family` and `toylens.sweeps.plan`. Heavy imports (torch, TransformerLens) happen only on the paths that train."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from pathlib import Path

from common.atomic import staging
from common.cli import Parser, UsageError, positive_int, printable, run_cli
from tasks.base import Task
from tasks.registry import get_task_class, task_classes
from tasks.validate import validate_family
from toylens.arguments import (
    add_jobs_arguments,
    add_settings_arguments,
    add_task_params,
    model_list,
    settings_from_args,
    task_from_args,
)


def add_train_arguments(parser: Parser, task_cls: type[Task]) -> None:
    parser.add_argument("--models", help="comma-separated model names (default: the task's whole family)")
    add_settings_arguments(parser, f"runs/{task_cls.name}")
    parser.add_argument(
        "--checkpoint-every",
        type=positive_int,
        help="save the resumable train state every N steps (default: every 4th evaluation)",
    )
    existing = parser.add_mutually_exclusive_group()
    existing.add_argument("--overwrite", action="store_true", help="replace runs that differ or exist")
    existing.add_argument(
        "--resume", action="store_true", help="continue unfinished runs from their last checkpoint (same final weights)"
    )
    add_jobs_arguments(parser)
    parser.add_argument(
        "--stack",
        choices=("auto", "on", "off"),
        default="off",
        help="train each model's seeds stacked, as one computation over a seed axis (each run's folder as "
        "one seed at a time writes it, equal within float rounding): on, off (default), or auto: stack a "
        "model only where a short probe of a few steps measures stacking faster per seed-step",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 1 when the shortcut audit fails or is inconclusive (after everything is written)",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="then trace the circuits of these runs in the same worker processes and write "
        "OUT/report (as `python -m probes.circuit report OUT` does, without its start-up)",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="with --report: print every part's sentences above the summary tables"
    )
    add_task_params(parser, task_cls)


def train_command(task_cls: type[Task], args) -> None:
    from tasks.data import cache_root
    from toylens.family import plan_family, train_family

    cache_root()  # refuses an empty TOYLENS_CACHE before any folder is made
    task = task_from_args(task_cls, args)
    settings = {name: settings_from_args(task, args, name) for name in validate_family(task)}
    models = model_list(args.models)
    out = args.out or Path("runs") / task.name
    check_not_a_sweep(out)
    plans = plan_family(task, models, args.seeds, settings, out)
    report = out / "report" if args.report else None
    with writing_runs(out, report), staging(report) if report is not None else nullcontext() as staged:
        measured = train_family(
            plans,
            overwrite=args.overwrite,
            progress=not args.no_progress,
            resume=args.resume,
            checkpoint_every=args.checkpoint_every,
            jobs=args.jobs,
            report_out=staged,
            stack=args.stack,
        )
        # The comparison is a probe; the CLI composes training and probing, the packages stay apart.
        from toylens.accuracy import compare_runs_command

        models = compare_runs_command(out)
        if report is not None:
            from toylens.report import publish_report

            print()
            publish_report(measured, report, task=task.name, staged=staged, verbose=args.verbose)
    if args.strict:
        from probes.health import strict_exit

        strict_exit(models)


def check_not_a_sweep(out: Path) -> None:
    """Training into a sweep's root would put runs beside its grid points that it never planned."""
    from tasks.training.sweeps import SWEEP, is_sweep

    if is_sweep(out):
        raise UsageError(
            f"--out {out} is a sweep folder (it holds {SWEEP}); train into a folder of its own, or "
            f"into one of its grid points ({Path(out) / 'default'}, ...) to replace the sweep's runs there"
        )


@contextmanager
def writing_runs(out: Path, report: Path | None):
    """Hold the runs folder's lock, after refusing files in the way that toylens did not write."""
    from common.ownership import check_publishable, claim_check
    from common.lock import folder_lock
    from probes.accuracy import SUMMARY

    with folder_lock(out, "runs folder"):
        claim_check(out / SUMMARY)
        if report is not None:
            check_publishable(report, "report folder")
        yield


def summary_line(task_cls: type[Task]) -> str:
    return (task_cls.__doc__ or task_cls.name).strip().splitlines()[0]


def task_parser(task_cls: type[Task], prog: str, own: bool = False) -> Parser:
    """`own`: a plugin's own `python -m mytask` ran, and its usage lines name it; otherwise they name
    the one command surface, whichever alias (`python -m tasks.winograd`) ran."""
    parser = Parser(prog=prog, description=task_cls.__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    def named(command: str) -> str:
        return f"{prog} {command}" if own else f"toylens {command} {task_cls.name}"

    add_train_arguments(
        commands.add_parser("train", prog=named("train"), help=f"train the {task_cls.name} model family"), task_cls
    )
    from toylens.sweeps.plan import add_sweep_arguments

    add_sweep_arguments(
        commands.add_parser(
            "sweep",
            prog=named("sweep"),
            help=f"train and trace {task_cls.name} runs over seeds and a "
            "grid of settings, locally or on Ray, then count their circuits",
        ),
        task_cls,
    )
    return parser


def run_command(task_cls: type[Task], args) -> None:
    if args.command == "sweep":
        from toylens.sweeps.driver import sweep_command

        return sweep_command(task_cls, args)
    return train_command(task_cls, args)


def main_for_task(name: str, argv=None) -> None:
    def body():
        task_cls = get_task_class(name)
        module = main_module(f"tasks.{name}")
        args = task_parser(task_cls, f"python -m {module}", own=module != f"tasks.{name}").parse_args(argv)
        run_command(task_cls, args)

    run_cli(body)


def main_module(fallback: str) -> str:
    """The module `python -m` ran (a plugin's own `python -m mytask`), for usage lines."""
    import sys

    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name.removesuffix(".__main__") if spec is not None and spec.name else fallback


def shared_help(command: str) -> str:
    """`toylens train --help` (or sweep) without a task: the options every task shares, and where a
    task's own (its parameters) are listed. No plugin is imported: nothing can hang or fail here."""
    shared = type("NAME", (Task,), {"name": "NAME", "__doc__": None})
    parser = Parser(
        prog=f"toylens {command} NAME",
        description=f"The options every task's {command} takes. A task's own options (its parameters): "
        f"toylens {command} NAME --help; the tasks: toylens list.",
    )
    if command == "sweep":
        from toylens.sweeps.plan import add_sweep_arguments

        add_sweep_arguments(parser, shared)
    else:
        add_train_arguments(parser, shared)
    return parser.format_help()


def main(argv=None) -> None:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)

    def body():
        if argv[:1] == ["list"]:
            if argv[1:]:  # a name given to list would be silently ignored
                raise UsageError(
                    f"list takes no arguments, got {' '.join(argv[1:])!r}; run toylens list "
                    "(toylens train NAME --help for one task's options)"
                )
            for name, cls in task_classes().items():
                validate_family(cls())
                print(f"{name:<16} {printable(summary_line(cls))}")
            return
        if argv[:1] in (["train"], ["sweep"]) and len(argv) >= 2 and not argv[1].startswith("-"):
            task_cls = get_task_class(argv[1])
            parser = Parser(prog=f"toylens {argv[0]} {argv[1]}", description=task_cls.__doc__)
            if argv[0] == "sweep":
                from toylens.sweeps.plan import add_sweep_arguments
                from toylens.sweeps.driver import sweep_command

                add_sweep_arguments(parser, task_cls)
                return sweep_command(task_cls, parser.parse_args(argv[2:]))
            add_train_arguments(parser, task_cls)
            return train_command(task_cls, parser.parse_args(argv[2:]))
        if argv[:1] in (["train"], ["sweep"]):
            raise UsageError(f"{argv[0]} needs a task name: toylens {argv[0]} NAME (see toylens list)")
        raise UsageError("usage: toylens list | toylens train|sweep NAME [options]")

    if argv[:1] in (["train"], ["sweep"]) and argv[1:2] in (["-h"], ["--help"]):
        return print(shared_help(argv[0]))
    if argv in (["-h"], ["--help"], [], ["list", "-h"], ["list", "--help"]):
        print(
            "usage: toylens list | toylens train|sweep NAME [options]\n"
            "  list         registered tasks (built-in and plugins)\n"
            "  train NAME   train NAME's model family (toylens train NAME --help)\n"
            "  sweep NAME   train and trace runs over seeds and a grid, locally or on Ray, then count\n"
            "               their circuits (toylens sweep NAME --help)"
        )
        return
    run_cli(body)
