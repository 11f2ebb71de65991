"""`python -m probes.circuit report [RUNS_DIR]` (and `train --report`): analyse every run of a task,
several at a time, and write one report."""

from __future__ import annotations

from pathlib import Path

from models.spec import Attention
from probes.settings import ReportSettings


def analysis_cost(run) -> int:
    """Rough relative cost of analysing a run: patching grows with heads x layers (and MLPs)."""
    spec = run.spec
    if spec.attention == Attention.UNIFORM:
        return 1
    return spec.n_layers**2 * spec.n_heads * (2 if spec.mlp else 1)


def measure_for_report(run, out: Path, device: str | None = None, settings: ReportSettings | None = None):
    """Everything the report needs from one run (probes.report.parts.MeasuredRun), its figure drawn here so
    the workers share the drawing too. With `settings` None, the report's (`probes.settings.DEFAULT`)."""
    from probes.report.measure import measure_run
    from probes.settings import DEFAULT

    return measure_run(run, out, settings or DEFAULT, device=device)


def report_command(
    runs_dir: Path,
    out: Path | None,
    jobs: int = 1,
    device: str | None = None,
    verbose: bool = False,
    settings: ReportSettings | None = None,
) -> None:
    """With `settings` None, the report's (`probes.settings.DEFAULT`), measured and written with."""
    from contextlib import ExitStack
    from functools import partial

    from common.cli import UsageError
    from common.atomic import staging
    from common.ownership import check_publishable
    from common.lock import folder_lock
    from models.checkpoint import CONFIG
    from probes.accuracy import family_order
    from probes.settings import DEFAULT
    from tasks.training.runs import find_runs
    from tasks.training.sweeps import runs_folder
    from toylens.workers import map_jobs

    runs_dir = runs_folder(runs_dir)  # a sweep's only grid point, or refused in one line
    settings = settings or DEFAULT
    out = Path(out or Path(runs_dir) / "report")
    # One writer at a time: the runs folder (training would change what is read) and the folder
    # the report is swapped into.
    with ExitStack() as locks:
        if Path(runs_dir).is_dir() and not Path(runs_dir).is_symlink():
            locks.enter_context(folder_lock(runs_dir, "runs folder"))
        runs = find_runs(runs_dir)
        if out.parent.resolve() != Path(runs_dir).resolve():
            locks.enter_context(folder_lock(out.parent, "report's parent folder"))
        order = family_order(runs)
        runs = sorted(runs, key=lambda run: (order.index(run.model_name), run.seed))
        if (out / CONFIG).exists():  # a run's manifest lists all its files, so check_publishable would pass it
            raise UsageError(
                f"report folder {out} is a run folder; the report would replace the run: choose another --out"
            )
        check_publishable(out, "report folder")
        with staging(out) as staged:
            measured = map_jobs(
                partial(measure_for_report, out=staged, device=device, settings=settings),
                runs,
                jobs,
                f"analysing {len(runs)} runs, {min(jobs, len(runs))} at a time",
                cost=analysis_cost,
            )
            publish_report(measured, out, task=runs[0].task.name, staged=staged, verbose=verbose, settings=settings)


def publish_report(
    measured: list,
    out: Path,
    task: str,
    staged: Path | None = None,
    verbose: bool = False,
    settings: ReportSettings | None = None,
) -> None:
    """Write and summarise the report from each run's `measure_for_report` result (in report order):
    report.md, report.json and report.html. With `staged` (the folder the runs' figures were drawn
    into), the report is completed there and then swapped in for `out` as a whole, so no reader sees
    a half-written or mixed report. The terminal gets the summary tables; `verbose` adds every
    part's sentences. With `settings` None, the report's (`probes.settings.DEFAULT`)."""
    from common.atomic import publish_folder
    from probes.report.measure import render_parts
    from probes.report.document import write_report
    from probes.report.outputs.exports import write_report_mib
    from probes.report.outputs.html import write_html
    from probes.report.summary import summary_of, terminal_lines
    from probes.settings import DEFAULT

    settings = settings or DEFAULT
    folder = Path(staged or out)
    sections = render_parts(measured, folder, settings)
    written = [
        write_report(measured, sections, folder, task, settings),
        write_html(measured, sections, folder, task, settings),
    ]
    write_report_mib(measured, folder, settings)
    if staged is not None:
        publish_folder(staged, out)
        written = [Path(out) / path.relative_to(folder) for path in written]
    if verbose:
        print("\n".join(line for section in sections.values() for line in section.summary) + "\n")
    print("\n".join(terminal_lines(summary_of(sections))))
    markdown, html = written
    print(f"\nwrote {markdown} and {html.name} ({html.stat().st_size / 1024:.0f} KiB, self-contained)")


def main(argv=None) -> None:
    from common.cli import Parser, device_name, jobs_number, run_cli
    from common.cli import folder_path, out_path
    from toylens.workers import default_jobs

    parser = Parser(prog="toylens", description="Trace which heads, at which positions, decide a task's answer.")
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser(
        "report",
        help="analyse every run in RUNS_DIR and write RUNS_DIR/report/",
        epilog="A local Hugging Face checkpoint instead: python -m probes.circuit report --model PATH --task NAME "
        "(its own --help; docs/byom.md).",
    )
    report.add_argument(
        "runs_dir",
        type=folder_path,
        nargs="?",
        default=Path("runs/winograd"),
        help="a task's runs folder (default: runs/winograd)",
    )
    report.add_argument("--out", type=out_path, default=None, help="report folder (default: RUNS_DIR/report)")
    report.add_argument(
        "--jobs",
        type=jobs_number,
        default=default_jobs(),
        help="runs analysed at a time, each in its own process (default: the CPU cores)",
    )
    report.add_argument(
        "--device",
        type=device_name,
        default=None,
        help="where the models run: cpu (default), cuda, cuda:N or mps; the numbers are the same up to float rounding",
    )
    report.add_argument("--verbose", action="store_true", help="print every part's sentences above the tables")
    args = parser.parse_args(argv)
    run_cli(report_command, args.runs_dir, args.out, args.jobs, args.device, args.verbose)
