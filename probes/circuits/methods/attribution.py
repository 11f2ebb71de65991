"""The field's fast edge-scoring methods on the bridge, each a score per edge of the graph, in the
oracle's convention (probes.circuits.oracle, direction "noise": the change in the metric when the edge alone
carries its counterfactual write into the clean run).

- EAP (Syed et al. 2023): (write_other - write_base) . d metric / d receiver input, at the base run.
- EAP-IG (Hanna et al. 2024): the same with the gradient averaged over `steps` points on the
  straight line from the base run's embeddings towards the other run's (left Riemann sum, so
  steps=1 is EAP exactly).
- ACDC-style greedy pruning (Conmy et al. 2023): from the full graph, receivers from the logits
  backwards, each incoming edge is removed (given its counterfactual write, exactly, with the
  oracle's set patching) when that moves the metric by less than `threshold` of the clean -
  counterfactual gap; an edge's score is the move measured when it was tried.

Why by hand: TL 4.3's attribution_patch at edge granularity needs the split-QKV fork that
boot_native's attention refuses (and runs one forward and backward per pair); its EAP-IG
(ig_steps > 1) raises NotImplementedError; and no TL function prunes. Gradients with respect to
each receiver input come from giving every input its own zero offset on the residual it reads
(the receiver recomputed from residual + offset, as the oracle does) and differentiating the
metric with respect to the offsets. TL's node-granularity attribution_patch is the cross-check:
a sender's edge scores sum to its node score (tested).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from models.bridge import device_of
from models.graph import Edge, Graph, Input
from models.resume import forward_from
from models import Model
from probes.circuits.oracle import Direction, Runs, patched_outcomes, record_runs
from probes.circuits.edge_hooks import EdgeHooks
from probes.patching import replica_scored, scored_metric
from tasks.data import Batch


@dataclass(frozen=True)
class EdgeScores:
    method: str
    edges: tuple[Edge, ...]
    score: torch.Tensor  # [edges], in metric units (change of the mean answer - foil logit)
    seconds: float
    circuit: frozenset | None = None  # the edges a pruning method kept


class InputOffsets(EdgeHooks):
    """One forward (no replicas) where every receiver input reads its residual plus its own offset,
    a zero tensor whose gradient is the metric's gradient with respect to that input."""

    def __init__(self, model: Model, graph: Graph, runs: Runs, n: int):
        super().__init__(model, [frozenset()], runs.base, runs.other, n, 0)
        like = runs.base.resid_pre[0]
        self.offsets = {
            receiver: torch.zeros(like.shape, device=like.device, requires_grad=True) for receiver in graph.inputs
        }

    def patches(self, receiver):
        return receiver  # every input gets its own offset

    def delta(self, receiver):  # type: ignore[override]  # built with scored=None: never asked for `scored`
        offset = self.offsets[receiver]
        return torch.tensor([0], device=offset.device), offset[None]


def input_gradients(model: Model, batch: Batch, graph: Graph, runs: Runs, steps: int = 1) -> dict:
    """Per receiver input, d mean-metric / d input [n, pos, d], averaged over `steps` embeddings
    base + (k / steps)(other - base), k = 0 .. steps - 1."""
    batch = batch.to(device_of(model))
    total: dict[Input, torch.Tensor | int] = {receiver: 0 for receiver in graph.inputs}
    start, end = runs.base.resid_pre[0], runs.other.resid_pre[0]
    for k in range(steps):
        hooks = InputOffsets(model, graph, runs, len(batch))
        with torch.enable_grad(), model.hooks(fwd_hooks=hooks.hooks(graph)):
            logits = forward_from(model, start + (k / steps) * (end - start), 0)
            scored_metric(replica_scored(logits, batch), batch).mean().backward()
        for receiver, offset in hooks.offsets.items():
            assert offset.grad is not None  # every offset is added into its input, and every input reaches the metric
            total[receiver] = total[receiver] + offset.grad / steps
    return total


def gradient_scores(
    model: Model,
    batch: Batch,
    graph: Graph,
    steps: int,
    name: str,
    direction: Direction = Direction.NOISE,
    runs: Runs | None = None,
) -> EdgeScores:
    """`runs`: the two recorded runs when the caller has them (a mean or zero ablation's,
    probes.circuits.ablations); their direction wins."""
    began = time.perf_counter()
    runs = runs or record_runs(model, batch, graph, direction)
    gradients = input_gradients(model, batch, graph, runs, steps)
    score = []
    for edge in graph.edges:
        change = (runs.other.writes[edge.sender] - runs.base.writes[edge.sender]) * gradients[edge.receiver]
        score.append(float(change.sum() if edge.position is None else change[:, edge.position].sum()))
    return EdgeScores(name, graph.edges, torch.tensor(score, device="cpu"), time.perf_counter() - began)


def eap(
    model: Model, batch: Batch, graph: Graph, direction: Direction = Direction.NOISE, runs: Runs | None = None
) -> EdgeScores:
    return gradient_scores(model, batch, graph, 1, "EAP", direction, runs)


def eap_ig(model: Model, batch: Batch, graph: Graph, steps: int = 5, runs: Runs | None = None) -> EdgeScores:
    return gradient_scores(model, batch, graph, steps, f"EAP-IG ({steps} steps)", runs=runs)


def acdc(model: Model, batch: Batch, graph: Graph, threshold: float = 0.01, runs: Runs | None = None) -> EdgeScores:
    """Greedy pruning; `threshold` in units of the clean - counterfactual gap."""
    began = time.perf_counter()
    runs = runs or record_runs(model, batch, graph, Direction.NOISE)
    gap = runs.other.outcome.metric - runs.base.outcome.metric
    removed, current = frozenset(), runs.base.outcome.metric
    score = {}
    for receiver in reversed(graph.inputs):
        for edge in graph.into(receiver):
            trial = removed | {edge}
            metric = patched_outcomes(model, batch, graph, [trial], runs)[0].metric
            score[edge] = metric - current
            if abs(metric - current) < threshold * abs(gap):
                removed, current = trial, metric
    return EdgeScores(
        f"ACDC (threshold {threshold:g})",
        graph.edges,
        torch.tensor([score[e] for e in graph.edges], device="cpu"),
        time.perf_counter() - began,
        frozenset(graph.edges) - removed,
    )
