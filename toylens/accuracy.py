"""`toylens accuracy [RUNS_DIR]`: the accuracy comparison of a runs folder, printed, and its
summary.json written (the measurements are probes.accuracy's)."""

from __future__ import annotations

from pathlib import Path

from common.cli import Parser, run_cli
from probes.accuracy import SUMMARY, compare_runs, write_summary


def compare_runs_command(runs_dir: Path) -> list:
    from models.checkpoint import CONFIG
    from probes.report.render import accuracy_table

    models = compare_runs(runs_dir)
    print(accuracy_table(models))
    print("(as measured after training; each run's weights were loaded and re-scored on held-out to check)")
    if (Path(runs_dir) / CONFIG).is_file():  # one run's own folder: summaries belong to runs folders
        print(f"\n{runs_dir} is a single run's folder; no {SUMMARY} written (point at its runs folder for one)")
        return models
    print(f"\nwrote {write_summary(runs_dir, models)}")
    return models


def locked_compare(runs_dir: Path, strict: bool = False) -> None:
    from common.lock import folder_lock
    from models.checkpoint import CONFIG
    from probes.health import strict_exit

    if not Path(runs_dir).is_dir() or (Path(runs_dir) / CONFIG).is_file():
        models = compare_runs_command(runs_dir)  # says what is wrong, or reads one run and writes nothing
    else:
        with folder_lock(runs_dir, "runs folder"):
            models = compare_runs_command(runs_dir)
    if strict:
        strict_exit(models)


def main(argv=None) -> None:
    from common.cli import folder_path
    from tasks.training.sweeps import runs_folder

    parser = Parser(
        prog="toylens accuracy", description="Compare held-out accuracy of trained runs, with CIs over seeds."
    )
    parser.add_argument("runs_dir", type=folder_path, nargs="?", default=Path("runs/winograd"))
    parser.add_argument(
        "--strict", action="store_true", help="exit with status 1 when the shortcut audit fails or is inconclusive"
    )
    args = parser.parse_args(argv)
    run_cli(lambda: locked_compare(runs_folder(args.runs_dir), args.strict))
