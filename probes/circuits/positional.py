"""The circuit resolved by position: every edge of the graph at each position where it can matter
(the sender's write at position p reaching the receiver input at p), ranked by the exact oracle,
the smallest top-k positional set reaching the circuit target, and how far it differs from the
position-aggregated circuit once its positions are dropped.

Only for tasks whose layout is fixed (every sequence of one length, scored at the same positions,
each named role at one position), where position p means the same role in every example.
Positions outside `live_positions` (before the first token a counterfactual changes, or after the
last scored position) are left out: there every write is the same in both runs or cannot reach a
scored logit, so those edges' effects are 0 by construction, and leaving them unpatched inside or
outside a circuit changes nothing.

Cost: one forward per positional edge. Edges whose aggregated effect alone is below REFINE of the
gap stay whole (one edge at every position) in the same graph, so every circuit is still judged
with every other write given its counterfactual value; only the resolution is coarser there, and
their effects alone are the aggregated oracle's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from models.graph import Edge, Graph, graph_of
from models.spec import ModelSpec
from models import Model
from probes.circuits.faithfulness import Faithfulness, normalised, ranked, scaled
from probes.circuits.oracle import Direction, EdgeEffects, Runs, circuit_outcomes, edge_effects, record_runs
from probes.patching import live_positions
from probes.settings import DEFAULT
from tasks.data import Batch

FIRST_CHUNK = 8  # circuit sizes measured first while looking for the smallest one (then 16, 32, ...)
REFINE = 0.01  # aggregated edges moving at least this share of the gap alone are resolved by position


@dataclass(frozen=True)
class PositionalCircuit:
    positions: tuple[int, ...]  # the live positions the graph resolves
    graph: Graph  # one edge per (sender, input, live position); below REFINE, whole edges
    effects: EdgeEffects  # every positional edge alone (direction "noise")
    edges: tuple[Edge, ...] | None  # smallest top-k positional circuit reaching `target` (None: none does)
    faithfulness: Faithfulness  # of `edges` (of the whole graph when None); clean = the whole graph,
    # empty = no edge, as measured
    target: float
    aggregated: tuple[Edge, ...]  # the position-aggregated circuit it is compared with

    @property
    def parents(self) -> tuple[Edge, ...]:
        """The positional circuit's edges with their positions dropped, in rank order, once each."""
        return tuple(dict.fromkeys(Edge(e.sender, e.receiver) for e in self.edges or ()))

    @property
    def changed_share(self) -> float:
        """Share of the two circuits' edges (positions dropped) that only one of them holds:
        0 = ignoring positions names the same edges, 1 = no edge in common."""
        mine, theirs = set(self.parents), set(self.aggregated)
        union = mine | theirs
        return len(mine ^ theirs) / len(union) if union else 0.0


def fixed_layout(batch: Batch) -> bool:
    """Every sequence has one length, is scored at the same positions and holds each role the task
    names at one position (probes.attention.role_places): markcopy's sequences are all 8 tokens,
    scored at 7, but its marker moves, so its position 3 is no one role."""
    from probes.attention import role_places

    if batch.counterfactual is None or bool((batch.lengths != batch.lengths[0]).any()):
        return False
    if role_places(batch) is not None:
        return False
    per_example = [tuple(batch.positions[batch.example_index == i].tolist()) for i in range(len(batch))]
    return len(set(per_example)) == 1


def positional_graph(spec: ModelSpec, positions: tuple[int, ...], oracle: EdgeEffects) -> Graph:
    """The graph's edges at each live position where the aggregated edge moves REFINE of the gap
    alone, the others whole."""
    whole = graph_of(spec)
    share = dict(zip(oracle.edges, oracle.normalised().abs().tolist()))
    refined = {e for e in whole.edges if share[e] >= REFINE}
    edges = tuple(Edge(e.sender, e.receiver, p) for e in whole.edges if e in refined for p in positions)
    edges += tuple(e for e in whole.edges if e not in refined)
    return Graph(whole.n_layers, whole.senders, whole.inputs, edges)


def positional_effects(model: Model, batch: Batch, graph: Graph, oracle: EdgeEffects, runs: Runs) -> EdgeEffects:
    """Every edge of the positional graph alone. A whole edge is the same patch as in the
    aggregated graph, so its effect is the oracle's (read, not run again); only the positional
    edges take a forward each."""
    began = time.perf_counter()
    resolved = Graph(
        graph.n_layers, graph.senders, graph.inputs, tuple(e for e in graph.edges if e.position is not None)
    )
    measured = dict(zip(resolved.edges, edge_effects(model, batch, resolved, runs=runs).effect.tolist()))
    whole = set(graph.edges) - set(resolved.edges)
    measured.update((e, v) for e, v in zip(oracle.edges, oracle.effect.tolist()) if e in whole)
    return EdgeEffects(
        runs.direction,
        graph.edges,
        torch.tensor([measured[e] for e in graph.edges]),
        runs.base.outcome,
        runs.other.outcome,
        len(batch),
        time.perf_counter() - began,
    )


def smallest(
    model: Model, batch: Batch, graph: Graph, order: list[Edge], runs: Runs, target: float
) -> tuple[tuple[Edge, ...] | None, Faithfulness]:
    """(the smallest top-k circuit of `order` reaching `target`, its faithfulness), or (None, the
    whole graph's faithfulness: 1 on the null scale by construction).
    Sizes are measured in growing chunks from k = 1: the circuit is usually about the aggregated
    one's size, so a first chunk much larger than that would measure sizes never needed."""
    empty, full = circuit_outcomes(model, batch, graph, [[], graph.edges], runs)
    first, chunk = 1, FIRST_CHUNK
    while first <= len(order):
        sizes = range(first, min(first + chunk, len(order) + 1))
        outcomes = circuit_outcomes(model, batch, graph, [order[:k] for k in sizes], runs)
        shares = normalised([o.metric for o in outcomes], empty.metric, full.metric)
        hit = next((i for i, f in enumerate(shares) if f >= target), None)
        if hit is not None:
            return tuple(order[: sizes[hit]]), scaled(outcomes[hit], full, runs.other.outcome, empty)
        first, chunk = first + chunk, 2 * chunk
    return None, scaled(full, full, runs.other.outcome, empty)


def positional_circuit(
    model: Model,
    batch: Batch,
    spec: ModelSpec,
    oracle: EdgeEffects,
    aggregated: tuple[Edge, ...],
    target: float = DEFAULT.circuit_target,
    runs: Runs | None = None,
) -> PositionalCircuit:
    """`oracle`: the aggregated graph's edge effects on `batch`; `aggregated`: its circuit; `runs`:
    the oracle's recorded runs (record_runs on the aggregated graph, whose senders this graph shares)."""
    positions = tuple(live_positions(batch))
    graph = positional_graph(spec, positions, oracle)
    runs = runs or record_runs(model, batch, graph, Direction.NOISE)
    effects = positional_effects(model, batch, graph, oracle, runs)
    found, kept = smallest(model, batch, graph, ranked(graph.edges, effects.effect), runs, target)
    return PositionalCircuit(positions, graph, effects, found, kept, target, tuple(aggregated))


def strongest(result: PositionalCircuit, count: int) -> list[tuple[Edge, float]]:
    """The positional circuit's `count` edges of largest |effect|, with their share of the gap alone."""
    share = dict(zip(result.graph.edges, result.effects.normalised().tolist()))
    edges = sorted(result.edges or (), key=lambda e: -abs(share[e]))[:count]
    return [(e, share[e]) for e in edges]


def effect_by_position(result: PositionalCircuit) -> dict[Edge, torch.Tensor]:
    """Per aggregated edge of the positional circuit, its positional edges' shares alone [positions]."""
    share = dict(zip(result.graph.edges, result.effects.normalised().tolist()))
    return {
        parent: torch.tensor(
            [share.get(Edge(parent.sender, parent.receiver, p), float("nan")) for p in result.positions]
        )
        for parent in result.parents
    }
