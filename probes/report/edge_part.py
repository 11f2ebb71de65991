"""The report's edge-circuit part: each multi-block run's smallest circuit of graph edges (heads'
Q/K/V inputs, MLPs, embeddings, logits) by the exact oracle, on the circuit report's own pairs.

Only the oracle runs here (one forward per edge, batched): the fast methods' comparison with it
(EAP, EAP-IG, ACDC) costs several times more and lives in `toylens edges RUNS_DIR`.
One-block runs are left to the head part: with one block no edge composes two heads, and every
edge into the logits is a head or MLP the head part already ablates.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from models.spec import Attention, NormPlace
from probes.report.parts import RunContext, Section
from probes.report.words import pct
from probes.settings import ReportSettings

if TYPE_CHECKING:
    from models.spec import ModelSpec
    from probes.circuits.logic import Logic
    from probes.circuits.named import EdgeCircuit
    from probes.circuits.positional import PositionalCircuit
    from probes.circuits.redundancy import CircuitStructure

SHOWN_EDGES = 8  # circuit edges named in a run's summary line (all are in report.md and report.json)


@dataclass(frozen=True)
class EdgeRun:
    model_name: str
    seed: int
    result: EdgeCircuit  # oracle only
    figure: str | None  # path relative to the report folder
    positional: PositionalCircuit | None = None  # fixed-layout tasks with a found circuit
    structure: CircuitStructure | None = None  # the named circuit's redundancy
    logic: Logic | None = None  # relations of its components and its paths


def traceable(spec: ModelSpec) -> bool:
    return (
        spec.n_layers >= 2
        and spec.attention == Attention.SOFTMAX
        and spec.residual
        and spec.norm_place == NormPlace.PRE
    )


def measure_edge_circuit(context: RunContext) -> EdgeRun | None:
    from probes.circuits.positional import fixed_layout, positional_circuit

    if not traceable(context.spec) or context.heldout.counterfactual is None:
        return None
    result = context.edge_circuit
    if not context.settings.traces(result.oracle.gap):
        return EdgeRun(context.run.model_name, context.run.seed, result, None)
    positional = structure = found = None
    if result.circuit.edges is not None:
        from probes.circuits.logic import logic
        from probes.circuits.redundancy import circuit_structure, headline

        structure = circuit_structure(
            context.model,
            context.pairs,
            result.graph,
            frozenset(result.circuit.edges),
            result.oracle.normalised(),
            context.edge_runs,
        )
        found = logic(
            context.model,
            context.pairs,
            result.graph,
            headline(result, structure)[0],
            result.oracle.normalised(),
            context.edge_runs,
            wide=context.heldout,
        )
        if fixed_layout(context.pairs):
            positional = positional_circuit(
                context.model,
                context.pairs,
                context.spec,
                result.oracle,
                result.circuit.edges,
                context.settings.circuit_target,
                context.edge_runs,
            )
    return EdgeRun(
        context.run.model_name, context.run.seed, result, draw(result, context), positional, structure, found
    )


def shares(values) -> str:
    return ", ".join(pct(v) for v in values)


def named_heads(groups) -> str:
    names = [str(g.sender) for g in groups]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def structure_sentence(structure) -> str:
    """One sentence on the circuit's additivity and the joint search, with its numbers
    (probes.circuits.redundancy); what its parts are to each other is probes.report.logic_words'."""
    found, joint, named = structure.joint_redundancy, structure.joint, structure.named
    why = (
        f"Because the oracle-ranked circuit showed overlap ({overlap_words(named)}), the joint search ran"
        if named.redundant
        else "The oracle-ranked circuit showed no overlap; the joint search, run on every traced circuit, ran"
    )
    sentence = (
        f"In the joint search's circuit the single-edge effects add up to {found.additivity:.0%} of its "
        f"faithfulness {found.faithfulness:.0%} (100% = they add up; below: they overlap, as alternatives do; "
        f"above: each of several edges alone removes much of the effect, as links in series or an AND do). "
        f"{why} (its edges pruned by the effect of the set, any edge free to return: {joint.sets_measured} sets "
        f"measured, {joint.scores.seconds:.1f} s): {len(joint.circuit)} edges keep {joint.faithfulness:.0%}, "
        f"against {len(named.circuit)} oracle-ranked edges keeping {named.faithfulness:.0%}"
    )
    if joint.alternatives:
        sentence += (
            f", counting {sum(len(a.replacement) for a in joint.alternatives)} edges of "
            f"{len(joint.alternatives)} stand-in set(s) that each keep "
            f"{shares(a.faithfulness for a in joint.alternatives)} without the edges they replace"
        )
    if joint.at_target is not None:
        sentence += at_target_clause(joint.at_target, named, bool(joint.alternatives))
    return sentence


def overlap_words(named) -> str:
    """What in the named circuit's redundancy made the report run the joint search (Redundancy.redundant)."""
    from probes.circuits.redundancy import NECESSARY

    signs = [f"{named_heads(p.alternatives)} each suffice" for p in named.alternative_sets]
    signs += [f"{named_heads(p.groups)} share the answer" for p in named.shared_sets]
    if named.backed_up:
        signs.append(
            f"{len(named.backed_up)} of its edges each cost {NECESSARY:.0%} or more knocked out of it "
            f"but less knocked out of the full model"
        )
    if named.additivity < 1 - NECESSARY:
        signs.append(f"its single-edge effects add up to {pct(named.additivity)} of its faithfulness")
    return "; ".join(signs)


def at_target_clause(tight, named, stand_ins: bool) -> str:
    """The joint circuit and the oracle-ranked one at the same faithfulness: the search itself keeps
    every edge worth THRESHOLD of the gap and adds its stand-in sets, so it stops above the target."""
    from probes.circuits.methods.joint import TARGET, THRESHOLD

    smaller = len(tight.circuit) < len(named.circuit)
    counts = " and counts the stand-in sets" if stand_ins else ""
    return (
        f"; at the same faithfulness it is {'smaller' if smaller else 'no smaller'}: the search keeps every "
        f"edge worth {THRESHOLD:.0%} of the gap{counts}; pruned with no threshold "
        f"until one more edge would take it below {TARGET:.0%}, the joint circuit has {len(tight.circuit)} "
        f"edges keeping {tight.faithfulness:.0%}, {'fewer than' if smaller else 'no fewer than'} the oracle "
        f"ranking's {len(named.circuit)}"
    )


def draw(result, context: RunContext) -> str | None:
    from probes.report.edge_render import circuit_figure, figure_name
    from probes.report.figures import save

    if context.out is None:
        return None
    name = f"figures/{figure_name(context.run.model_name, context.run.seed)}"
    save(circuit_figure(result, f"{context.run.model_name} seed {context.run.seed}"), Path(context.out) / name)
    return name


def summary_line(run: EdgeRun, settings: ReportSettings) -> str:
    result, where = run.result, f"{run.model_name} seed {run.seed}"
    gap = -result.oracle.gap
    if not settings.traces(gap):
        return (
            f"{where}: edge circuit not traced (clean minus counterfactual metric only {gap:+.2f}, below "
            f"{settings.min_gap:g}: the model barely tells the pairs apart)"
        )
    found = result.circuit
    if found.edges is None:
        return (
            f"{where}: no edge circuit smaller than the whole graph ({len(result.graph.edges)} edges) keeps "
            f"{found.target:.0%}"
        )
    share = dict(zip(result.oracle.edges, result.oracle.normalised().tolist()))
    by_position = (
        ""
        if run.positional is None or run.positional.edges is None
        else (
            f"; by position, {len(run.positional.edges)} positional edges keep {run.positional.faithfulness.normalised:.0%} and "
            f"ignoring positions changes {run.positional.changed_share:.0%} of the circuit's edges"
        )
    )
    from probes.circuits.redundancy import headline

    edges, faithfulness, method = headline(result, run.structure)
    beside = (
        ""
        if method == "oracle ranking"
        else (f" (the oracle ranking's circuit: {len(found.edges)} edges keeping {found.faithfulness.normalised:.0%})")
    )
    strongest = sorted(edges, key=lambda e: -abs(share[e]))[:SHOWN_EDGES]
    more = f" and {len(edges) - len(strongest)} more" if len(edges) > len(strongest) else ""
    line = (
        f"{where}: edge circuit ({method}) of {len(edges)} of {len(result.graph.edges)} edges keeps "
        f"{faithfulness:.0%} of the gap on {result.pairs} pairs (every other edge given its counterfactual "
        f"write){beside}: " + ", ".join(f"{e} ({share[e]:+.0%} alone)" for e in strongest) + more + by_position
    )
    if run.structure is not None:
        line += f". {structure_sentence(run.structure)}"
    if run.logic is not None:
        from probes.report.logic_words import logic_sentences

        line += ". " + "; ".join(logic_sentences(run.logic))
    return line


def run_json(run: EdgeRun) -> dict:
    from probes.report.logic_words import logic_json

    result = run.result
    share = dict(zip(result.oracle.edges, result.oracle.normalised().tolist()))
    curve = result.methods[0].curve
    return {
        "model_name": run.model_name,
        "seed": run.seed,
        "pairs": result.pairs,
        "graph": result.graph.counts(),
        "clean_metric": result.oracle.base.metric,
        "counterfactual_metric": result.oracle.other.metric,
        "target": result.circuit.target,
        "circuit": None
        if result.circuit.edges is None
        else [{"edge": str(e), "alone": share[e]} for e in result.circuit.edges],
        "faithfulness": result.circuit.faithfulness.normalised,
        "cpr": curve.cpr,
        "cmd": curve.cmd,
        "oracle_seconds": result.oracle.seconds,
        "figure": run.figure,
        "positional": None if run.positional is None else positional_json(run.positional),
        "redundancy": None if run.structure is None else structure_json(run.structure),
        "headline": None if result.circuit.edges is None else headline_json(result, run.structure),
        "logic": None if run.logic is None else logic_json(run.logic),
    }


def headline_json(result, structure) -> dict:
    from probes.circuits.redundancy import headline

    edges, faithfulness, method = headline(result, structure)
    return {
        "method": method,
        "circuit": [str(e) for e in result.graph.edges if e in edges],
        "faithfulness": faithfulness,
    }


def positional_json(result: PositionalCircuit) -> dict:
    share = dict(zip(result.graph.edges, result.effects.normalised().tolist()))
    return {
        "positions": list(result.positions),
        "edges": len(result.graph.edges),
        "target": result.target,
        "circuit": None if result.edges is None else [{"edge": str(e), "alone": share[e]} for e in result.edges],
        "faithfulness": result.faithfulness.normalised,
        "aggregated_circuit": [str(e) for e in result.aggregated],
        "changed_share": result.changed_share,
        "oracle_seconds": result.effects.seconds,
    }


def positional_lines(result: PositionalCircuit, shown: int = SHOWN_EDGES) -> list[str]:
    """The circuit resolved by position, and how far dropping positions changes it."""
    from probes.circuits.positional import REFINE, strongest
    from probes.report.edge_render import compact

    where = f"p{result.positions[0]}-p{result.positions[-1]}"
    if result.edges is None:
        return [
            f"By position ({where}, {len(result.graph.edges)} positional edges): no top-k set smaller than "
            f"the whole graph keeps {result.target:.0%}.",
            "",
        ]
    top = strongest(result, shown)
    more = f" and {len(result.edges) - len(top)} more" if len(result.edges) > len(top) else ""
    mine, theirs = set(result.parents), set(result.aggregated)
    whole = sum(e.position is None for e in result.graph.edges)
    return [
        f"By position ({where}: the only positions where a write differs between the pairs and can still "
        f"reach a scored logit; {len(result.graph.edges) - whole} positional edges of the edges moving at least "
        f"{REFINE:.0%} of the gap alone, the other {whole} kept whole): the smallest "
        f"circuit reaching {result.target:.0%} is **{len(result.edges)} positional edges**, faithfulness "
        f"{result.faithfulness.normalised:.1%}: "
        + ", ".join(f"`{compact(e)}` ({s:+.0%} alone)" for e, s in top)
        + more
        + f". Ignoring positions changes {result.changed_share:.0%} of the circuit's edges "
        f"({len(mine & theirs)} in both, {len(theirs - mine)} only in the aggregated circuit, "
        f"{len(mine - theirs)} only in the positional one).",
        "",
    ]


def redundancy_json(found) -> dict:
    return {
        "faithfulness": found.faithfulness,
        "additivity": found.additivity,
        "structure": found.structure.value,
        "groups": [
            {"sender": str(g.sender), "edges": len(g.edges), "necessity": g.necessity, "sufficiency": g.sufficiency}
            for g in found.groups
        ],
        "alternatives": [[str(g.sender) for g in p.alternatives] for p in found.alternative_sets],
        "shared": [[str(g.sender) for g in p.groups] for p in found.shared_sets],
    }


def structure_json(structure) -> dict:
    joint = structure.joint
    return {
        "named": redundancy_json(structure.named),
        "joint": {
            "circuit": [str(e) for e in joint.scores.edges if e in joint.circuit],
            "faithfulness": joint.faithfulness,
            "sets_measured": joint.sets_measured,
            "seconds": joint.scores.seconds,
            "alternatives": [
                {
                    "replaced": sorted(map(str, a.replaced)),
                    "replacement": sorted(map(str, a.replacement)),
                    "faithfulness": a.faithfulness,
                }
                for a in joint.alternatives
            ],
            "redundancy": redundancy_json(structure.joint_redundancy),
            "at_target": None
            if joint.at_target is None
            else {
                "circuit": [str(e) for e in joint.scores.edges if e in joint.at_target.circuit],
                "faithfulness": joint.at_target.faithfulness,
            },
        },
    }


def render_edge_circuits(runs: list[EdgeRun], out: Path, settings: ReportSettings) -> Section:
    from probes.report.edge_render import markdown_lines

    intro = (
        "The exact effect of every edge of each multi-block run's computational graph (probes.circuits.oracle): an "
        "edge is one sender's write (embeddings, a head, an MLP) reaching one receiver input (a head's q, k "
        "or v, an MLP, the logits) through the residual stream. 'alone' is the share of the clean minus "
        "counterfactual gap that giving that one edge its counterfactual write removes (LayerNorm "
        "recomputed, the rest of the forward exact). The circuit is the smallest top-k set of edges by "
        "|effect| whose faithfulness reaches the target with every edge outside it given its counterfactual "
        "write: the gap scale, 0 = the empty circuit (= the counterfactual run), 1 = the full model (not the "
        "head circuits' null scale, whose empty circuit is mean-ablated). "
        "EAP, EAP-IG and ACDC scored against this oracle: `toylens edges RUNS_DIR`."
    )
    blocks = [intro, ""]
    for run in runs:
        if not settings.traces(run.result.oracle.gap):
            blocks += [f"#### {run.model_name} seed {run.seed}", "", summary_line(run, settings), ""]
        else:
            title, *rest = markdown_lines(run.result, f"{run.model_name} seed {run.seed}", run.figure)
            blocks += [title, "", summary_line(run, settings), *rest]
            blocks += positional_lines(run.positional) if run.positional is not None else []
    from probes.report.summary import edge_cells

    return Section(
        "Edge circuits (exact oracle)",
        "\n".join(blocks),
        [summary_line(run, settings) for run in runs],
        [run_json(run) for run in runs],
        cells={key: row for run in runs for key, row in edge_cells(run, settings).items()},
    )
