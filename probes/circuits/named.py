"""One call for a run's edge circuit: the graph, the exact oracle, the fast methods scored against
it (and against an expected circuit when one is known), MIB-style faithfulness curves, and the
smallest circuit reaching 90%. Typed results; probes.report.edge_render draws and writes them."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from common.stages import timed
from models.graph import Edge, Graph
from models import Model
from probes.circuits.methods.joint import joint_search
from probes.circuits.methods.masks import learned_masks
from probes.circuits.methods.attribution import EdgeScores, acdc, eap, eap_ig
from probes.circuits.methods.scores import REFERENCE_NOISE, auroc, spearman, top_edges
from probes.circuits.oracle import Direction, EdgeEffects, Runs, circuit_outcomes, edge_effects, record_runs
from probes.circuits.faithfulness import Curve, SmallestCircuit, curve, curve_of, normalised, smallest_circuit
from probes.patching import metric_name
from tasks.data import Batch

TOP_SHARE = 0.1  # the oracle's top 10% of edges (by |effect|, above REFERENCE_NOISE of the gap) are the
# reference set for AUROC
ORACLE = "oracle"  # the exact effects' name as a method (judged against itself: 1 by construction)


@dataclass(frozen=True)
class MethodResult:
    scores: EdgeScores
    spearman: float  # rank correlation with the oracle's effects (signed)
    auroc_top: float  # recovering the oracle's top TOP_SHARE edges above REFERENCE_NOISE, by |score|
    auroc_expected: float | None  # recovering the expected (planted or declared) circuit
    curve: Curve


@dataclass(frozen=True)
class EdgeCircuit:
    graph: Graph
    pairs: int
    metric: str  # what the effects are changes of (probes.patching.metric_name)
    oracle: EdgeEffects
    methods: tuple[MethodResult, ...]  # the oracle first (its own ranking), then EAP, EAP-IG, ACDC (and,
    # with joint_methods, the joint search and learned masks)
    circuit: SmallestCircuit  # from the oracle's ranking
    acdc_faithfulness: float | None  # of the circuit ACDC kept (None: ACDC not run)
    expected: frozenset | None
    seconds: float


def judged(
    model: Model,
    batch: Batch,
    graph: Graph,
    oracle: EdgeEffects,
    scores: EdgeScores,
    runs,
    expected: frozenset | None,
    smallest: SmallestCircuit | None = None,
) -> MethodResult:
    """`smallest`: smallest_circuit on this same ranking, whose every top-k circuit the curve reads
    instead of measuring its sizes again."""
    top = top_edges(oracle.normalised(), TOP_SHARE, REFERENCE_NOISE)
    truth = None if expected is None else torch.tensor([e in expected for e in graph.edges], device="cpu")
    return MethodResult(
        scores,
        spearman(scores.score, oracle.effect),
        auroc(scores.score.abs(), top),
        None if truth is None else auroc(scores.score.abs(), truth),
        curve_of(smallest) if smallest else curve(model, batch, graph, scores.method, scores.score, runs),
    )


@timed("edge circuit")
def edge_circuit(
    model: Model,
    batch: Batch,
    graph: Graph,
    ig_steps: int = 5,
    acdc_threshold: float | None = 0.01,
    expected: frozenset[Edge] | None = None,
    compare_methods: bool = True,
    joint_methods: bool = False,
    runs: Runs | None = None,
) -> EdgeCircuit:
    """Everything about `model`'s edges on `batch`'s counterfactual pairs (clean = the batch,
    counterfactual = its partners; edges outside a circuit get their counterfactual writes).
    acdc_threshold None skips the pruning (one forward per edge, in sequence: the slowest method);
    compare_methods False measures the oracle alone (the circuit report's cheap path); joint_methods
    adds the joint search and learned masks (probes.circuits.methods.joint, .masks: several times ACDC's cost);
    `runs`: record_runs(model, batch, graph, Direction.NOISE) when the caller already has them."""
    began = time.perf_counter()
    runs = runs or record_runs(model, batch, graph, Direction.NOISE)
    oracle = edge_effects(model, batch, graph, runs=runs)
    as_scores = EdgeScores(ORACLE, graph.edges, oracle.effect, oracle.seconds)
    pruned = None if acdc_threshold is None or not compare_methods else acdc(model, batch, graph, acdc_threshold)
    fast = [eap(model, batch, graph), eap_ig(model, batch, graph, ig_steps)] if compare_methods else []
    joint = (
        [
            joint_search(model, batch, graph, runs, oracle.normalised()).scores,
            learned_masks(model, batch, graph, runs, oracle.normalised()).scores,
        ]
        if compare_methods and joint_methods
        else []
    )
    methods = [as_scores, *fast] + ([pruned] if pruned else []) + joint
    smallest = smallest_circuit(model, batch, graph, ORACLE, oracle.effect, runs)
    results = tuple(
        judged(model, batch, graph, oracle, m, runs, expected, smallest if m is as_scores else None) for m in methods
    )
    kept = None
    if pruned:
        assert pruned.circuit is not None  # acdc's scores always carry the edges it kept
        empty, circuit, full = circuit_outcomes(model, batch, graph, [[], pruned.circuit, graph.edges], runs)
        kept = normalised([circuit.metric], empty.metric, full.metric)[0]
    return EdgeCircuit(
        graph, len(batch), metric_name(batch), oracle, results, smallest, kept, expected, time.perf_counter() - began
    )


def run_edge_circuit(run, device=None, **options) -> EdgeCircuit:
    """edge_circuit on a trained run: its model (on `device`, default the CPU) and graph (from the
    run's spec), on the counterfactual pairs the circuit report patches (ReportSettings.pair_count
    evenly spread held-out pairs)."""
    from models.graph import graph_of
    from probes.settings import DEFAULT
    from tasks.data import spread_subset

    heldout = run.batches()["heldout"]
    pairs = spread_subset(heldout, DEFAULT.pair_count(heldout))
    options.setdefault("expected", run.task.expected_circuit(run.model_name, run.spec))
    return edge_circuit(run.load_model(device), pairs, graph_of(run.spec), **options)
