"""The exact edge oracle: the metric with a SET of edges of the model's graph patched, for many sets
at once, and the two uses of it: every edge alone, and a circuit (every edge outside it patched).

An edge sender -> receiver input is patched by giving that receiver input the residual stream it
actually reads in this forward plus (the sender's write in the other run - its write in this
forward), at every position or at the edge's one position. Every other reader sees the sender as
it is; the receiver's LayerNorm and Q/K/V (or MLP, or unembedding) are recomputed on the patched
residual, the rest of the forward runs as usual. Nothing is linearised.

Runs: `base` is the forward that is run, `other` supplies the patched writes.
- direction "noise": base = clean, other = the counterfactual (an edge's effect is what corrupting it
  alone costs; EAP estimates this). A circuit's metric: the clean run with every edge outside it
  given its counterfactual value (MIB's counterfactual ablation), so the empty circuit is the
  counterfactual run and the full circuit the clean run (both tested).
- direction "denoise": base = counterfactual, other = clean: transformer_lens.patching's
  get_act_patch_direct_path on head -> head edges (tested equal).

Path patching (probes.circuits.path_patching) is this engine restricted to head -> head edges.

Written by hand because TL 4.3 has no edge patching beyond head -> head, and that one
(`patching.get_act_patch_direct_path`) needs the split-QKV fork the native attention of
`boot_native` refuses and runs one forward per edge. Sets whose edges all enter block >= l resume
the forward at block l from the base run's residual (models.resume.forward_from); many sets share
one forward as replicas of the batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Iterable

import torch
from transformer_lens.utilities import get_act_name

from common.cli import UsageError
from models.bridge import device_of
from models.graph import HEAD_PORTS, MLP, Edge, Embed, Graph, Head, Input, Logits, Receiver, Sender, port_heads, stage
from models.resume import forward_from, runs_by_blocks
from models import Model
from probes.circuits.edge_hooks import (
    FINAL_RESIDUAL,
    EdgeHooks,
    Writes,
    keeper,
    mlp_out_name,
    parallel_blocks,
    sender_write,
)
from probes.patching import Outcome, corrupt_inputs, outcome, replica_scored, replicas_per_forward, scored_logits
from tasks.data import Batch


class Direction(StrEnum):
    """Which run is the base and which supplies the patched writes (the module docstring)."""

    NOISE = "noise"  # base = clean, other = the counterfactual
    DENOISE = "denoise"  # base = the counterfactual, other = clean


def model_graph(model: Model, positions: tuple[int, ...] | None = None) -> Graph:
    """models.graph.graph_of's graph, built from the bridge's config, so the oracle takes any
    model, not only a ModelSpec's: in GPT-NeoX's parallel blocks an MLP reads what its block's heads
    read, not their writes (no head -> MLP edge within a block); under grouped-query attention
    (Llama) the key and value inputs are per group, so `LlHg.k` / `LlHg.v` for g < n_key_value_heads
    name group g's, read by all of its heads. With `positions`, one edge per position in it."""
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    heads = [Head(l, h) for l in range(n_layers) for h in range(n_heads)]
    mlps: list[MLP] = [] if model.cfg.attn_only else [MLP(l) for l in range(n_layers)]
    nodes: list[Sender] = [Embed(), *heads, *mlps]
    senders = tuple(sorted(nodes, key=lambda node: (stage(node, n_layers), node)))
    reading: list[Receiver] = [*heads, *mlps, Logits()]
    receivers = sorted(reading, key=lambda node: (stage(node, n_layers), node))
    inputs = tuple(
        Input(node, port)
        for node in receivers
        for port in (HEAD_PORTS if isinstance(node, Head) else ("in",))
        if not isinstance(node, Head) or node.head < port_heads(model.cfg, port)
    )
    parallel, where = parallel_blocks(model.cfg), (None,) if positions is None else tuple(positions)

    def reads(sender: Sender, node: Receiver) -> bool:
        same_block = isinstance(sender, Head) and isinstance(node, MLP) and sender.layer == node.layer
        return stage(sender, n_layers) < stage(node, n_layers) and not (parallel and same_block)

    edges = tuple(
        Edge(sender, receiver, position)
        for receiver in inputs
        for sender in senders
        if reads(sender, receiver.node)
        for position in where
    )
    return Graph(n_layers, senders, inputs, edges)


@torch.no_grad()
def record(model: Model, batch: Batch, tokens: torch.Tensor, graph: Graph, observe: tuple[str, ...] = ()) -> Writes:
    batch = batch.to(device_of(model))
    n_layers = graph.n_layers
    names = [get_act_name("resid_pre", l) for l in range(n_layers)] + [get_act_name("z", l) for l in range(n_layers)]
    names += [mlp_out_name(s.layer) for s in graph.senders if isinstance(s, MLP)] + [FINAL_RESIDUAL, *observe]
    logits, cache = model.run_with_cache(tokens.to(batch.tokens.device), names_filter=names)
    W_O = model.W_O
    resid_pre = {l: cache[get_act_name("resid_pre", l)] for l in range(n_layers)}
    return Writes(
        outcome(replica_scored(logits, batch), batch)[0],
        {s: sender_write(W_O, s, cache.__getitem__) for s in graph.senders},
        {**resid_pre, n_layers: cache[FINAL_RESIDUAL]},
        {name: cache[name] for name in observe},
    )


def start_layer(edges: Iterable[Edge], n_layers: int) -> int:
    """The first block that computes a receiver of these edges (n_layers: only the logits)."""
    return min(
        (n_layers if isinstance(e.receiver.node, Logits) else e.receiver.node.layer for e in edges), default=n_layers
    )


@dataclass(frozen=True)
class Runs:
    """The two runs an edge patch moves between, and every edge set patched between them so far: the
    oracle, the searches and the logic of one run ask for many of the same sets (the joint search
    for about half of its sets on the main job's block-2), and a set's patched forward depends on
    the set and these runs alone (their writes are one batch's), up to the rounding of the other
    sets it shares a forward with."""

    direction: Direction
    base: Writes
    other: Writes
    patched: dict = field(default_factory=dict, compare=False, repr=False)  # frozenset of edges -> Patched


def record_runs(
    model: Model, batch: Batch, graph: Graph, direction: Direction = Direction.NOISE, observe: tuple[str, ...] = ()
) -> Runs:
    batch = batch.to(device_of(model))
    if not isinstance(direction, Direction):
        raise TypeError(f"direction must be a Direction (NOISE or DENOISE), got {direction!r}")
    clean = record(model, batch, batch.inputs, graph, observe)
    corrupt = record(model, batch, corrupt_inputs(batch), graph, observe)
    return Runs(direction, *((clean, corrupt) if direction is Direction.NOISE else (corrupt, clean)))


@dataclass(frozen=True)
class Patched:
    """One set's patched forward: its outcome and the activations asked for ([n, ...] each)."""

    outcome: Outcome
    observed: dict
    logits: torch.Tensor | None = None  # [k, vocab] at the scored positions, where asked for (forward_patched)


def patched_runs(
    model: Model, batch: Batch, graph: Graph, sets: list[frozenset], runs: Runs, observe: tuple[str, ...] = ()
) -> list[Patched]:
    """The base run with each set's edges patched from the other run. `observe`: hook names of
    blocks at or after every set's first receiver block (earlier blocks are not rerun). A set
    these runs patched before, observing nothing, is not run again (`Runs.patched`)."""
    if observe:
        return forward_patched(model, batch, graph, sets, runs, observe)
    new = list(dict.fromkeys(frozenset(s) for s in sets if frozenset(s) not in runs.patched))
    runs.patched.update(zip(new, forward_patched(model, batch, graph, new, runs)))
    return [runs.patched[frozenset(s)] for s in sets]


@torch.no_grad()
def forward_patched(
    model: Model,
    batch: Batch,
    graph: Graph,
    sets: list[frozenset],
    runs: Runs,
    observe: tuple[str, ...] = (),
    keep_logits: bool = False,
) -> list[Patched]:
    """patched_runs' forwards: sets sorted by their first receiver block, as many per forward as
    PATCH_TOKENS allows. `keep_logits`: each Patched also holds its scored logits (a certificate
    reads every input's answer; the cached sets of the searches keep only their outcome)."""
    batch = batch.to(device_of(model))
    n_layers, per_forward = graph.n_layers, replicas_per_forward(batch)
    order = sorted(range(len(sets)), key=lambda i: start_layer(sets[i], n_layers))
    results: dict[int, Patched] = {}  # by set, filled in the order of `order`
    for first in range(0, len(order), per_forward):
        chunk = order[first : first + per_forward]
        start = start_layer(sets[chunk[0]], n_layers)
        members = [sets[i] for i in chunk]
        # Only the scored positions' logits are read: unless a caller observes activations, the last
        # block's MLP and the unembedding run there alone (models.resume's `at`), its inputs patched there.
        # A model whose blocks do not run alone (models.resume.runs_by_blocks) runs whole forwards.
        cut = start < n_layers and not observe and runs_by_blocks(model)
        scored = (batch.example_index, batch.positions) if cut else None
        hooks, seen = EdgeHooks(model, members, runs.base, runs.other, len(batch), start, scored), {}
        watch = [(name, keeper(seen, name)) for name in observe]
        resid = runs.base.resid_pre[start].repeat(len(members), 1, 1)
        with model.hooks(fwd_hooks=hooks.hooks(graph) + watch):
            if scored is None:
                logits = replica_scored(forward_from(model, resid, start), batch)
            else:
                logits = scored_logits(model, resid, start, batch, len(members))
        views = {name: value.view(len(members), len(batch), *value.shape[1:]) for name, value in seen.items()}
        for replica, (i, result) in enumerate(zip(chunk, outcome(logits, batch))):
            kept = logits[replica].cpu() if keep_logits else None
            results[i] = Patched(result, {name: view[replica] for name, view in views.items()}, kept)
    return [results[i] for i in range(len(sets))]


def patched_outcomes(model: Model, batch: Batch, graph: Graph, sets: list[frozenset], runs: Runs) -> list[Outcome]:
    """The base run with each set's edges patched from the other run, one Outcome per set."""
    return [patched.outcome for patched in patched_runs(model, batch, graph, sets, runs)]


@dataclass(frozen=True)
class EdgeEffects:
    """Each edge patched alone. effect = metric(edge patched) - metric(base run), mean over the
    scored positions of `pairs` pairs; metric = answer - foil logit (probes.patching)."""

    direction: Direction
    edges: tuple[Edge, ...]
    effect: torch.Tensor  # [edges]
    base: Outcome
    other: Outcome
    pairs: int
    seconds: float

    @property
    def gap(self) -> float:
        """metric(other run) - metric(base run): an edge that moves the metric all the way scores 1
        on `normalised`."""
        return self.other.metric - self.base.metric

    def normalised(self) -> torch.Tensor:
        return self.effect / self.gap

    def ranked(self) -> list[tuple[Edge, float]]:
        """Edges by |effect|, largest first."""
        order = self.effect.abs().argsort(descending=True, stable=True)
        return [(self.edges[i], float(self.effect[i])) for i in order]


def edge_effects(
    model: Model, batch: Batch, graph: Graph, direction: Direction = Direction.NOISE, runs: Runs | None = None
) -> EdgeEffects:
    """Every edge of `graph` patched alone (see the module docstring for the directions); `runs`:
    the two recorded runs when the caller already has them (their direction wins)."""
    began = time.perf_counter()
    runs = record_runs(model, batch, graph, direction) if runs is None else runs
    outcomes = patched_outcomes(model, batch, graph, [frozenset([e]) for e in graph.edges], runs)
    effect = torch.tensor([o.metric for o in outcomes], device="cpu") - runs.base.outcome.metric
    return EdgeEffects(
        runs.direction,
        graph.edges,
        effect,
        runs.base.outcome,
        runs.other.outcome,
        len(batch),
        time.perf_counter() - began,
    )


def circuit_outcomes(
    model: Model, batch: Batch, graph: Graph, circuits: list[Iterable[Edge]], runs: Runs | None = None
) -> list[Outcome]:
    """The clean run with every edge outside each circuit given its counterfactual value."""
    runs = runs or record_runs(model, batch, graph, Direction.NOISE)
    if runs.direction is not Direction.NOISE:
        raise UsageError("a circuit keeps its edges clean: pass runs recorded with direction 'noise'")
    everything = frozenset(graph.edges)
    return patched_outcomes(model, batch, graph, [everything - frozenset(c) for c in circuits], runs)
