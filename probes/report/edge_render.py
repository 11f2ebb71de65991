"""Drawing and writing an EdgeCircuit: the circuit as a graph figure (layers as rows, nodes as boxes,
edge width = |oracle effect|, q/k/v marked by colour and by where the edge lands on the box), the
faithfulness-vs-size curves and markdown lines for a report (MIB's format: probes.report.outputs.exports).
Figures are made without pyplot (as probes.report.figures)."""

from __future__ import annotations

import torch
from common.figure import Figure

from models.graph import MLP, Edge, Embed, Head, Logits
from probes.circuits.named import ORACLE, EdgeCircuit
from probes.circuits.methods.scores import circuit_recall, expected_recall

PORT_COLOUR = {"q": "tab:blue", "k": "tab:orange", "v": "tab:green", "in": "dimgray"}
PORT_OFFSET = {"q": -0.1, "k": 0.0, "v": 0.1, "in": 0.0}
PORT_ALONG = {"q": 0.3, "k": 0.5, "v": 0.7, "in": 0.5}  # where along its arc an edge's number sits, so the
# numbers of one sender's q/k/v edges do not overlap


def place(node, n_layers: int, n_heads: int) -> tuple[float, float]:
    """(x, y): embed at the bottom, each block a row of heads and a row for its MLP, logits on top."""
    middle = (n_heads - 1) / 2
    if isinstance(node, Embed):
        return middle, 0.0
    if isinstance(node, Head):
        return float(node.head), 2.0 * node.layer + 1
    if isinstance(node, MLP):
        return middle, 2.0 * node.layer + 2
    return middle, 2.0 * n_layers + 1


def figure_name(model_name: str, seed: int) -> str:
    """The one file name of a run's edge-circuit figure, in the report and in `toylens.edges`."""
    return f"edges-{''.join(c if c.isalnum() or c in '.+_' else '-' for c in model_name)}-seed{seed}.png"


def bend(x0: float, y0: float, x1: float, y1: float) -> float:
    """The arc's curvature: an edge that skips rows (L0 -> L2, embed -> logits) bows out sideways so it
    does not run through the boxes between; neighbours get a slight bend (arcs of one pair stay apart)."""
    rows = abs(y1 - y0)
    return 0.08 if rows <= 1 or abs(x1 - x0) >= 1 else min(0.6, 0.25 * rows)


def arc(start, end, rad: float):
    """t -> (x, y) on the quadratic curve from `start` to `end` whose control point sits `rad` x the
    chord's length off the chord's middle (matplotlib's arc3, here in data coordinates, so an edge's
    number can be put exactly on its curve)."""
    (x0, y0), (x1, y1) = start, end
    cx, cy = (x0 + x1) / 2 + rad * (y1 - y0), (y0 + y1) / 2 - rad * (x1 - x0)

    def point(t):
        return (
            (1 - t) ** 2 * x0 + 2 * t * (1 - t) * cx + t**2 * x1,
            (1 - t) ** 2 * y0 + 2 * t * (1 - t) * cy + t**2 * y1,
        )

    return point


def draw_circuit(ax, result: EdgeCircuit, edges: tuple[Edge, ...], title: str) -> None:
    graph, n_heads = result.graph, max([s.head for s in result.graph.senders if isinstance(s, Head)], default=0) + 1
    effect = dict(zip(result.oracle.edges, result.oracle.normalised().tolist()))
    largest = max([abs(effect[e]) for e in edges], default=1.0) or 1.0
    for edge in edges:
        (x0, y0), (x1, y1) = (
            place(edge.sender, graph.n_layers, n_heads),
            place(edge.receiver.node, graph.n_layers, n_heads),
        )
        port, rad = edge.receiver.port, bend(x0, y0, x1, y1)
        start, end = (x0, y0 + 0.18), (x1 + PORT_OFFSET[port], y1 - 0.18)
        curve = arc(start, end, rad)
        width, colour = 0.5 + 5 * abs(effect[edge]) / largest, PORT_COLOUR[port]
        ax.plot(*curve(torch.linspace(0, 0.97, 30)), lw=width, color=colour, alpha=0.8, solid_capstyle="round")
        ax.annotate(
            "",
            end,
            tuple(float(c) for c in curve(torch.tensor([0.9]))),
            arrowprops=dict(arrowstyle="-|>", lw=width, color=colour, alpha=0.8, shrinkA=0, shrinkB=0),
        )
        x, y = curve(torch.tensor([PORT_ALONG[port]]))
        ax.text(
            float(x),
            float(y),
            f"{effect[edge]:+.0%}",
            fontsize=7,
            ha="center",
            va="center",
            color=colour,
            bbox=dict(boxstyle="round,pad=0.1", fc="white", ec="none", alpha=0.8),
        )
    used = {e.sender for e in edges} | {e.receiver.node for e in edges}
    for node in [*graph.senders, Logits()]:
        x, y = place(node, graph.n_layers, n_heads)
        ax.text(
            x,
            y,
            str(node),
            ha="center",
            va="center",
            fontsize=8,
            bbox=dict(
                boxstyle="round",
                fc="lightyellow" if node in used else "white",
                ec="black" if node in used else "lightgray",
            ),
        )
    for port, colour in PORT_COLOUR.items():
        ax.plot([], [], color=colour, label=port if port != "in" else "MLP / logits input")
    ax.legend(fontsize=7, loc="upper left", frameon=False)
    # Room for the widest sideways bow (half of 0.6 x the longest chord) on the side arcs bow to.
    reach = 0.3 * (2 * graph.n_layers + 1)
    ax.set_xlim(-0.6 - reach / 3, n_heads - 0.4 + reach)
    ax.set_ylim(-0.6, 2 * graph.n_layers + 1.6)
    ax.axis("off")
    ax.set_title(title, fontsize=8, wrap=True)


def draw_curves(ax, result: EdgeCircuit) -> None:
    for method in result.methods:
        c = method.curve
        ax.plot(
            [max(s, 1 / (2 * c.total)) for s in c.shares],
            c.faithfulness,
            marker="o",
            markersize=3,
            label=f"{c.method} (CPR {c.cpr:.2f}, CMD {c.cmd:.2f})",
        )
    ax.axhline(1.0, color="gray", lw=0.5)
    ax.axhline(result.circuit.target, color="gray", lw=0.5, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("circuit size (share of edges; empty circuit drawn at 1/(2 edges))")
    ax.set_ylabel("faithfulness (0 = empty, 1 = full model)")
    ax.legend(fontsize=7)
    ax.set_title("faithfulness vs circuit size (top-k edges of each ranking)", fontsize=9)


def circuit_figure(result: EdgeCircuit, title: str):
    n_heads = max([s.head for s in result.graph.senders if isinstance(s, Head)], default=0) + 1
    # The graph panel as wide as its heads need (plus the arcs' bows), the curves beside it.
    graph_width = 2.5 + 1.1 * n_heads + 0.6 * result.graph.n_layers
    figure = Figure(figsize=(graph_width + 6.5, 1.6 + 1.1 * result.graph.n_layers), layout="constrained")
    left, right = figure.subplots(1, 2, gridspec_kw={"width_ratios": [graph_width, 6.5]})
    edges = result.circuit.edges or tuple(e for e, _ in result.oracle.ranked()[:10])
    reached = f"{len(edges)} edges, faithfulness {result.circuit.faithfulness.normalised:.0%}"
    draw_circuit(
        left,
        result,
        edges,
        f"{title}:\nsmallest oracle circuit reaching {result.circuit.target:.0%}\n({reached})"
        if result.circuit.edges
        else f"{title}:\ntop 10 oracle edges (no circuit below the full graph reaches {result.circuit.target:.0%})",
    )
    draw_curves(right, result)
    return figure


def edge_label(edge: Edge, result: EdgeCircuit) -> str:
    value = float(result.oracle.normalised()[result.oracle.edges.index(edge)])
    return f"{edge} ({value:+.0%})"


def compact(edge: Edge) -> str:
    """An edge in the report's short notation: `L0H0@p11 ->k L1H0`, `embed@p11 ->v L0H0`,
    `L1H0 -> logits` (no position: the write at every position)."""
    where = "" if edge.position is None else f"@p{edge.position}"
    node = edge.receiver.node
    arrow = f"->{edge.receiver.port}" if isinstance(node, Head) else "->"
    return f"{edge.sender}{where} {arrow} {node}"


METHOD_SCALES = (
    "Scales: Spearman is the rank correlation of a method's scores with the oracle's effects "
    "(1 = the same order, 0 = unrelated, -1 = reversed); AUROC is the chance that an edge of the "
    "reference set (the oracle's top 10%, or the expected circuit) outscores another (1 = all ranked "
    "first, 0.5 = chance); CPR is the area under faithfulness against the share of edges kept, top k "
    "of each ranking (1 = the full model's faithfulness at every size; faithfulness above 1 can lift "
    "it over 1), CMD the area of |1 - faithfulness| (0 = faithful at every size)."
)


def markdown_lines(result: EdgeCircuit, title: str, figure_path: str | None = None) -> list[str]:
    counts = result.graph.counts()
    lines = [
        f"#### {title}",
        "",
        f"Graph: {counts['nodes']} nodes, {counts['edges']} edges (into q {counts['q']}, k {counts['k']}, "
        f"v {counts['v']}, MLPs {counts['mlp']}, logits {counts['logits']}). {result.pairs} counterfactual pairs; "
        f"metric = {result.metric}, clean {result.oracle.base.metric:.2f}, counterfactual "
        f"{result.oracle.other.metric:.2f}. Edge effects are shares of that gap (exact oracle, one edge "
        "given its counterfactual write at a time); faithfulness: 0 = empty circuit (= counterfactual run), "
        "1 = full model, edges outside a circuit given their counterfactual writes.",
        "",
    ]
    found = result.circuit
    if found.edges is not None:
        lines.append(
            f"Smallest oracle-ranked circuit reaching {found.target:.0%}: **{len(found.edges)} edges**, "
            f"faithfulness {found.faithfulness.normalised:.1%}:"
        )
        lines += [f"- {edge_label(e, result)}" for e in found.edges]
    else:
        lines.append(f"No oracle-ranked circuit smaller than the full graph reaches {found.target:.0%}.")
    if result.acdc_faithfulness is not None:
        lines += ["", f"ACDC's pruned circuit: faithfulness {result.acdc_faithfulness:.1%}."]
    lines += expected_lines(result)
    lines += [
        "",
        "| method | seconds | Spearman vs oracle | AUROC (oracle top 10%) | AUROC (expected) | "
        "expected edges in its top k | CPR | CMD |",
        "|---|---|---|---|---|---|---|---|",
    ]
    truth = (
        None
        if result.expected is None
        else torch.tensor([e in result.expected for e in result.graph.edges], device="cpu")
    )
    for m in result.methods:
        expected = "n/a" if m.auroc_expected is None else f"{m.auroc_expected:.3f}"
        recall = "n/a" if truth is None else "{} of {}".format(*expected_recall(m.scores.score, truth))
        # The oracle compared with itself is 1 by construction, not a score.
        against = ["1 (itself)"] * 2 if m.scores.method == ORACLE else [f"{m.spearman:.3f}", f"{m.auroc_top:.3f}"]
        lines.append(
            f"| {m.scores.method} | {m.scores.seconds:.2f} | {' | '.join(against)} | "
            f"{expected} | {recall} | {m.curve.cpr:.3f} | {m.curve.cmd:.3f} |"
        )
    lines += ["", METHOD_SCALES]
    if figure_path:
        lines += ["", f"![{title}]({figure_path})"]
    return lines + [""]


def expected_lines(result: EdgeCircuit) -> list[str]:
    """Recall of the expected circuit beside its AUROC: how many expected edges the oracle's
    smallest circuit holds. A run using another mechanism that shares some expected edges can have
    a high AUROC (expected); recall says how much of the expected circuit it actually uses."""
    if result.expected is None or result.circuit.edges is None:
        return []
    found, total = circuit_recall(result.circuit.edges, result.expected)
    missing = sorted(map(str, set(result.expected) - set(result.circuit.edges)))
    extra = len(set(result.circuit.edges) - set(result.expected))
    return [
        "",
        f"Expected circuit: {found} of {total} expected edges are in the smallest oracle circuit "
        f"(recall {found / total:.0%}; the circuit has {extra} edges the expectation lacks)"
        + (f"; missing: {', '.join(missing)}" if missing else "")
        + ". AUROC (expected) below ranks every edge "
        "and stays high for a circuit that shares some expected edges but uses another mechanism; read it with "
        "the recall.",
    ]
