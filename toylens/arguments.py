"""The command-line arguments the commands share (seeds, training settings, task parameters, jobs,
models) and how they become a task and its training settings."""

from __future__ import annotations

import dataclasses

from common.cli import MAX_COUNT, Bounded, Parser, UsageError, jobs_number, out_path
from tasks.base import Task
from tasks.registry import build_task, param_type
from tasks.training.runs import MAX_SEED
from toylens.workers import default_jobs

MAX_RUNS = 100_000


MAX_SEEDS = 1000

SEEDS_HELP = (
    "seeds: exactly these, a range 0-2 (inclusive) or a list 0,3,5; a bare number is refused "
    "(write 0-4 for five seeds, 5-5 for seed 5 alone)"
)


def parse_seeds(text: str) -> list[int]:
    """'0-99' (inclusive) or '0,3,7' -> sorted distinct seeds. A bare number is refused: it meant a
    count (seeds 0..N-1) in train, ladder and scaling and one seed in sweep, so either reading would
    silently run the wrong seeds for someone."""
    text = str(text).strip()
    if text.isdigit():
        count = int(text)
        fix = f"write 0-{count - 1} for {count} seeds (0 to {count - 1}), or " if count else "write "
        raise UsageError(f"--seeds {text}: a bare number is ambiguous; {fix}{count}-{count} for seed {count} alone")
    seeds: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        low, dash, high = part.partition("-")
        try:
            first, last = int(low), int(high if dash else low)
        except ValueError:
            raise UsageError(f"--seeds {text!r}: expected a range like 0-99 or a list like 0,3,7") from None
        if first < 0 or last < first or last > MAX_SEED:
            raise UsageError(f"--seeds {text!r}: a range needs 0 <= first <= last <= {MAX_SEED}, e.g. 0-99")
        # Counted range by range, so an absurd range is refused before it fills memory.
        if len(seeds) + last - first >= MAX_RUNS:
            raise UsageError(f"--seeds {text!r} asks for more than {MAX_RUNS} seeds; use at most {MAX_RUNS}")
        seeds.update(range(first, last + 1))
    return sorted(seeds)


def seeds_option(text: str) -> list[int]:
    """--seeds as every command takes it (parse_seeds), as an argparse type: one line, exit 2."""
    import argparse

    try:
        return parse_seeds(text)
    except UsageError as error:
        raise argparse.ArgumentTypeError(
            str(error).removeprefix(f"--seeds {text!r}: ").removeprefix(f"--seeds {text}: ")
        ) from None


def add_seeds_argument(parser: Parser, default: str = "0-2") -> None:
    parser.add_argument("--seeds", type=seeds_option, default=default, help=f"{SEEDS_HELP} (default {default})")


def add_settings_arguments(parser: Parser, default_out: str) -> None:
    """Seeds, runs folder and the training settings a command may override."""
    add_seeds_argument(parser)
    parser.add_argument("--out", type=out_path, help=f"runs folder (default {default_out})")
    add_training_flags(parser)


# Flags whose names differ from their TrainSettings field (the short forms documented since the start).
FLAG_NAMES = {"max_steps": "--steps"}


# Each training setting's flag, bounded as TrainSettings.validate bounds it (so a refusal comes while
# the arguments are parsed); the floats' tops are far beyond any toy's use, and finite.
BOUNDS = {
    "max_steps": Bounded(int, 1, 1_000_000, "steps; train caps a run there"),
    "batch_size": Bounded(int, 1, 65_536, "examples per step"),
    "eval_every": Bounded(int, 1, MAX_COUNT, "steps"),
    "stop_evals": Bounded(int, 1, MAX_COUNT, "evaluations"),
    "plateau_steps": Bounded(int, 1, MAX_COUNT, "steps"),
    "snapshot_every": Bounded(int, 0, MAX_COUNT, "steps; 0 = never"),
    "warmup_steps": Bounded(int, 0, MAX_COUNT, "steps; 0 = none"),
    "lr": Bounded(float, 0, 1, "a learning rate"),
    "weight_decay": Bounded(float, 0, 1e6, "AdamW's"),
    "stop_accuracy": Bounded(float, 0, 1e6, "a validation accuracy; above 1 never stops as solved"),
    "plateau_tolerance": Bounded(float, 0, 1e6, "an improvement"),
}
# A task parameter's flag: any finite float, any integer JSON keeps exactly; the task bounds its own.
PARAM_BOUNDS = {
    int: Bounded(int, -(2**53), 2**53, "an integer JSON keeps exactly"),
    float: Bounded(float, -1e308, 1e308),
}


def add_training_flags(parser: Parser) -> None:
    """One flag per TrainSettings field (default: the task's own setting, then toylens's)."""
    from enum import Enum
    from dataclasses import fields

    from tasks.settings import TrainSettings

    group = parser.add_argument_group("training settings (default: the task's, else toylens's)")
    for field in fields(TrainSettings):
        flag = FLAG_NAMES.get(field.name, "--" + field.name.replace("_", "-"))
        default = getattr(TrainSettings, field.name)
        if isinstance(default, Enum):
            group.add_argument(
                flag, dest=field.name, choices=[k.value for k in type(default)], help=f"toylens default {default.value}"
            )
        else:
            group.add_argument(flag, dest=field.name, type=BOUNDS[field.name], help=f"toylens default {default}")


def training_overrides(args) -> dict:
    """The training settings given on the command line."""
    from dataclasses import fields

    from tasks.settings import TrainSettings

    return {f.name: getattr(args, f.name) for f in fields(TrainSettings) if getattr(args, f.name, None) is not None}


def add_jobs_arguments(parser: Parser) -> None:
    parser.add_argument(
        "--jobs",
        type=jobs_number,
        default=default_jobs(),
        help="runs trained at a time, one process and one thread each (default: CPU cores)",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def add_executor_arguments(parser: Parser, executor_help: str, jobs: int, jobs_help: str) -> None:
    """--executor local|ray, --address and --jobs (default `jobs`), as toylens.sweeps.executors takes them."""
    parser.add_argument("--executor", choices=("local", "ray"), default="local", help=executor_help)
    parser.add_argument("--address", help="Ray cluster to use (default: RAY_ADDRESS, else a local Ray instance)")
    parser.add_argument("--jobs", type=jobs_number, default=jobs, help=jobs_help)


def check_address(args) -> None:
    """--address names a Ray cluster; with the local pool it would be silently ignored."""
    if args.address is not None and args.executor != "ray":
        raise UsageError(f"--address {args.address} names a Ray cluster: add --executor ray, or leave --address out")


def add_task_params(parser: Parser, task_cls: type[Task], defaults: dict | None = None) -> None:
    """One flag per field of the task's Params; `defaults` replaces some of the Params defaults."""
    params = parser.add_argument_group(f"{task_cls.name} task parameters")
    taken = {option for action in parser._actions for option in action.option_strings}
    dests = {action.dest for action in parser._actions} | {"command"}
    for field in dataclasses.fields(task_cls.Params):
        flag = "--" + field.name.replace("_", "-")
        if flag in taken or field.name in dests:
            raise UsageError(
                f"task plugin {task_cls.name!r}: Params field {field.name!r} would be the flag "
                f"{flag}, which is already a train option; rename the field"
            )
        kind = param_type(task_cls, field)
        default = (defaults or {}).get(field.name, field.default)
        if kind is bool:
            params.add_argument(flag, action="store_true", default=default)
        else:
            params.add_argument(flag, type=PARAM_BOUNDS.get(kind, kind), default=default, help=f"default {default}")


def task_from_args(task_cls: type[Task], args):
    if len(args.seeds) > MAX_SEEDS:
        raise UsageError(f"--seeds asks for {len(args.seeds)} seeds, which is absurd; use at most {MAX_SEEDS}")
    return build_task(task_cls, {f.name: getattr(args, f.name) for f in dataclasses.fields(task_cls.Params)})


def settings_from_args(task, args, model_name: str | None = None, **fixed):
    """The task's training settings, then its settings for `model_name` (when given), then `fixed`,
    then what the command line overrides."""
    from tasks.settings import model_settings

    return model_settings(task, model_name, {**fixed, **training_overrides(args)})


def model_list(text: str | None, flag: str = "--models") -> list[str] | None:
    """--models (or another list of names, e.g. --rungs) as names; absent means all of them, but an
    empty value is refused (it would silently mean all of them too)."""
    if text is None:
        return None
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise UsageError(
            f"{flag} {text!r} has an empty name; list names separated by commas, or leave {flag} out for all of them"
        )
    return names
