"""Drawing and writing an EdgeCircuit: the circuit as a graph figure (layers as rows, nodes as boxes,
edge width = |oracle effect|, q/k/v marked by colour and by where the edge lands on the box), the
faithfulness-vs-size curves and markdown lines for a report (MIB's format: probes.report.exports).
Figures are made without pyplot (as probes.report.figures)."""

from __future__ import annotations

from matplotlib.figure import Figure

from models.graph import MLP, Edge, Embed, Head, Logits
from probes.circuits.named import ORACLE, EdgeCircuit

PORT_COLOUR = {"q": "tab:blue", "k": "tab:orange", "v": "tab:green", "in": "dimgray"}
PORT_OFFSET = {"q": -0.1, "k": 0.0, "v": 0.1, "in": 0.0}


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


def draw_circuit(ax, result: EdgeCircuit, edges: tuple[Edge, ...], title: str) -> None:
    graph, n_heads = result.graph, max([s.head for s in result.graph.senders if isinstance(s, Head)], default=0) + 1
    effect = dict(zip(result.oracle.edges, result.oracle.normalised().tolist()))
    largest = max([abs(effect[e]) for e in edges], default=1.0) or 1.0
    for edge in edges:
        (x0, y0), (x1, y1) = place(edge.sender, graph.n_layers, n_heads), place(edge.receiver.node, graph.n_layers, n_heads)
        port = edge.receiver.port
        ax.annotate("", (x1 + PORT_OFFSET[port], y1 - 0.18), (x0, y0 + 0.18),
                    arrowprops=dict(arrowstyle="-|>", lw=0.5 + 5 * abs(effect[edge]) / largest, color=PORT_COLOUR[port],
                                    alpha=0.8, connectionstyle="arc3,rad=0.08"))
    used = {e.sender for e in edges} | {e.receiver.node for e in edges}
    for node in [*graph.senders, Logits()]:
        x, y = place(node, graph.n_layers, n_heads)
        ax.text(x, y, str(node), ha="center", va="center", fontsize=8,
                bbox=dict(boxstyle="round", fc="lightyellow" if node in used else "white",
                          ec="black" if node in used else "lightgray"))
    for port, colour in PORT_COLOUR.items():
        ax.plot([], [], color=colour, label=port if port != "in" else "MLP / logits input")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_xlim(-1.0, max(n_heads, 2))
    ax.set_ylim(-0.6, 2 * graph.n_layers + 1.6)
    ax.axis("off")
    ax.set_title(title, fontsize=9)


def draw_curves(ax, result: EdgeCircuit) -> None:
    for method in result.methods:
        c = method.curve
        ax.plot([max(s, 1 / (2 * c.total)) for s in c.shares], c.faithfulness, marker="o", markersize=3,
                label=f"{c.method} (CPR {c.cpr:.2f}, CMD {c.cmd:.2f})")
    ax.axhline(1.0, color="gray", lw=0.5)
    ax.axhline(result.circuit.target, color="gray", lw=0.5, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("circuit size (share of edges; empty circuit drawn at 1/(2 edges))")
    ax.set_ylabel("faithfulness (0 = empty, 1 = full model)")
    ax.legend(fontsize=7)
    ax.set_title("faithfulness vs circuit size (top-k edges of each ranking)", fontsize=9)


def circuit_figure(result: EdgeCircuit, title: str):
    figure = Figure(figsize=(13, 5), layout="constrained")
    left, right = figure.subplots(1, 2, gridspec_kw={"width_ratios": [1.1, 1]})
    edges = result.circuit.edges or tuple(e for e, _ in result.oracle.ranked()[:10])
    reached = f"{len(edges)} edges, faithfulness {result.circuit.faithfulness:.0%}"
    draw_circuit(left, result, edges, f"{title}:\nsmallest oracle-ranked circuit reaching "
                 f"{result.circuit.target:.0%} ({reached})" if result.circuit.edges else
                 f"{title}:\ntop 10 oracle edges (no circuit below the full graph reaches {result.circuit.target:.0%})")
    draw_curves(right, result)
    return figure


def edge_label(edge: Edge, result: EdgeCircuit) -> str:
    value = float(result.oracle.normalised()[result.oracle.edges.index(edge)])
    return f"{edge} ({value:+.0%})"


def markdown_lines(result: EdgeCircuit, title: str, figure_path: str | None = None) -> list[str]:
    counts = result.graph.counts()
    lines = [f"#### {title}", "",
             f"Graph: {counts['nodes']} nodes, {counts['edges']} edges (into q {counts['q']}, k {counts['k']}, "
             f"v {counts['v']}, MLPs {counts['mlp']}, logits {counts['logits']}). {result.pairs} counterfactual pairs; "
             f"metric = {result.metric}, clean {result.oracle.base.metric:.2f}, counterfactual "
             f"{result.oracle.other.metric:.2f}. Edge effects are shares of that gap (exact oracle, one edge "
             "given its counterfactual write at a time); faithfulness: 0 = empty circuit (= counterfactual run), "
             "1 = full model, edges outside a circuit given their counterfactual writes.", ""]
    found = result.circuit
    if found.edges is not None:
        lines.append(f"Smallest oracle-ranked circuit reaching {found.target:.0%}: **{len(found.edges)} edges**, "
                     f"faithfulness {found.faithfulness:.1%}:")
        lines += [f"- {edge_label(e, result)}" for e in found.edges]
    else:
        lines.append(f"No oracle-ranked circuit smaller than the full graph reaches {found.target:.0%}.")
    if result.acdc_faithfulness is not None:
        lines += ["", f"ACDC's pruned circuit: faithfulness {result.acdc_faithfulness:.1%}."]
    lines += ["", "| method | seconds | Spearman vs oracle | AUROC (oracle top 10%) | AUROC (expected) | CPR | CMD |",
              "|---|---|---|---|---|---|---|"]
    for m in result.methods:
        expected = "n/a" if m.auroc_expected is None else f"{m.auroc_expected:.3f}"
        # The oracle compared with itself is 1 by construction, not a score.
        against = (["1 (itself)"] * 2 if m.scores.method == ORACLE else [f"{m.spearman:.3f}", f"{m.auroc_top:.3f}"])
        lines.append(f"| {m.scores.method} | {m.scores.seconds:.2f} | {' | '.join(against)} | "
                     f"{expected} | {m.curve.cpr:.3f} | {m.curve.cmd:.3f} |")
    if figure_path:
        lines += ["", f"![{title}]({figure_path})"]
    return lines + [""]
