"""`toylens results RUNS_DIR [RUNS_DIR ...] --out docs/results`: the results pages.

Every number on a page is read from what the runs stored, never typed, so a page cannot drift from
the code that measured it: regenerate it rather than edit it. A family's runs folder (trained by
`toylens train TASK --report`) gives OUT/<task>.md: the accuracy comparison (each run's
metrics.json), the circuit report's summary and figures (RUNS_DIR/report/report.json). A sweep's
folder (`toylens sweep TASK`) gives OUT/census-<task>.md, the circuit census of its runs.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import re
import shlex
import shutil
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from common.cli import UsageError
from common.atomic import atomic_write
from common.ownership import claim_check
from common.cli import path_name
from common.jsonfiles import check_fields
from common.store import read_json
from common.ownership import remove
from probes.report.document import md_table
from probes.report.words import pct, shuffle_text

REPORT = Path("report") / "report.json"
POINT = "point.json"  # written by a sweep beside each grid point's runs
FIGURES = "figures"
EDGES = Path("edges") / "edges.md"  # written by toylens edges RUNS_DIR
MAX_TEXT_BYTES = 4 * 1024 * 1024
SPEC_SHOWN = ("n_layers", "d_model", "n_heads", "attention", "positions", "mlp", "norm")


@dataclass(frozen=True)
class Page:
    name: str  # the page's file name in OUT
    markdown: str
    figures: tuple[tuple[str, Callable], ...] = ()  # (name in the page's figure folder, write(temp_path))

    @property
    def figure_folder(self) -> str:
        """Relative to OUT: each page's figures in a folder of their own, so a page's stale ones can go."""
        return f"{FIGURES}/{Path(self.name).stem}"


# ---- reading what the runs stored -------------------------------------------------------------


@dataclass(frozen=True)
class StoredReport:
    """The parts of report.json a page shows, type-checked."""

    task: str
    summary: tuple[str, ...]
    runs: tuple[tuple[str, int], ...]  # (model, seed) of every run the report analysed
    figures: tuple[tuple[str, str], ...]  # (caption, path relative to the report folder)


def read_report(runs_dir: Path) -> StoredReport:
    """The report's summary, the runs it analysed and the figures a page shows: each model's first
    traced seed (the other seeds' are in the report) and every edge circuit."""
    path = Path(runs_dir) / REPORT
    fix = f"write it with python -m probes.circuit report {runs_dir}"
    if not path.is_file():
        raise UsageError(f"{path} does not exist; {fix}")
    data = read_json(path, fix)
    if not isinstance(data, dict):
        raise UsageError(f"{path} must be a JSON object; {fix}")
    summary = data.get("summary")
    if not isinstance(data.get("task"), str) or not (
        isinstance(summary, list) and all(isinstance(s, str) for s in summary)
    ):
        raise UsageError(f"{path}: task (a string) or summary (a list of strings) is missing or wrong; {fix}")
    runs, edges = entries(data, "runs", path, fix), entries(data, "edge_circuits", path, fix)
    if not runs:
        raise UsageError(f"{path}: runs must be a non-empty list; {fix}")
    first = {}
    for model, seed, figure in runs:
        if figure and model not in first:
            first[model] = (f"{model} seed {seed}", figure)
    from probes.report.finding import FIGURE as LADDER

    # The report's opening figure (probes.report.finding) is a file beside report.json, not an entry in it.
    ladder = [("held-out accuracy of every model (the ladder)", LADDER)] if (path.parent / LADDER).is_file() else []
    figures = [
        *ladder,
        *first.values(),
        *((f"{model} seed {seed}, edge circuit", figure) for model, seed, figure in edges if figure),
    ]
    return StoredReport(data["task"], tuple(summary), tuple((m, s) for m, s, _ in runs), tuple(figures))


def entries(data: dict, key: str, path: Path, fix: str) -> list[tuple[str, int, str | None]]:
    """(model, seed, figure) of each entry of report.json's list `key` (absent: none)."""
    items = data.get(key) or []
    if not isinstance(items, list):
        raise UsageError(f"{path}: {key} must be a list; {fix}")
    out = []
    for index, item in enumerate(items):
        where = f"{path}: {key}[{index}]"
        if not isinstance(item, dict):
            raise UsageError(f"{where} must be a JSON object; {fix}")
        fields = check_fields(
            {k: item.get(k) for k in ("model_name", "seed", "figure")},
            {"model_name": str, "seed": int, "figure": str},
            where,
            fix,
            nullable=("figure",),
        )
        figure = fields["figure"] and figure_path(fields["figure"], where, fix)
        out.append((fields["model_name"], fields["seed"], figure))
    return out


def figure_path(text: str, where: str, fix: str) -> str:
    """A figure the report wrote into its own figures/ folder; anything else (an absolute path,
    `..`) would copy a file the report did not write."""
    parts = Path(text).parts
    if len(parts) != 2 or parts[0] != FIGURES or not text.endswith(".png") or parts[1].startswith("."):
        raise UsageError(f"{where}: figure {text!r} is not a figures/NAME.png of the report; {fix}")
    return text


# ---- a family's page ----------------------------------------------------------------------------


def steps_text(runs) -> str:
    """Steps per stop reason, e.g. '125-800 (validation solved)'."""
    by_reason = defaultdict(list)
    for run in runs:
        by_reason[run.metrics["stop_reason"]].append(run.metrics["steps"])
    return "; ".join(
        f"{min(s)}" + (f"-{max(s)}" if max(s) != min(s) else "") + f" ({reason})" for reason, s in by_reason.items()
    )


def interval_text(interval) -> str:
    if math.isnan(interval.low):  # one seed has no interval
        return pct(interval.value, 1)
    return f"{pct(interval.value, 1)} [{pct(interval.low, 1)}, {pct(interval.high, 1)}]"


def accuracy_section(models, runs) -> str:
    from probes.report.render import health_lines

    rows = []
    for m in models:
        seeds = ", ".join(pct(r.splits["heldout"].accuracy.value, 1) for r in m.runs)
        mine = [run for run in runs if run.model_name == m.model_name]
        rows.append(
            [
                m.model_name,
                len(m.seeds),
                interval_text(m.heldout),
                seeds,
                pct(m.heldout_foil_rate.value, 1),
                pct(m.train.value, 1),
                shuffle_text(m.shuffle_max_logit_change),
                steps_text(mine),
            ]
        )
    sizes = sorted({r.splits["heldout"].n for m in models for r in m.runs})
    n = f"{sizes[0]:,}" if len(sizes) == 1 else f"{sizes[0]:,}-{sizes[-1]:,}"
    table = md_table(
        [
            "model",
            "seeds",
            "held-out, mean [95% t interval over seeds]",
            "per seed",
            "wrong answer (foil), mean",
            "train, mean",
            "shuffle max abs dlogit",
            "steps (stop reason)",
        ],
        rows,
    )
    health = "".join(f"\n\n{line.strip()}" for line in health_lines(models))
    return (
        f"Held-out accuracy at the scored positions, n = {n} per run (each run's metrics.json, measured "
        "after training; per-seed Wilson intervals are in `toylens accuracy RUNS_DIR`). The "
        "shuffle test permutes each held-out prefix before the scored position and reports the largest "
        f"change of a scored logit (0 = order-blind).\n\n{table}{health}"
    )


def setup_section(runs, order: list[str]) -> str:
    """The task's parameters, the training settings and each model's spec, as config.json records them."""

    def settings(key):
        # The distinct values, told apart by their JSON text: dicts do not hash.
        values = {
            json.dumps(value, sort_keys=True): value
            for value in (run.config[key]["params"] if key == "task" else run.config[key] for run in runs)
        }
        return "; ".join(
            ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "(none)" for value in values.values()
        )

    specs = {run.model_name: run.spec for run in runs}
    rows = [[name] + [getattr(specs[name], key) for key in SPEC_SHOWN] for name in order]
    return f"Task parameters: {settings('task')}.\n\nTraining settings: {settings('training')}.\n\n" + md_table(
        ["model", *SPEC_SHOWN], rows
    )


def family_page(runs_dir: Path, made_by: str) -> Page:
    from probes.accuracy import compare_runs
    from tasks.training.runs import find_runs

    runs_dir = Path(runs_dir)
    runs = find_runs(runs_dir)
    report = read_report(runs_dir)
    found = {(run.model_name, run.seed) for run in runs}
    if set(report.runs) != found:
        raise UsageError(
            f"{runs_dir / REPORT} analysed other runs than {runs_dir} holds "
            f"({len(report.runs)} against {len(found)}); rewrite it with python -m probes.circuit "
            f"report {runs_dir}"
        )
    task = runs[0].task
    if report.task != task.name:
        raise UsageError(
            f"{runs_dir / REPORT} is a report of task {report.task!r}, the runs are {task.name!r}; "
            f"rewrite it with python -m probes.circuit report {runs_dir}"
        )
    figures = tuple((Path(path).name, copier(runs_dir / "report" / path)) for _, path in report.figures)
    models = compare_runs(runs_dir)
    accuracy = accuracy_section(models, runs)
    text = [
        f"# Results: {task.name}",
        "",
        f"Made by `{made_by}` from the {len(runs)} runs in `{runs_dir}` and their circuit report "
        f"(`{runs_dir / REPORT}`); every number below is read from those files. Regenerate this page "
        "rather than edit it.",
        "",
        trained_with(runs),
        "",
        "## Setup",
        "",
        task_words(task),
        "",
        setup_section(runs, [m.model_name for m in models]),
        "",
        "## Accuracy",
        "",
        accuracy,
        "",
        "## The circuit report's summary",
        "",
        "Each line as the report states it; the report's own header (`report/report.md`) gives the "
        "examples each number is measured on and its scale.",
        "",
        *[f"- {line}" for line in report.summary if line not in accuracy],
        "",
    ]
    page = Page(f"{task.name}.md", "", figures)
    if figures:
        text += [
            "## Figures",
            "",
            "Each model's first traced seed (the other seeds' figures are in the report) and every edge circuit.",
            "",
        ]
        for (caption, _), (target, _) in zip(report.figures, figures):
            text += [f"![{caption}]({page.figure_folder}/{target})", ""]
    return dataclasses.replace(page, markdown="\n".join(text))


def trained_with(runs) -> str:
    commands = dict.fromkeys(run.config.get("command", "(not recorded)") for run in runs)
    return "The runs were trained with " + ", ".join(f"`{c}`" for c in commands) + "."


def task_words(task) -> str:
    """The task plugin's own description: its class docstring, then its module's."""
    parts = [inspect.getdoc(type(task)), inspect.getdoc(inspect.getmodule(type(task)))]
    return "\n\n".join(part for part in parts if part) or f"Task {task.name!r} (no description in its module)."


def copier(source: Path) -> Callable:
    if source.is_symlink() or not source.is_file():
        raise UsageError(f"{source} is not a figure file the report wrote; rewrite the report")
    return lambda temp: shutil.copyfile(source, temp)


# ---- a family's edge-method comparison -------------------------------------------------------------


def edges_page(path: Path, task: str, made_by: str) -> Page:
    """What `toylens edges RUNS_DIR` wrote (RUNS_DIR/edges/edges.md: every number measured by
    that command), with the figures it links."""
    fix = f"rewrite it with toylens edges {path.parent.parent}"
    text = read_text(path, fix)
    name = f"{task}-edges"
    links = sorted(set(re.findall(r"\]\((figures/[^)]+)\)", text)))
    figures = tuple((Path(figure_path(link, str(path), fix)).name, copier(path.parent / link)) for link in links)
    body = text.replace("](figures/", f"]({FIGURES}/{name}/")
    title, rest = body.split("\n", 1) if body.startswith("# ") else ("# Edge circuits", body)
    header = (
        f"Made by `{made_by}` from `{path}`, which `toylens edges {path.parent.parent}` wrote; every "
        "number below is that command's. Regenerate this page rather than edit it. What each column means: "
        "[edges.md](../edges.md)."
    )
    return Page(f"{name}.md", "\n".join([f"{title}: {task}", "", header, rest]), figures)


def read_text(path: Path, fix: str) -> str:
    if path.stat().st_size > MAX_TEXT_BYTES:
        raise UsageError(f"{path} is larger than any page toylens writes ({MAX_TEXT_BYTES} bytes); {fix}")
    try:
        return path.read_text()
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text; {fix}") from None


# ---- a sweep's page ---------------------------------------------------------------------------


def census_page(runs_dir: Path, made_by: str) -> Page:
    from probes.census import take_census
    from probes.report.outputs.census import TIMELINE_FIGURE, draw, draw_timeline, markdown
    from tasks.training.runs import find_runs

    runs_dir = Path(runs_dir)
    census = take_census(runs_dir)
    groups = census.groups
    runs = find_runs(runs_dir, family=False)  # the sweep's points repeat models, seeds and task variants
    task = runs[0].task.name
    name = f"census-{path_name(runs_dir.resolve().name, 'sweep folder')}"  # one page per sweep, named by its folder
    figure = "census.png"
    timeline = any(g.timeline is not None and g.timeline.runs for g in groups)
    title, body = markdown(
        census, f"{FIGURES}/{name}/{figure}", f"{FIGURES}/{name}/{TIMELINE_FIGURE}" if timeline else None
    ).split("\n", 1)
    text = "\n".join(
        [
            f"{title}: {task}",
            "",
            f"Made by `{made_by}` from the sweep in `{runs_dir}` ({sum(g.finished for g in groups)} "
            "finished runs); every number below is read from its runs' stored files. Regenerate "
            "this page rather than edit it.",
            "",
            trained_with(runs),
            body,
        ]
    )
    figures = ((figure, lambda temp: draw(census, Path(temp))),) + (
        ((TIMELINE_FIGURE, lambda temp: draw_timeline(census, Path(temp))),) if timeline else ()
    )
    return Page(f"{name}.md", text, figures)


def is_sweep(runs_dir: Path) -> bool:
    return any(Path(runs_dir).glob(f"*/{POINT}"))


# ---- writing ------------------------------------------------------------------------------------


def write_pages(pages: list[Page], out: Path) -> list[Path]:
    from common.ownership import claim_check

    out = Path(out)
    for target in [out / p.name for p in pages] + [
        out / p.figure_folder / name for p in pages for name, _ in p.figures
    ]:
        claim_check(target)  # refuse before anything is written
    written = []
    for page in pages:
        folder = out / page.figure_folder
        kept = {name for name, _ in page.figures}
        for name, write in page.figures:
            atomic_write(folder / name, write)
        for old in folder.glob("*.png"):  # a figure an earlier page showed and this one does not
            if old.name not in kept:
                remove(old)
        atomic_write(out / page.name, lambda temp, page=page: Path(temp).write_text(page.markdown + "\n"))
        written.append(out / page.name)
    return written


def pages_of(runs_dir: Path, made_by: str) -> list[Page]:
    if is_sweep(runs_dir):
        return [census_page(runs_dir, made_by)]
    family = family_page(runs_dir, made_by)
    edges = Path(runs_dir) / EDGES
    return [family] + ([edges_page(edges, Path(family.name).stem, made_by)] if edges.is_file() else [])


def results_command(runs_dirs: list[Path], out: Path, made_by: str) -> None:
    pages = [page for d in runs_dirs for page in pages_of(d, made_by)]
    names = [p.name for p in pages]
    if len(set(names)) < len(names):
        raise UsageError(
            f"two of these folders would write the same page ({names}); give one folder per task "
            "and kind (a family, a sweep)"
        )
    for page in pages:  # a user's file of a page's name: refused before any page is written
        claim_check(Path(out) / page.name)
    for path in write_pages(pages, out):
        print(f"wrote {path}")


def main(argv=None) -> None:
    from common.cli import Parser, run_cli
    from common.cli import folder_path, out_path

    argv = sys.argv[1:] if argv is None else argv
    parser = Parser(
        prog="toylens results",
        description="Write results pages (markdown + figures) from trained runs and their reports.",
    )
    parser.add_argument(
        "runs_dirs", type=folder_path, nargs="+", help="a family's runs folder (with its report) or a sweep's folder"
    )
    parser.add_argument("--out", type=out_path, default=Path("docs/results"), help="default docs/results")
    args = parser.parse_args(argv)
    made_by = shlex.join(["toylens", "results", *argv])
    run_cli(results_command, args.runs_dirs, args.out, made_by)
