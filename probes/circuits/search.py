"""The head view of a circuit and its search (the report's measuring is probes.report.run_analysis,
its command toylens.report).

A head circuit names heads, each kept at every position or pinned to a few. As a circuit it is a
set of edges of the model's graph (models.graph), in `head_graph`, where every head's out-edges are
resolved by position: every edge out of the embeddings, the MLPs and its heads (a pinned head's at
its positions only). Every other edge, each out of a head the circuit drops, carries that head's
mean write at that position over a reference batch (probes.circuits.ablations, Ablation.MEAN), and
the exact oracle (probes.circuits.oracle) runs the clean input so. Every reader of a dropped head
then reads its mean output: node ablation, equal to mean-ablating the head's z (tested). Edges
INTO a dropped head are kept: every write of that head is replaced, so they cannot move the metric,
and leaving them saves recomputing its inputs. MLPs and embeddings are always kept. Where the stream
is no sum of writes for the oracle to decompose (post-norm blocks, attention replacing the stream:
models.bridge.stream_is_a_sum), the same node ablation replaces the dropped heads' z in the forward
itself (`z_ablated_outcomes`).

Faithfulness (probes.circuits.faithfulness.Faithfulness) is on both scales; the empty circuit
mean-ablates every head. A circuit whose dropped edges cannot reach a scored logit is the full
model at those logits: its faithfulness is 1 by construction (`upstream_complete`).

Search: rank heads by how much knocking each one out of the full model loses, add them in that
order until the circuit recovers `target` of the gap, drop any it can do without, then try to pin
each head to its few most important positions (from activation patching). Each step measures its
candidate circuits in batched oracle calls (the knock-outs in one; added heads and pinned positions
a few at a time, since measuring past the first that reaches the target costs forwards), and no
circuit is measured twice. Edges between circuit heads are measured by exact path patching
(probes.circuits.path_patching).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Iterable, Optional

import torch
from transformer_lens.utilities import get_act_name

from common.stages import timed
from models.bridge import device_of, stream_is_a_sum
from models.components import Head
from models.graph import MLP, Edge, Graph, Logits
from models import Model
from probes.ablation import replacement_z
from probes.circuits.ablations import Ablation, ablated_runs
from probes.circuits.faithfulness import Faithfulness, scaled
from probes.circuits.oracle import circuit_outcomes, model_graph
from probes.patching import (
    Outcome,
    corrupt_inputs,
    live_positions,
    outcome,
    replica_scored,
    replicas_per_forward,
    run_outcome,
)
from tasks.data import Batch

MAX_POSITIONS = 3
PREFIXES_PER_CALL = 2  # rank-order prefixes measured a call while adding heads

Kept = dict  # Head -> the positions its writes are kept at (a sorted tuple; None: every position)


def where(head: Head, positions: Optional[tuple[int, ...]]) -> str:
    """'L0H1@all positions', 'L1H0@p14'."""
    return f"{head}@" + ("all positions" if positions is None else "/".join(f"p{p}" for p in positions))


def every_position(heads: Iterable) -> Kept:
    """Heads (Heads, (layer, head) pairs or names) kept at every position."""
    return {Head.of(head): None for head in heads}


def head_graph(model: Model, width: int) -> Graph:
    """The model's graph with every head's out-edges resolved by position (0 .. width - 1)."""
    graph = model_graph(model)
    edges = tuple(
        Edge(e.sender, e.receiver, p)
        for e in graph.edges
        for p in (range(width) if isinstance(e.sender, Head) else (None,))
    )
    return Graph(graph.n_layers, graph.senders, graph.inputs, edges)


def circuit_edges(graph: Graph, kept: Kept) -> list[Edge]:
    """The edges of `graph` (a head_graph) the head circuit keeps: every edge whose sender is not a
    head, or is a kept head at one of its kept positions."""
    return [
        e
        for e in graph.edges
        if not isinstance(e.sender, Head)
        or (e.sender in kept and (kept[e.sender] is None or e.position in kept[e.sender]))
    ]


class HeadCircuits:
    """Faithfulness of head circuits on `batch` (many per oracle call), outside heads given their
    mean write over `reference` (a Batch, or a probes.ablation.Reference). `clean` and `corrupt`:
    those runs' Outcomes, when already measured."""

    def __init__(
        self,
        model: Model,
        batch: Batch,
        reference,
        clean: Outcome | None = None,
        corrupt: Outcome | None = None,
        by_z: bool | None = None,
    ):
        self.model, self.batch = model, batch.to(device_of(model))
        self.graph = head_graph(model, self.batch.inputs.shape[1])
        # by_z: each dropped head's z replaced in the forward itself, where the residual stream is not
        # the sum the edge oracle decomposes (post-norm, attention replacing the stream); the same
        # node ablation, so both ways give one circuit's faithfulness (tested).
        self.by_z = not stream_is_a_sum(model) if by_z is None else by_z
        if self.by_z:
            layers = range(model.cfg.n_layers)
            self.values = replacement_z(model, self.batch, layers, Ablation.MEAN, 0, reference)
        else:
            # Recorded on the whole-edge graph: the writes are per sender, and its empty circuit (every
            # edge ablated at every position) is this graph's, in fewer edges.
            self.runs = ablated_runs(model, self.batch, model_graph(model), Ablation.MEAN, reference)
        self.clean = clean or run_outcome(model, self.batch, self.batch.inputs)
        self.corrupt = corrupt or run_outcome(model, self.batch, corrupt_inputs(self.batch))
        self.measured: dict[tuple, Outcome] = {}
        self.empty = self.outcomes([{}])[0]

    def outcomes(self, circuits: list[Kept]) -> list[Outcome]:
        """Each circuit's Outcome; circuits measured before are not measured again."""
        keys = [tuple(sorted(kept.items())) for kept in circuits]
        new = list({key: kept for key, kept in zip(keys, circuits) if key not in self.measured}.items())
        if not new:
            found = []
        elif self.by_z:
            found = z_ablated_outcomes(self.model, self.batch, self.values, [kept for _, kept in new])
        else:
            edges: list[Iterable[Edge]] = [circuit_edges(self.graph, kept) for _, kept in new]
            found = circuit_outcomes(self.model, self.batch, self.graph, edges, self.runs)
        self.measured.update(zip([key for key, _ in new], found))
        return [self.measured[key] for key in keys]

    def __call__(self, circuits: list[Kept]) -> list[Faithfulness]:
        return [scaled(o, self.clean, self.corrupt, self.empty) for o in self.outcomes(circuits)]


@torch.no_grad()
def z_ablated_outcomes(model: Model, batch: Batch, values: dict, circuits: list[Kept]) -> list[Outcome]:
    """Each circuit's Outcome with every head outside it (at every position it is not kept at) given
    `values[layer]` ([n, pos, head, d_head], probes.ablation.replacement_z) for its z; circuits share
    forwards as replicas of the batch (probes.patching.replicas_per_forward)."""
    n, width = batch.inputs.shape
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    found: list[Outcome] = []
    for first in range(0, len(circuits), replicas_per_forward(batch)):
        chunk = circuits[first : first + replicas_per_forward(batch)]
        dropped = torch.ones(len(chunk), n_layers, width, n_heads, dtype=torch.bool, device=batch.tokens.device)
        for replica, kept in enumerate(chunk):
            for head, positions in kept.items():
                dropped[replica, head.layer, slice(None) if positions is None else list(positions), head.head] = False

        def replace(z, hook, layer):
            z = z.view(len(chunk), n, *z.shape[1:])
            where = dropped[:, layer, None, : z.shape[2], :, None]
            return torch.where(where, values[layer][None, :, : z.shape[2]], z).flatten(0, 1)

        hooks = [(get_act_name("z", layer), partial(replace, layer=layer)) for layer in range(n_layers)]
        logits = model.run_with_hooks(batch.inputs.repeat(len(chunk), 1), fwd_hooks=hooks)
        found += outcome(replica_scored(logits, batch), batch)
    return found


def faithfulness(model: Model, batch: Batch, kept, reference) -> Faithfulness:
    """One head circuit's Faithfulness on `batch`: `kept` a Kept mapping, or heads kept at every
    position; means over `reference` (a notebook passes probes.ablation.training_reference(run)
    for the report's numbers)."""
    kept = kept if isinstance(kept, dict) else every_position(kept)
    return HeadCircuits(model, batch, reference)([kept])[0]


def reaches_scored(edge: Edge, scored: set[int], n_layers: int) -> bool:
    """Whether an edge's write can change a scored logit: a write at position p reaches positions >=
    p only, and p alone where its receiver works position by position up to the logits (the logits,
    the last block's MLP, a last-block head's query)."""
    if edge.position is None:
        return True
    if edge.position > max(scored):
        return False
    node, last = edge.receiver.node, n_layers - 1
    position_wise = (
        isinstance(node, Logits)
        or (isinstance(node, MLP) and node.layer == last)
        or (isinstance(node, Head) and node.layer == last and edge.receiver.port == "q")
    )
    return edge.position in scored or not position_wise


def upstream_complete(graph: Graph, edges: Iterable[Edge], batch: Batch) -> bool:
    """Whether the circuit `edges` keeps every edge of `graph` whose write can reach a scored logit.
    Ablating outside such a circuit changes no scored logit, so its faithfulness is 1 by
    construction."""
    scored, kept = set(batch.positions.tolist()), set(edges)
    return not any(reaches_scored(e, scored, graph.n_layers) for e in graph.edges if e not in kept)


@dataclass(frozen=True)
class Circuit:
    kept: Kept  # the heads in order, and the positions each is kept at
    faithfulness: Faithfulness  # the heads as found (pinned to positions where possible)
    head_faithfulness: Faithfulness  # the same heads at every position
    knockout: dict[Head, Faithfulness]  # head -> the full model with only that head mean-ablated
    trace: list[tuple[tuple[Head, ...], float, float]]  # the search step by step: heads, recovered, normalised
    upstream: bool = False  # the circuit keeps every edge that can reach the scored logits
    head_upstream: bool = False  # ... its heads at every position do

    @property
    def heads(self) -> tuple[Head, ...]:
        return tuple(self.kept)

    def describe(self) -> tuple[str, ...]:
        return tuple(where(head, positions) for head, positions in self.kept.items())


def all_heads(model: Model) -> list[Head]:
    return [Head(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]


@timed("circuit search")
def search_circuit(model: Model, batch: Batch, reference, patching, target: float = 0.9) -> Circuit:
    """The fewest heads (then positions) whose circuit keeps `target` of the clean - counterfactual
    gap. `batch` holds counterfactual pairs, `reference` the examples mean ablation averages over,
    `patching` the batch's probes.patching.ActivationPatching."""
    measure = HeadCircuits(model, batch, reference, patching.clean, patching.corrupt)
    heads = all_heads(model)
    knockout = dict(zip(heads, measure([every_position(g for g in heads if g != h) for h in heads])))
    restore = {h: abs(float(patching.recovered(patching.head_all[h]))) for h in heads}
    ranked = sorted(heads, key=lambda h: (-(1 - knockout[h].recovered), -restore[h]))
    trace = []
    chosen = drop_unneeded(measure, add_in_order(measure, ranked, target, trace), target, trace)
    kept = pin_positions(measure, every_position(sorted(chosen)), patching, target)
    found, whole = measure([kept, every_position(sorted(chosen))])
    graph = measure.graph
    return Circuit(
        kept,
        found,
        whole,
        knockout,
        trace,
        upstream_complete(graph, circuit_edges(graph, kept), measure.batch),
        upstream_complete(graph, circuit_edges(graph, every_position(chosen)), measure.batch),
    )


def first_reaching(measure: HeadCircuits, trials: list[Kept], target: float, per_call: int):
    """(index, Faithfulness) of the first trial recovering `target` (None, None if none does),
    measuring `per_call` trials a call: a batch costs one forward per replica on a CPU, so trials
    after the first hit are not worth measuring."""
    for first in range(0, len(trials), per_call):
        results = measure(trials[first : first + per_call])
        hit = next((i for i, r in enumerate(results) if r.recovered >= target), None)
        if hit is not None:
            return first + hit, results[hit]
    return None, None


def add_in_order(measure: HeadCircuits, ranked: list[Head], target: float, trace: list) -> list[Head]:
    """The shortest prefix of `ranked` reaching `target` (all of it when none does)."""
    prefixes = [every_position(ranked[:k]) for k in range(1, len(ranked) + 1)]
    hit, _ = first_reaching(measure, prefixes, target, PREFIXES_PER_CALL)
    chosen = ranked if hit is None else ranked[: hit + 1]
    for k, result in enumerate(measure(prefixes[: len(chosen)]), 1):
        trace.append((tuple(ranked[:k]), result.recovered, result.normalised))
    return list(chosen)


def drop_unneeded(measure: HeadCircuits, chosen: list[Head], target: float, trace: list) -> list[Head]:
    """Last added first, drop each head the circuit still reaches `target` without. Every remaining
    candidate is measured against the current circuit in one call, which is what trying them one
    after another measures up to the first that can go; the search goes on after that one."""
    pending = list(reversed(chosen))
    while pending and len(chosen) > 1:
        fewer = [[h for h in chosen if h != head] for head in pending]
        results = measure([every_position(f) for f in fewer])
        hit = next((i for i, r in enumerate(results) if r.recovered >= target), None)
        if hit is None:
            break
        chosen, pending = fewer[hit], pending[hit + 1 :]
        trace.append((tuple(chosen), results[hit].recovered, results[hit].normalised))
    return chosen


def pin_positions(measure: HeadCircuits, kept: Kept, patching, target: float) -> Kept:
    """Restrict each head, in turn, to its 1..MAX_POSITIONS most important live positions while the
    circuit still recovers `target` (the fewest that do); a head that needs more keeps every
    position."""
    live = live_positions(measure.batch)
    for head in list(kept):
        effect = patching.recovered(patching.head_out[head.layer, :, head.head]).abs()
        ranked = sorted(live, key=lambda p: -float(effect[p]))
        trials = [
            {**kept, head: tuple(sorted(ranked[:count]))} for count in range(1, min(MAX_POSITIONS, len(ranked)) + 1)
        ]
        hit, _ = first_reaching(measure, trials, target, 1)
        if hit is not None:
            kept = trials[hit]
    return kept
