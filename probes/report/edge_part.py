"""The report's edge-circuit part: each multi-block run's smallest circuit of graph edges (heads'
Q/K/V inputs, MLPs, embeddings, logits) by the exact oracle, on the circuit report's own pairs.

Only the oracle runs here (one forward per edge, batched): the fast methods' comparison with it
(EAP, EAP-IG, ACDC) costs several times more and lives in `python -m toylens.edges RUNS_DIR`.
One-block runs are left to the head part: with one block no edge composes two heads, and every
edge into the logits is a head or MLP the head part already ablates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from probes.report.parts import RunContext, Section
from probes.settings import ReportSettings

SHOWN_EDGES = 8     # circuit edges named in a run's summary line (all are in report.md and report.json)


@dataclass(frozen=True)
class EdgeRun:
    model_name: str
    seed: int
    result: object              # probes.circuits.named.EdgeCircuit (oracle only)
    figure: str | None          # path relative to the report folder


def traceable(spec: dict) -> bool:
    return (spec.get("n_layers", 1) >= 2 and spec.get("attention", "softmax") == "softmax"
            and spec.get("residual", True))


def measure_edge_circuit(context: RunContext) -> EdgeRun | None:
    from models import ModelSpec
    from models.graph import graph_of
    from probes.circuits.named import edge_circuit

    if not traceable(context.spec) or context.heldout.counterfactual is None:
        return None
    spec = ModelSpec.from_dict(context.spec)
    result = edge_circuit(context.model, context.pairs, graph_of(spec), compare_methods=False,
                          expected=context.run.task.expected_circuit(context.run.model_name, spec))
    if abs(result.oracle.gap) < context.settings.min_gap:
        return EdgeRun(context.run.model_name, context.run.seed, result, None)
    return EdgeRun(context.run.model_name, context.run.seed, result, draw(result, context))


def draw(result, context: RunContext) -> str | None:
    from probes.report.edge_render import circuit_figure
    from probes.report.figures import save

    if context.out is None:
        return None
    name = f"figures/edges-{context.run.model_name}-seed{context.run.seed}.png"
    save(circuit_figure(result, f"{context.run.model_name} seed {context.run.seed}"), Path(context.out) / name)
    return name


def summary_line(run: EdgeRun, settings: ReportSettings) -> str:
    result, where = run.result, f"{run.model_name} seed {run.seed}"
    gap = -result.oracle.gap
    if abs(gap) < settings.min_gap:
        return (f"{where}: edge circuit not traced (clean minus counterfactual metric only {gap:+.2f}, below "
                f"{settings.min_gap:g}: the model barely tells the pairs apart)")
    found = result.circuit
    if found.edges is None:
        return (f"{where}: no edge circuit smaller than the whole graph ({len(result.graph.edges)} edges) keeps "
                f"{found.target:.0%}")
    share = dict(zip(result.oracle.edges, result.oracle.normalised().tolist()))
    strongest = sorted(found.edges, key=lambda e: -abs(share[e]))[:SHOWN_EDGES]
    more = f" and {len(found.edges) - len(strongest)} more" if len(found.edges) > len(strongest) else ""
    return (f"{where}: edge circuit of {len(found.edges)} of {len(result.graph.edges)} edges keeps "
            f"{found.faithfulness:.0%} of the gap on {result.pairs} pairs (every other edge given its counterfactual "
            "write): "
            + ", ".join(f"{e} ({share[e]:+.0%} alone)" for e in strongest) + more)


def run_json(run: EdgeRun) -> dict:
    result = run.result
    share = dict(zip(result.oracle.edges, result.oracle.normalised().tolist()))
    curve = result.methods[0].curve
    return {"model_name": run.model_name, "seed": run.seed, "pairs": result.pairs,
            "graph": result.graph.counts(), "clean_metric": result.oracle.base.metric,
            "counterfactual_metric": result.oracle.other.metric, "target": result.circuit.target,
            "circuit": None if result.circuit.edges is None else
            [{"edge": str(e), "alone": share[e]} for e in result.circuit.edges],
            "faithfulness": result.circuit.faithfulness, "cpr": curve.cpr, "cmd": curve.cmd,
            "oracle_seconds": result.oracle.seconds, "figure": run.figure}


def render_edge_circuits(runs: list[EdgeRun], out: Path, settings: ReportSettings) -> Section:
    from probes.report.edge_render import markdown_lines

    intro = ("The exact effect of every edge of each multi-block run's computational graph (probes.circuits.oracle): an "
             "edge is one sender's write (embeddings, a head, an MLP) reaching one receiver input (a head's q, k "
             "or v, an MLP, the logits) through the residual stream. 'alone' is the share of the clean minus "
             "counterfactual gap that giving that one edge its counterfactual write removes (LayerNorm "
             "recomputed, the rest of the forward exact). The circuit is the smallest top-k set of edges by "
             "|effect| whose faithfulness reaches the target with every edge outside it given its counterfactual "
             "write: the gap scale, 0 = the empty circuit (= the counterfactual run), 1 = the full model (not the "
             "head circuits' null scale, whose empty circuit is mean-ablated). "
             "EAP, EAP-IG and ACDC scored against this oracle: `python -m toylens.edges RUNS_DIR`.")
    blocks = [intro, ""]
    for run in runs:
        if abs(run.result.oracle.gap) < settings.min_gap:
            blocks += [f"#### {run.model_name} seed {run.seed}", "", summary_line(run, settings), ""]
        else:
            title, *rest = markdown_lines(run.result, f"{run.model_name} seed {run.seed}", run.figure)
            blocks += [title, "", summary_line(run, settings), *rest]
    from probes.report.summary import edge_cells

    return Section("Edge circuits (exact oracle)", "\n".join(blocks),
                   [summary_line(run, settings) for run in runs], [run_json(run) for run in runs],
                   cells={key: row for run in runs for key, row in edge_cells(run, settings).items()})
