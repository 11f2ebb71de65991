"""Redundancy in a circuit, measured on the exact oracle: which of its parts are necessary, which
suffice, which are interchangeable, and how far single-edge effects fail to add up.

Groups: the circuit's edges leaving one sender (a head or an MLP). Peers: the groups of one
layer's heads (backup heads sit beside the heads they back up); an MLP has no peer. For a group g of
circuit C, on the faithfulness scale f (0 = empty circuit, 1 = full model):
- necessity   = f(C) - f(C without g)              what knocking g out alone costs;
- sufficiency = f(C without every peer of g)       what g keeps alone among its peers.
A layer's peers are alternatives when two or more each suffice (sufficiency >= SUFFICES x f(C))
while none is necessary (necessity < NECESSARY); they share the answer when none suffices alone and
their single knock-outs add up to less than knocking all of them out.
Additivity: the sum over C's edges of each edge's share of the gap knocked out alone (the oracle's
single-edge effect), over f(C). 1: the edges add up; below 1: they overlap (an OR, a backup: single
effects miss what the set does); above 1: they are in series (each link of a chain alone removes
the whole effect, so a chain of k edges reads k).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

from models.graph import MLP, Embed, Graph, Head
from models import Model
from probes.circuits.methods.joint import JointCircuit, SetFaithfulness, joint_search
from probes.circuits.oracle import Direction, Runs, record_runs
from tasks.data import Batch


class Structure(Enum):
    """How a circuit's parts share the answer."""

    SERIES = "series"  # every part necessary on its own (a chain, an AND) or adding up
    ALTERNATIVES = "alternatives"  # two or more parts each suffice; none is necessary
    SHARED = "shared"  # parts each carry part; none suffices alone, their knock-outs overlap


REPORT_ALTERNATIVES = 2  # stand-in searches the report runs where an edge is backed up (each one a
# whole joint search: 20-80 s on the induction runs at load ~25)
NECESSARY = 0.1  # knocking a group out costs at least this share of the gap
SUFFICES = 0.9  # a group alone among its peers keeps at least this share of the circuit's faithfulness


@dataclass(frozen=True)
class Group:
    sender: Head | MLP
    edges: frozenset
    necessity: float
    sufficiency: float | None  # None: the group has no peer in the circuit


@dataclass(frozen=True)
class Peers:
    """The groups of one layer's heads in the circuit, and what they are to each other."""

    layer: int
    groups: tuple[Group, ...]
    together: float  # f(C) - f(C without every group of the layer): knocking all out costs
    suffices: float  # the sufficiency bar: SUFFICES x f(C)

    @property
    def overlap(self) -> float:
        """Sum of the groups' necessities over what knocking them all out costs: 1 = they add up,
        0 = each alone costs nothing though together they carry the answer."""
        return sum(g.necessity for g in self.groups) / self.together if self.together else float("nan")

    @property
    def alternatives(self) -> tuple[Group, ...]:
        """The groups that each suffice, when none of the layer's groups is necessary."""
        if len(self.groups) < 2 or any(g.necessity >= NECESSARY for g in self.groups):
            return ()
        sufficient = tuple(g for g in self.groups if g.sufficiency is not None and g.sufficiency >= self.suffices)
        return sufficient if len(sufficient) >= 2 else ()

    @property
    def shared(self) -> bool:
        """No group suffices alone, and their single knock-outs add up to less than knocking all out
        (by more than NECESSARY): each carries part of an answer the others also carry."""
        return (
            len(self.groups) >= 2
            and not self.alternatives
            and self.together >= NECESSARY
            and all(g.sufficiency is not None and g.sufficiency < self.suffices for g in self.groups)
            and sum(g.necessity for g in self.groups) < self.together - NECESSARY
        )


@dataclass(frozen=True)
class Redundancy:
    circuit: frozenset
    faithfulness: float  # f(C)
    groups: tuple[Group, ...]  # one per sender with an edge in the circuit
    peers: tuple[Peers, ...]  # one per layer with a head in the circuit
    additivity: float  # sum of C's single-edge shares / f(C)
    backed_up: frozenset  # edges of C whose knock-out from C costs >= NECESSARY, alone < NECESSARY
    pairs: int

    @property
    def alternative_sets(self) -> tuple[Peers, ...]:
        return tuple(p for p in self.peers if p.alternatives)

    @property
    def shared_sets(self) -> tuple[Peers, ...]:
        return tuple(p for p in self.peers if p.shared)

    @property
    def redundant(self) -> bool:
        """Some layer's heads are alternatives or share the answer, some edge is needed in the circuit
        but not in the full model (something outside or inside stands in for it: an OR's signature),
        or the single-edge effects add up to less than the circuit's faithfulness."""
        return bool(self.alternative_sets or self.shared_sets or self.backed_up) or self.additivity < 1 - NECESSARY

    @property
    def structure(self) -> Structure:
        return (
            Structure.ALTERNATIVES
            if self.alternative_sets
            else Structure.SHARED
            if self.shared_sets
            else Structure.SERIES
        )


def redundancy(
    model: Model, batch: Batch, graph: Graph, circuit: frozenset, single: torch.Tensor, runs: Runs | None = None
) -> Redundancy:
    """`single`: every edge's effect knocked out alone as a share of the gap (the oracle's
    EdgeEffects.normalised()). Costs 2 x groups + layers + edges + 1 faithfulness measurements, batched."""
    runs = runs or record_runs(model, batch, graph, Direction.NOISE)
    f = SetFaithfulness(model, batch, graph, runs)
    circuit = frozenset(circuit)
    out_of: dict = {}
    for edge in circuit:
        if not isinstance(edge.sender, Embed):
            out_of.setdefault(edge.sender, set()).add(edge)
    senders = sorted(out_of, key=lambda s: (s.layer, isinstance(s, MLP), getattr(s, "head", 0)))
    heads = [s for s in senders if isinstance(s, Head)]
    layers = sorted({s.layer for s in heads})
    peers_of = {s: [h for h in heads if h.layer == s.layer] if isinstance(s, Head) else [s] for s in senders}
    sets = [circuit]
    sets += [circuit - out_of[s] for s in senders]
    sets += [circuit - frozenset().union(*(out_of[p] for p in peers_of[s] if p != s)) for s in senders]
    sets += [circuit - frozenset().union(*(out_of[h] for h in heads if h.layer == layer)) for layer in layers]
    edges = [e for e in graph.edges if e in circuit]
    sets += [circuit - {e} for e in edges]
    values = f(sets)
    within = values[len(values) - len(edges) :]
    values = values[: len(values) - len(edges)]
    whole, without, alone_among, without_layer = (
        values[0],
        values[1 : 1 + len(senders)],
        values[1 + len(senders) : 1 + 2 * len(senders)],
        values[1 + 2 * len(senders) :],
    )
    groups = {
        s: Group(s, frozenset(out_of[s]), whole - w, a if len(peers_of[s]) > 1 else None)
        for s, w, a in zip(senders, without, alone_among)
    }
    peers = tuple(
        Peers(layer, tuple(groups[h] for h in heads if h.layer == layer), whole - gone, SUFFICES * whole)
        for layer, gone in zip(layers, without_layer)
    )
    share = dict(zip(graph.edges, single.abs().tolist()))
    additivity = sum(share[e] for e in circuit) / whole if whole else float("nan")
    backed_up = frozenset(e for e, w in zip(edges, within) if whole - w >= NECESSARY and share[e] < NECESSARY)
    return Redundancy(circuit, whole, tuple(groups[s] for s in senders), peers, additivity, backed_up, len(batch))


@dataclass(frozen=True)
class CircuitStructure:
    """A named circuit's redundancy, the joint search's circuit pruned from the named one by joint
    effect (any edge may come back), with at most REPORT_ALTERNATIVES stand-in searches where an
    edge is backed up, and that circuit's redundancy. The joint search runs on every traced circuit:
    pruned from the named circuit it costs about the oracle's time (benchmarks/joint_speed.py
    prints the ratio on the main job's block-2 runs), and a circuit whose single effects do add up
    can still have a smaller one at the same faithfulness (the headline then: `headline`)."""

    named: Redundancy
    joint: JointCircuit
    joint_redundancy: Redundancy


def report_joint(
    model: Model, batch: Batch, graph: Graph, named: Redundancy, single: torch.Tensor, runs: Runs
) -> JointCircuit:
    """The joint search as the report runs it: pruned from the named circuit by joint effect (any
    edge may come back), REPORT_ALTERNATIVES stand-in searches where an edge is backed up, and the
    circuit pruned to the target (timed against the oracle in benchmarks/joint_speed.py)."""
    return joint_search(
        model,
        batch,
        graph,
        runs,
        single,
        start=named.circuit,
        alternatives=REPORT_ALTERNATIVES if named.backed_up else 0,
        tighten=True,
    )


def circuit_structure(
    model: Model, batch: Batch, graph: Graph, circuit: frozenset, single: torch.Tensor, runs: Runs | None = None
) -> CircuitStructure:
    runs = runs or record_runs(model, batch, graph, Direction.NOISE)
    named = redundancy(model, batch, graph, circuit, single, runs)
    joint = report_joint(model, batch, graph, named, single, runs)
    return CircuitStructure(named, joint, redundancy(model, batch, graph, joint.circuit, single, runs))


def headline(result, structure) -> tuple[frozenset, float, str]:
    """(edges, faithfulness, which method): the smallest circuit the methods found at the target. The
    joint search's circuit pruned to the target headlines when it reaches the target with fewer
    edges than the oracle ranking's, whether or not the ranking's single-edge effects add up."""
    ranked = (frozenset(result.circuit.edges), result.circuit.faithfulness.normalised, "oracle ranking")
    tight = None if structure is None else structure.joint.at_target
    if tight is not None and tight.faithfulness >= result.circuit.target and len(tight.circuit) < len(ranked[0]):
        return frozenset(tight.circuit), tight.faithfulness, "joint search"
    return ranked
