"""report.html: the report as one self-contained interactive page, rendered from the typed results
the report's parts measured (probes.report.parts.MeasuredRun) at its publish step, beside report.md.

What it shows per run: the summary row and the run's sentences; the edge graph as an SVG (layers as
rows, q/k/v inputs by colour and letter; hover an edge for its exact effect alone, what adding it to
the circuit does and each method's rank; click a head for its attention at the scored positions of
the example pairs); every head's attention on the example pairs; faithfulness against circuit size
(edge count, since MIB's smallest fractions round to 0 edges of a tiny graph) per method. Also the
summary tables and the training-dynamics figures (PNG data URIs); every table is sortable. (The
census page, census.html, is probes.report.outputs.census's, on the same common.html page.) The data
the views draw from is probes.report.outputs.html_data's.

The views are drawn by hand (assets/report.js, plain SVG) rather than with CircuitsVis: its
`attention_heads` needs its 1.3 MB React bundle per page, its notebook display first probes the
internet (a request to google.com) before choosing the inline bundle, and it has no notion of a
scored position, a counterfactual partner or Q/K/V inputs, which are what these views are for.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from common.html import escape, image_uri, json_script, page, sandboxed_frame, table
from probes.report.outputs.exports import slug
from probes.report.outputs.html_data import report_data
from probes.settings import ReportSettings


def asset(name: str) -> str:
    return resources.files("probes.report.outputs").joinpath("assets", name).read_text()


def summary_html(summary) -> str:
    parts = ['<ul class="note">' + "".join(f"<li>{escape(line)}</li>" for line in summary.legend) + "</ul>"]
    for t in summary.tables:
        parts.append(f'<h3 id="table-{escape(slug(t.model_name))}">{escape(t.model_name)}</h3>')
        parts.append(table(["seed", *t.columns], [list(r) for r in t.rows]))
        parts += [f'<p class="note">{escape(line)}</p>' for line in t.across_seeds]
    parts += [f'<p class="note">{escape(note)}</p>' for note in summary.notes]
    return "".join(parts)


def figures_html(folder: Path, pattern: str, title: str) -> str:
    figures = sorted((Path(folder) / "figures").glob(pattern))
    if not figures:
        return ""
    return (
        f'<section class="extra"><h2>{escape(title)}</h2>'
        + "".join(
            f'<figure><img alt="{escape(f.stem)}" src="{image_uri(f)}"><figcaption class="note">{escape(f.name)}'
            "</figcaption></figure>"
            for f in figures
        )
        + "</section>"
    )


def features_html(measured: list) -> str:
    """Each run's stored dictionaries (the features part): what they recover and, per recovering
    feature, the roles and tokens where it fires strongest."""
    from probes.features.stored import SHOWN, TOP
    from probes.report.feature_part import recovered_words, roles_text

    found = [m.results["features"] for m in measured if m.results.get("features") is not None]
    if not found:
        return ""
    headers = [
        "dictionary",
        "reads",
        "variable",
        "feature",
        "MCC",
        f"roles of its {TOP} strongest",
        f"tokens ({SHOWN})",
    ]
    body = "".join(
        f"<h3>{escape(f.run)}</h3><p class='note'>{escape(recovered_words(f))}.</p>"
        + table(
            headers,
            [
                [
                    e.dictionary,
                    e.hook,
                    e.variable,
                    f"f{e.feature}",
                    f"{e.mcc:.2f}",
                    roles_text(e.roles),
                    ", ".join(e.tokens),
                ]
                for e in f.examples
            ],
        )
        + feature_circuit_html(f.traced)
        for f in found
    )
    return f'<section class="extra" id="features"><h2>Features (stored dictionaries)</h2>{body}</section>'


def feature_circuit_html(traced) -> str:
    """The feature circuit's strongest edges into the logits (the whole graph: report.md's appendix)."""
    from probes.features.render import feature_edge_rows, logit_rows

    if traced is None:
        return ""
    c = traced.circuit
    return (
        f"<p class='note'>Feature circuit through {escape(', '.join(c.dictionaries))} on {c.pairs} held-out pairs "
        f"(share of the clean - counterfactual gap; with the error nodes the logits match the model's to "
        f"{c.spliced_error:.1e}):</p>"
        + table(["sender -> logits", "exact", "EAP", "reads as (variable, MCC)"], logit_rows(traced))
        + (
            table(["sender", "receiver", "activation change", "sender reads as", "receiver reads as"], edges)
            if (edges := feature_edge_rows(traced))
            else ""
        )
    )


def views_html(data: dict, summary_block: str = "", extra: str = "", first: str = "") -> str:
    """The body that assets/report.js fills: `first` (the finding), navigation, the summary, one
    panel per run."""
    return (
        f'{first}<nav id="nav"></nav><section id="summary" class="panel">{summary_block}</section>'
        f'<section id="run" class="panel"></section>{extra}{json_script("report-data", data)}'
    )


def report_page(data: dict, title: str, summary_block: str, extra: str = "", first: str = "") -> str:
    return page(
        title,
        views_html(data, summary_block, extra, first),
        style=asset("report.css"),
        script=asset("report.js"),
        heading='<p class="note">Self-contained: every script, style, number and image is in this file.</p>',
    )


def write_html(measured: list, sections: dict, out: Path, task: str, settings: ReportSettings) -> Path:
    """report.html in `out` (beside report.md; the dynamics figures already drawn into out/figures)."""
    from common.atomic import atomic_write
    from probes.report.summary import summary_of

    from probes.report.finding import FIGURE, finding_html, finding_of

    data = report_data(measured, sections, task, settings)
    extra = figures_html(out, "dynamics_*.png", "Training dynamics") + features_html(measured)
    first = finding_html(finding_of(measured, settings), Path(out) / FIGURE)
    text = report_page(data, f"Circuit report: {task}", summary_html(summary_of(sections)), extra, first)
    path = Path(out) / "report.html"
    atomic_write(path, lambda temp: Path(temp).write_text(text))
    return path


def run_views(run, settings: ReportSettings | None = None) -> str:
    """One run's views for a notebook cell (`IPython.display.HTML(run_views(run))`): its parts
    measured here, the same page as report.html with this run alone, in a sandboxed iframe that keeps the
    page's script and styles apart from the notebook's (common.html.sandboxed_frame). Nothing is written beside the run."""
    import tempfile

    from probes.report.measure import measure_run, render_parts
    from probes.settings import DEFAULT

    import torch

    settings = settings or DEFAULT
    threads = torch.get_num_threads()
    # One thread, as the report's workers: on these tiny models torch's default threads only hand
    # work back and forth (205 s against 28-41 s for one run in the notebook, measured).
    torch.set_num_threads(1)
    try:
        measured = [measure_run(run, None, settings)]
        with tempfile.TemporaryDirectory() as scratch:  # a part that draws (dynamics) draws here
            sections = render_parts(measured, Path(scratch), settings)
            data = report_data(measured, sections, run.task.name, settings)
    finally:
        torch.set_num_threads(threads)
    frame = page(
        f"{run.model_name} seed {run.seed}", views_html(data), style=asset("report.css"), script=asset("report.js")
    )
    return sandboxed_frame(frame, "width:100%;height:1400px;border:0")
