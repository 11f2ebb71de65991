"""report.html: the report as one self-contained interactive page, rendered from the typed results
the report's parts measured (probes.report.parts.MeasuredRun) at its publish step, beside report.md.

What it shows per run: the summary row and the run's sentences; the edge graph as an SVG (layers as
rows, q/k/v inputs by colour and letter; hover an edge for its exact effect alone, what adding it to
the circuit does and each method's rank; click a head for its attention at the scored positions of
the example pairs); every head's attention on the example pairs; faithfulness against circuit size
(edge count, since MIB's smallest fractions round to 0 edges of a tiny graph) per method. Also the
summary tables and the training-dynamics figures (PNG data URIs); every table is sortable. (The
census page, census.html, is probes.report.outputs.census's, on the same common.html page.)

The views are drawn by hand (assets/report.js, plain SVG) rather than with CircuitsVis: its
`attention_heads` needs its 1.3 MB React bundle per page, its notebook display first probes the
internet (a request to google.com) before choosing the inline bundle, and it has no notion of a
scored position, a counterfactual partner or Q/K/V inputs, which are what these views are for.
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path

from common.html import escape, image_uri, json_script, page, sandboxed_frame, table
from probes.report.outputs.exports import slug
from probes.settings import ReportSettings

DECIMALS = 3  # attention weights and shares in the page's data: enough for any view of them


def asset(name: str) -> str:
    return resources.files("probes.report.outputs").joinpath("assets", name).read_text()


def rounded(values, digits: int = DECIMALS):
    """Rounded for the page; a share of a zero gap (NaN) becomes null, shown as n/a."""
    if isinstance(values, (list, tuple)):
        return [rounded(v, digits) for v in values]
    return round(float(values), digits) if math.isfinite(values) else None


def run_id(model_name: str, seed: int) -> str:
    return slug(f"{model_name}-seed{seed}")


# ---- one run's data ------------------------------------------------------------------------


def main_path(edges: list[dict]) -> list[str]:
    """The circuit's main path: of the circuit's chains of edges that end at the logits, the one whose
    weakest edge carries the most alone (a chain is only as strong as its weakest link)."""
    into: dict[str, list[dict]] = {}
    for e in edges:
        if e["in"]:
            into.setdefault(e["r"], []).append(e)
    best: dict[str, tuple[float, list[str]]] = {}

    def widest(node: str) -> tuple[float, list[str]]:
        # the widest chain from any source to `node`; a node nothing in the circuit feeds starts one
        if node not in best:
            chains = [
                (min(abs(e["alone"] or 0), widest(e["s"])[0]), [*widest(e["s"])[1], e["id"]])
                for e in into.get(node, [])
            ]
            best[node] = max(chains, key=lambda c: c[0]) if chains else (float("inf"), [])
        return best[node]

    return widest("logits")[1]


def graph_data(edge_run) -> dict | None:
    """The edge graph with every edge's exact effect, its place in the oracle ranking and each
    method's rank; None when the run's edges were not traced."""
    from models.graph import Head, Logits, MLP
    from probes.circuits.faithfulness import ranked

    if edge_run is None:
        return None
    result = edge_run.result
    graph, oracle, smallest = result.graph, result.oracle, result.circuit
    alone = oracle.normalised().tolist()
    circuit = set(smallest.edges or ())
    orders = {
        m.scores.method: {e: i + 1 for i, e in enumerate(ranked(graph.edges, m.scores.score))} for m in result.methods
    }
    oracle_rank = orders[result.methods[0].scores.method]
    every = smallest.every_k

    def kind(node):
        return (
            "head"
            if isinstance(node, Head)
            else "mlp"
            if isinstance(node, MLP)
            else "logits"
            if isinstance(node, Logits)
            else "embed"
        )

    nodes = [
        {"id": str(n), "kind": kind(n), "layer": getattr(n, "layer", None), "head": getattr(n, "head", None)}
        for n in [*graph.senders, Logits()]
    ]
    edges = []
    for i, e in enumerate(graph.edges):
        k = oracle_rank[e]
        edges.append(
            {
                "id": str(e),
                "s": str(e.sender),
                "r": str(e.receiver.node),
                "port": e.receiver.port,
                "effect": rounded(oracle.effect[i].item(), 4),
                "alone": rounded(alone[i]),
                "in": e in circuit,
                "ranks": {method: order[e] for method, order in orders.items()},
                "before": rounded(every[k - 1]),
                "after": rounded(every[k]),
            }
        )
    return {
        "nodes": nodes,
        "edges": edges,
        "main_path": main_path(edges),
        "n_layers": graph.n_layers,
        "pairs": result.pairs,
        "metric": result.metric,
        "clean": rounded(oracle.base.metric),
        "counterfactual": rounded(oracle.other.metric),
        "target": smallest.target,
        "size": len(smallest.edges) if smallest.edges else None,
        "faithfulness": rounded(smallest.faithfulness.normalised),
        "every_k": rounded(list(every)),
        "curves": [
            {
                "method": m.scores.method,
                "sizes": list(m.curve.sizes),
                "faithfulness": rounded(list(m.curve.faithfulness)),
                "cpr": rounded(m.curve.cpr),
                "cmd": rounded(m.curve.cmd),
            }
            for m in result.methods
        ],
    }


def examples_data(examples, analysis) -> list:
    """The example pairs' patterns (lower triangle only: attention is causal) and, per head, the
    mean attention at the scored positions over the ablation rows."""
    if examples is None:
        return []
    out = []
    for pair in examples.pairs:

        def triangle(pattern):
            return [
                [rounded(pattern[l, h, q, : q + 1].tolist(), 2) for q in range(pattern.shape[2])]
                for l in range(pattern.shape[0])
                for h in range(pattern.shape[1])
            ]

        out.append(
            {
                "scored": list(pair.scored),
                "answers": list(pair.answers),
                "foils": list(pair.foils),
                "clean_tokens": list(pair.clean_tokens),
                "corrupt_tokens": list(pair.corrupt_tokens),
                "clean": triangle(pair.clean),
                "corrupt": triangle(pair.corrupt),
            }
        )
    return out


def head_data(analysis) -> dict:
    """The head circuit (nodes and their kept positions) and mean attention at the scored positions."""
    if analysis is None or analysis.attention is None:
        return {}
    mean = analysis.attention.mean["all"]
    n_layers, n_heads, _ = mean.shape
    nodes = (
        []
        if analysis.circuit is None
        else [
            {"head": str(head), "positions": None if kept is None else list(kept)}
            for head, kept in analysis.circuit.kept.items()
        ]
    )
    return {
        "n_layers": n_layers,
        "n_heads": n_heads,
        "labels": list(analysis.labels or analysis.attention.labels),
        "mean_rows": analysis.attention.rows["all"],
        "mean": {f"L{l}H{h}": rounded(mean[l, h].tolist()) for l in range(n_layers) for h in range(n_heads)},
        "by_role": role_data(analysis.roles, n_layers, n_heads),
        "circuit": nodes,
    }


def role_data(roles, n_layers: int, n_heads: int) -> dict | None:
    """For a task that names roles: each head's mean attention from the scored position to each
    role's position (keys labelled by role, where a position's role varies between examples)."""
    from probes.attention import SCORED

    if roles is None:
        return None
    masses = roles.attention[SCORED]
    return {
        "roles": list(roles.roles),
        "rows": roles.rows,
        "mass": {
            f"L{l}H{h}": [rounded(float(masses[role][l, h])) for role in roles.roles]
            for l in range(n_layers)
            for h in range(n_heads)
        },
    }


def run_data(measured, cells: dict, settings: ReportSettings) -> dict:
    from probes.report.edge_part import summary_line
    from probes.report.words import describe

    analysis, edge_run = measured.results.get("runs"), measured.results.get("edge_circuits")
    words = []
    if analysis is not None:
        words.append(describe(analysis, settings, analysis.vocabulary))
    if edge_run is not None:
        words.append(summary_line(edge_run, settings))
    return {
        "id": run_id(measured.model_name, measured.seed),
        "model": measured.model_name,
        "seed": measured.seed,
        "cells": cells.get((measured.model_name, measured.seed), {}),
        "words": words,
        "heads": head_data(analysis),
        "graph": graph_data(edge_run),
        "examples": examples_data(measured.results.get("examples"), analysis),
    }


# ---- the page ------------------------------------------------------------------------------


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


def views_html(data: dict, summary_block: str = "", extra: str = "") -> str:
    """The body that assets/report.js fills: navigation, the summary, one panel per run."""
    return (
        f'<nav id="nav"></nav><section id="summary" class="panel">{summary_block}</section>'
        f'<section id="run" class="panel"></section>{extra}{json_script("report-data", data)}'
    )


def report_page(data: dict, title: str, summary_block: str, extra: str = "") -> str:
    return page(
        title,
        views_html(data, summary_block, extra),
        style=asset("report.css"),
        script=asset("report.js"),
        heading='<p class="note">Self-contained: every script, style, number and image is in this file.</p>',
    )


def report_data(measured: list, sections: dict, task: str, settings: ReportSettings) -> dict:
    from probes.report.summary import LEGEND, summary_of

    summary = summary_of(sections)
    cells = {}
    for t in summary.tables:
        for row in t.rows:
            cells[t.model_name, int(row[0])] = dict(zip(t.columns, row[1:]))
    return {
        "task": task,
        "legend": list(LEGEND),
        "path_claim": settings.path_claim,
        "runs": [run_data(m, cells, settings) for m in measured],
    }


def write_html(measured: list, sections: dict, out: Path, task: str, settings: ReportSettings) -> Path:
    """report.html in `out` (beside report.md; the dynamics figures already drawn into out/figures)."""
    from common.atomic import atomic_write
    from probes.report.summary import summary_of

    data = report_data(measured, sections, task, settings)
    extra = figures_html(out, "dynamics_*.png", "Training dynamics") + features_html(measured)
    text = report_page(data, f"Circuit report: {task}", summary_html(summary_of(sections)), extra)
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
