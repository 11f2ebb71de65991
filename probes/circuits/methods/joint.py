"""Circuits found by the effect of the SET of edges kept, on the exact oracle
(probes.circuits.oracle.circuit_outcomes), not by ranking edges one at a time.

Faithfulness of a set C: f(C) = (m(C) - m(empty)) / (m(full) - m(empty)), every edge outside C given
its other-run write (the counterfactual, or a mean or zero write: probes.circuits.ablations); 0 = the
empty circuit, 1 = the full model.

`prune` finds one circuit in three passes:
1. removal by joint effect (ACDC, Conmy et al. 2023): from the allowed edges, receivers from the
   logits backwards, an edge is dropped when dropping it from the current circuit costs less than
   `threshold` of f (a receiver's edges tried cheapest first, batched: `remove_into`);
2. greedy forward selection by marginal gain: while f < target (small drops add up), the dropped
   edge whose return gains most comes back (all candidates measured in one batched call);
3. backward pruning of what adds nothing: while some kept edge can go at a cost below `threshold`
   with f staying >= target, the cheapest goes.
An OR pair (two branches, either suffices) loses one branch in pass 1: no single drop of the first
branch costs anything. `joint_search` therefore asks, for every kept edge that is not necessary on
its own in the full model (knocking it out alone costs < threshold), which edges carry the answer
without it: `prune` again with that edge forbidden. The replaced edges and their replacement are
an Alternative, and the circuit is the union, so the pair is found as a pair and a chain (every
link necessary) as a chain.

An edge's score is the largest cost of dropping it measured in any pass, as a change of the metric
(the oracle's sign: negative where dropping the edge lowers it): kept edges cost >= threshold of
the gap, dropped ones less, so the ranking by |score| puts the circuit first.
Cost: pass 1 is two batched calls per receiver input (and per edge that must stay, two more for
the edges after it); passes 2 and 3 one batched call per step; an alternative one more `prune`.
Measured in benchmarks/circuit_graph.py.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from common.stats import share
from models.graph import Edge, Graph
from models import Model
from probes.circuits.methods.attribution import EdgeScores
from probes.circuits.oracle import Direction, Runs, circuit_outcomes, record_runs
from tasks.data import Batch

THRESHOLD = 0.01  # of the gap: a drop costing less adds nothing
TARGET = 0.9  # faithfulness a circuit must keep
PARTIAL = 0.25  # share of the gap left without an edge from which its partial backup is searched
MAX_ALTERNATIVES = 8  # stand-in searches per circuit: each is a whole search again (on fresh block-2
# weights most edges are individually unnecessary, and 40+ searches took minutes)


class SetFaithfulness:
    """f of edge sets on the exact oracle, counting the sets measured (the search's cost). A set is
    measured once: the passes ask again for sets they already measured (pass 3's last step is
    `at_target`'s first, a circuit's own f after its search), and a forward costs the same anyway."""

    def __init__(self, model: Model, batch: Batch, graph: Graph, runs: Runs):
        self.model, self.batch, self.graph, self.runs = model, batch, graph, runs
        self.empty, self.full = runs.other.outcome.metric, runs.base.outcome.metric
        self.known: dict[frozenset, float] = {}

    @property
    def measured(self) -> int:
        return len(self.known)

    def __call__(self, circuits: list[frozenset]) -> list[float]:
        new = list(dict.fromkeys(frozenset(c) for c in circuits if frozenset(c) not in self.known))
        if new:
            outcomes = circuit_outcomes(self.model, self.batch, self.graph, [list(c) for c in new], self.runs)
            self.known.update((c, share(o.metric, self.empty, self.full)) for c, o in zip(new, outcomes))
        return [self.known[frozenset(c)] for c in circuits]


def in_graph_order(graph: Graph, edges) -> list[Edge]:
    return [e for e in graph.edges if e in edges]


@dataclass(frozen=True)
class Pruned:
    circuit: frozenset
    faithfulness: float
    cost: dict  # edge -> its score: here the largest drop of f measured when removing it


def prune(
    f: SetFaithfulness,
    allowed: frozenset,
    threshold: float = THRESHOLD,
    target: float = TARGET,
    start: frozenset | None = None,
) -> Pruned:
    """Passes 1-3 over `allowed`; pass 1 starts from `start` (a subset of allowed; default all of
    it), and pass 2 may bring back any allowed edge."""
    cost: dict = {}

    def note(edge, drop):
        cost[edge] = max(cost.get(edge, 0.0), drop)

    current = frozenset(allowed if start is None else start)
    value = f([current])[0]
    for receiver in reversed(f.graph.inputs):  # pass 1: ACDC order, joint effect
        candidates = [e for e in f.graph.into(receiver) if e in current]
        while candidates:
            current, value, candidates = remove_into(f, current, value, candidates, threshold, note)
    while value < target and len(current) < len(allowed):  # pass 2: forward selection
        candidates = in_graph_order(f.graph, allowed - current)
        gains = f([current | {edge} for edge in candidates])
        best = max(range(len(candidates)), key=lambda i: gains[i])
        note(candidates[best], gains[best] - value)
        current, value = current | {candidates[best]}, gains[best]
    current, value = backward(f, current, value, threshold, target, note)  # pass 3
    return Pruned(current, value, cost)


def backward(f: SetFaithfulness, current: frozenset, value: float, threshold: float, target: float, note):
    """Pass 3: while the cheapest kept edge costs less than `threshold` and dropping it keeps f >=
    target, drop it (all kept edges measured in one batched call per step)."""
    while len(current) > 1:
        kept = in_graph_order(f.graph, current)
        without = f([current - {edge} for edge in kept])
        for edge, trial in zip(kept, without):
            note(edge, value - trial)
        cheapest = max(range(len(kept)), key=lambda i: without[i])
        if value - without[cheapest] >= threshold or without[cheapest] < target:
            break
        current, value = current - {kept[cheapest]}, without[cheapest]
    return current, value


def at_target(f: SetFaithfulness, circuit: frozenset, target: float = TARGET) -> Pruned:
    """`circuit` pruned backwards with no threshold: the cheapest edge goes while f stays >= target,
    so the result keeps about the target, as the oracle-ranked cut does (the same faithfulness to
    compare sizes at); cost: the drop of f measured for each edge on the way."""
    cost: dict = {}

    def note(edge, drop):
        cost[edge] = max(cost.get(edge, 0.0), drop)

    current, value = backward(f, frozenset(circuit), f([frozenset(circuit)])[0], float("inf"), target, note)
    return Pruned(current, value, cost)


def remove_into(f: SetFaithfulness, current: frozenset, value: float, candidates: list, threshold: float, note):
    """One round of ACDC's sequential removal over one receiver's edges, batched: the edges are
    tried cheapest first (each one's cost alone given `current`, one batched call), and every
    prefix of that order is measured at once (a second call), which is exactly what trying them
    one after another measures up to the first edge that must stay. Returns the new circuit, its
    f, and the edges after that first kept one (untried: they are tried again from the new circuit)."""
    alone = f([current - {e} for e in candidates])
    order = sorted(range(len(candidates)), key=lambda i: value - alone[i])
    ordered = [candidates[i] for i in order]
    prefixes = f([current - frozenset(ordered[: j + 1]) for j in range(len(ordered))])
    before = value
    for j, edge in enumerate(ordered):
        note(edge, before - prefixes[j])
        if before - prefixes[j] >= threshold:
            return current - frozenset(ordered[:j]), before, ordered[j + 1 :]
        before = prefixes[j]
    return current - frozenset(ordered), before, []


@dataclass(frozen=True)
class Alternative:
    """Edges of the first circuit the model can do without, and the edges that carry the answer
    when they are gone: each set suffices (with the rest of the circuit), neither is necessary."""

    replaced: frozenset
    replacement: frozenset
    faithfulness: float  # of the circuit found without the replaced edges


@dataclass(frozen=True)
class JointCircuit:
    circuit: frozenset  # the first circuit and every alternative's replacement
    first: Pruned  # the circuit pass 1-3 found from the whole graph
    alternatives: tuple[Alternative, ...]
    faithfulness: float  # of `circuit`
    scores: EdgeScores  # per edge: the largest cost of dropping it measured
    sets_measured: int  # faithfulness evaluations (the search's cost)
    at_target: Pruned | None = None  # `circuit` pruned down to the target (joint_search's tighten)


def with_alternatives(
    find,
    f: SetFaithfulness,
    first: Pruned,
    alone: dict,
    threshold: float,
    target: float,
    limit: int = MAX_ALTERNATIVES,
):
    """The first circuit and, for every kept edge not necessary alone (`alone[e]` < threshold; the
    first `limit` of them in graph order), the circuit `find(allowed, goal)` reaches without it:
    (union, alternatives, every edge's largest score). A replacement's own edges that are not
    necessary alone are asked in turn, with what they replaced still forbidden, so a third branch
    of an OR of three is found (each search forbids one edge only, so otherwise the second branch
    would be every first-circuit edge's stand-in and the third never asked for). Every allowed edge
    together is measured first (`f([allowed])`, one measurement): where it keeps the target, the
    search aims at the target.

    A kept edge whose knock-out alone leaves at least PARTIAL of the gap (`alone[e]` <= 1 - PARTIAL)
    may have a partial backup: where every allowed edge together keeps a share s in [PARTIAL,
    target), the search aims at target x s, so the edges that carry what is left are found (a
    layer-1 head that keeps 50% when the layer-0 head that keeps 100% is gone); below PARTIAL no
    search runs. Those are asked after the edges with a whole backup, so the `limit` is spent on
    them first."""
    scores, circuit, alternatives = dict(first.cost), set(first.circuit), []
    everything = frozenset(f.graph.edges)

    # (the edge to do without, the edges already forbidden on its way, the circuit it belongs to)
    def asked(edges, before: frozenset, base: frozenset) -> list:
        ordered = in_graph_order(f.graph, edges)
        whole = [e for e in ordered if alone[e] < threshold]
        partly = [e for e in ordered if threshold <= alone[e] <= 1 - PARTIAL]
        return [(e, before, base) for e in whole + partly]

    queue = asked(first.circuit, frozenset(), first.circuit)
    searches = 0
    while queue and searches < limit:
        edge, before, base = queue.pop(0)
        forbidden = before | {edge}
        left = f([everything - forbidden])[0]
        if left < PARTIAL:
            continue
        goal = target if left >= target else target * left
        searches += 1
        other = find(everything - forbidden, goal)
        for e, c in other.cost.items():
            scores[e] = max(scores.get(e, 0.0), c)
        if other.faithfulness < goal:
            continue
        replaced, replacement = base - other.circuit, other.circuit - base
        alternatives.append(Alternative(frozenset(replaced), frozenset(replacement), other.faithfulness))
        circuit |= other.circuit
        queue = [entry for entry in queue if not (entry[1] == before and entry[0] in replaced)]
        queue += asked(replacement, before | replaced, other.circuit)
    return frozenset(circuit), tuple(alternatives), scores


def single_shares(model: Model, batch: Batch, graph: Graph, runs: Runs, single: torch.Tensor | None) -> dict:
    """Edge -> |share of the gap| knocking it out alone costs (the oracle's, measured when not given)."""
    from probes.circuits.oracle import edge_effects

    if single is None:
        single = edge_effects(model, batch, graph, runs=runs).normalised()
    return dict(zip(graph.edges, single.abs().tolist()))


def joint_search(
    model: Model,
    batch: Batch,
    graph: Graph,
    runs: Runs | None = None,
    single: torch.Tensor | None = None,
    threshold: float = THRESHOLD,
    target: float = TARGET,
    alternatives: int = MAX_ALTERNATIVES,
    start: frozenset | None = None,
    tighten: bool = False,
) -> JointCircuit:
    """`single`: each edge's normalised effect knocked out alone (the oracle's; measured when not
    given) decides which kept edges may have a backup; `alternatives`: how many stand-in searches
    at most (0 stops at the first circuit, one `prune`, without stand-ins); `start`: where the
    first pruning begins (default the whole graph; pass 2 may still add any edge); `tighten`: also
    prune the circuit down to the target (`at_target`: its size at the oracle-ranked cut's
    faithfulness, where the search itself stops at edges costing >= threshold each)."""
    began = time.perf_counter()
    runs = runs or record_runs(model, batch, graph, Direction.NOISE)
    f = SetFaithfulness(model, batch, graph, runs)
    first = prune(f, frozenset(graph.edges), threshold, target, start)
    circuit, found, costs = first.circuit, (), first.cost
    if alternatives:
        alone = single_shares(model, batch, graph, runs, single)
        circuit, found, costs = with_alternatives(
            lambda allowed, goal: prune(f, allowed, threshold, goal), f, first, alone, threshold, target, alternatives
        )
    value = f([circuit])[0]
    score = torch.tensor([costs.get(e, 0.0) for e in graph.edges], device="cpu") * (f.empty - f.full)
    scores = EdgeScores(
        f"joint search (threshold {threshold:g})", graph.edges, score, time.perf_counter() - began, circuit
    )
    return JointCircuit(
        circuit, first, found, value, scores, f.measured, at_target(f, circuit, target) if tighten else None
    )
