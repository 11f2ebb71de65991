"""`toylens census SWEEP_DIR`: a sweep's circuit census counted (probes.census), printed,
and written into its census folder (probes.report.outputs.census)."""

from __future__ import annotations

from pathlib import Path

from common.cli import Parser, UsageError, folder_path, out_path, run_cli
from probes.census import take_census
from probes.report.outputs.census import summary_lines, write_census


def census_command(runs_dir: Path, out: Path | None = None) -> None:
    from common.lock import folder_lock

    if not Path(runs_dir).is_dir():
        raise UsageError(
            f"sweep folder {runs_dir} does not exist; run a sweep first, e.g. "
            "python -m tasks.winograd sweep --out runs/sweeps/winograd"
        )
    out = Path(out or Path(runs_dir) / "census")
    with folder_lock(runs_dir, "sweep folder"), folder_lock(out.parent, "census's parent folder"):
        census = take_census(runs_dir)
        written = write_census(census, out)
    print("\n".join(summary_lines(census)))
    print(f"\nwrote {written} and {written.with_suffix('.html').name}")


def main(argv=None) -> None:
    parser = Parser(
        prog="toylens census",
        description="Count the circuits of a sweep's runs per model and grid point, with 95% intervals.",
    )
    parser.add_argument("runs_dir", type=folder_path, help="a sweep folder (e.g. runs/sweeps/winograd)")
    parser.add_argument(
        "--out", type=out_path, default=None, help="where census.md/json/png go (default RUNS_DIR/census)"
    )
    args = parser.parse_args(argv)
    run_cli(census_command, args.runs_dir, args.out)
