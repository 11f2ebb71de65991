"""`toylens COMMAND [ARGS]` (or `python -m toylens COMMAND [ARGS]`): the one entry to every command.
The user's two documented forms, `python -m tasks.winograd train` and `python -m probes.circuit report`,
are thin aliases that hand their arguments to the same `main` as `toylens train winograd` and
`toylens report`, so the forms never differ. No other module is runnable with `python -m`
(tests/test_commands.py). benchmarks/verify_report.py stays a script: it is the outside verifier,
written against the stored files without toylens's code, so it cannot live in the package it checks."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass

from common.cli import entry


@dataclass(frozen=True)
class Command:
    module: str  # whose main() serves it
    summary: str
    prefix: tuple[str, ...] = ()  # arguments that main() expects before the user's


COMMANDS = {
    "list": Command("toylens.cli", "registered tasks (built-in and plugins)", ("list",)),
    "train": Command("toylens.cli", "train a task's model family: toylens train NAME [options]", ("train",)),
    "sweep": Command(
        "toylens.cli",
        "train and trace runs over seeds and a grid, then count their circuits: toylens sweep NAME [options]",
        ("sweep",),
    ),
    "report": Command("toylens.report", "trace the circuits of a runs folder into RUNS_DIR/report/", ("report",)),
    "results": Command(
        "probes.report.outputs.results",
        "the results pages (docs/results) from runs folders "
        "and sweeps: toylens results RUNS_DIR [RUNS_DIR ...] --out docs/results",
    ),
    "export": Command(
        "toylens.export",
        "MIB circuit files and attribution scores of a runs folder: toylens export mib|attribution RUNS_DIR; "
        "a run as a Hugging Face checkpoint: toylens export hf RUN_DIR --out DIR",
    ),
    "preflight": Command(
        "toylens.preflight", "check a local Hugging Face folder's hooks intervene: toylens preflight PATH"
    ),
    "screenshots": Command("toylens.screenshots", "PNG screenshots of a report.html, through Chromium"),
    "edges": Command("toylens.edges", "edge circuits by the exact oracle, EAP, EAP-IG and ACDC, with MIB files"),
    "leaderboard": Command(
        "toylens.leaderboard",
        "every edge method x ablation on the ground-truth models, scored and "
        "timed: docs/results/leaderboard.md and .html",
    ),
    "accuracy": Command("toylens.accuracy", "the accuracy comparison of a runs folder, with CIs over seeds"),
    "features": Command("toylens.features", "TopK SAEs and transcoders per run, graded against the planted variables"),
    "census": Command("toylens.census", "count the circuits of a sweep's runs"),
    "dynamics": Command("probes.report.dynamics", "replay training snapshots: phase change, head scores"),
    "ladder": Command("toylens.chapter.ladder", "the chapter's ablation ladder on a task"),
    "positions": Command("toylens.chapter.positions", "the chapter's positional encodings at longer lengths"),
    "scaling": Command("toylens.chapter.scaling", "the chapter's score scaling (sqrt(d_k)) experiments"),
    "params": Command("probes.chapter.params", "parameter counts per block (the chapter's 12d^2+13d)"),
    "norms": Command("toylens.chapter.norms", "the chapter's pre-norm vs post-norm table, with and without warmup"),
    "equalities": Command("probes.chapter.equalities", "the chapter's head and averaging equalities, printed"),
    "cost": Command("probes.chapter.cost", "attention's time and memory against sequence length"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = ["usage: toylens COMMAND [ARGS]   (toylens COMMAND --help for a command's options)", ""]
    return "\n".join(lines + [f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()])


def main(argv=None) -> None:
    entry(lambda: dispatch(argv), program=argv is None)  # the console script and `python -m toylens`


def dispatch(argv) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return
    command = COMMANDS.get(argv[0])
    if command is None:
        print(f"error: unknown command {argv[0]!r}; one of: {', '.join(COMMANDS)} (toylens --help)", file=sys.stderr)
        raise SystemExit(2)
    importlib.import_module(command.module).main([*command.prefix, *argv[1:]])
