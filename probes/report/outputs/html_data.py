"""report.html's data: what assets/report.js draws each run's views from, written into the page as
one JSON script (probes.report.outputs.html). Per run: the summary row's cells and the run's
sentences, the edge graph (every edge's exact effect, the oracle's and each method's rank, the
smallest circuit and its main path, the faithfulness curves), each head's mean attention at the
scored positions (and to each role's position) and the example pairs' attention patterns. Numbers
are rounded to what a view shows: the page carries every run's data inline.
"""

from __future__ import annotations

import math

from probes.report.outputs.exports import slug
from probes.settings import ReportSettings

DECIMALS = 3  # attention weights and shares in the page's data: enough for any view of them


def rounded(values, digits: int = DECIMALS):
    """Rounded for the page; a share of a zero gap (NaN) becomes null, shown as n/a."""
    if isinstance(values, (list, tuple)):
        return [rounded(v, digits) for v in values]
    return round(float(values), digits) if math.isfinite(values) else None


def run_id(model_name: str, seed: int) -> str:
    return slug(f"{model_name}-seed{seed}")


def main_path(edges: list[dict], nodes: set | None = None) -> list[str]:
    """The circuit's main path: of the circuit's chains of edges that end at the logits, the one whose
    weakest edge carries the most alone (a chain is only as strong as its weakest link); with `nodes`
    (the mechanism's, mechanism_nodes), only chains through those, so the graph draws the mechanism
    the summary and the signature name, not another chain that happens to be wider."""
    into: dict[str, list[dict]] = {}
    for e in edges:
        if e["in"] and (nodes is None or (e["s"] in nodes and e["r"] in nodes)):
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

    return widest("logits")[1] or (main_path(edges) if nodes is not None else [])


def mechanism_nodes(mechanism) -> set | None:
    """The graph nodes of a run's edge-circuit signature (its parts' heads, its MLPs, the embedding
    and the logits); None without one (a head circuit's signature draws no edge graph)."""
    from probes.circuits.signature import EDGE_BASIS

    if mechanism is None or mechanism.basis != EDGE_BASIS:
        return None
    heads = {h for _, names in mechanism.heads for h in names}
    return heads | {p for p in mechanism.parts if p.startswith("MLP")} | {"embed", "logits"}


def graph_data(edge_run, mechanism=None) -> dict | None:
    """The edge graph with every edge's exact effect, its place in the oracle ranking and each
    method's rank; None when the run's edges were not traced."""
    from models.graph import Logits

    if edge_run is None:
        return None
    result = edge_run.result
    graph, oracle, smallest = result.graph, result.oracle, result.circuit
    nodes = [
        {"id": str(n), "kind": node_kind(n), "layer": getattr(n, "layer", None), "head": getattr(n, "head", None)}
        for n in [*graph.senders, Logits()]
    ]
    edges = edge_data(result)
    return {
        "nodes": nodes,
        "edges": edges,
        "main_path": main_path(edges, mechanism_nodes(mechanism)),
        "main_path_of": "the mechanism's signature" if mechanism_nodes(mechanism) else "the widest chain",
        "headline": headline_data(edge_run),
        "n_layers": graph.n_layers,
        "pairs": result.pairs,
        "metric": result.metric,
        "clean": rounded(oracle.base.metric),
        "counterfactual": rounded(oracle.other.metric),
        "target": smallest.target,
        "size": len(smallest.edges) if smallest.edges else None,
        "faithfulness": rounded(smallest.faithfulness.normalised),
        "every_k": rounded(list(smallest.every_k)),
        "curves": curve_data(result.methods),
    }


def headline_data(edge_run) -> dict | None:
    """The circuit the summary's 'edges (gap)' cell names (probes.circuits.redundancy.headline), so
    the graph can say whether it draws that one."""
    from probes.circuits.redundancy import headline

    if edge_run.result.circuit.edges is None:
        return None
    edges, faithfulness, method = headline(edge_run.result, edge_run.structure)
    return {"method": method, "size": len(edges), "faithfulness": rounded(faithfulness)}


def node_kind(node) -> str:
    from models.graph import Head, Logits, MLP

    return (
        "head"
        if isinstance(node, Head)
        else "mlp"
        if isinstance(node, MLP)
        else "logits"
        if isinstance(node, Logits)
        else "embed"
    )


def edge_data(result) -> list[dict]:
    """Each edge of the graph: its exact effect, its share alone, whether the smallest circuit
    holds it, each method's rank, and the circuit's faithfulness before and after the oracle
    ranking reaches it."""
    from probes.circuits.faithfulness import ranked

    graph, oracle, smallest = result.graph, result.oracle, result.circuit
    alone = oracle.normalised().tolist()
    circuit = set(smallest.edges or ())
    orders = {
        m.scores.method: {e: i + 1 for i, e in enumerate(ranked(graph.edges, m.scores.score))} for m in result.methods
    }
    oracle_rank = orders[result.methods[0].scores.method]
    every = smallest.every_k
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
    return edges


def curve_data(methods) -> list[dict]:
    """Each method's faithfulness curve against circuit size, with its CPR and CMD."""
    return [
        {
            "method": m.scores.method,
            "sizes": list(m.curve.sizes),
            "faithfulness": rounded(list(m.curve.faithfulness)),
            "cpr": rounded(m.curve.cpr),
            "cmd": rounded(m.curve.cmd),
        }
        for m in methods
    ]


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
        "graph": graph_data(edge_run, getattr(analysis, "mechanism", None)),
        "examples": examples_data(measured.results.get("examples"), analysis),
    }


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
