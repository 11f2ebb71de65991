"""Exact path patching: the edge oracle (probes.circuits.oracle) restricted to head -> head edges,
run from the counterfactual towards the clean input (direction "denoise"). A sender head's clean
output reaches ONLY one receiver head's query, key or value input; every other reader keeps the
corrupt run's value. A joint path does the same for a SET of senders and a SET of receivers at
once: the senders' summed clean-minus-corrupt writes reach only the chosen input of every receiver
(redundant heads, e.g. several induction heads, are then tested as one circuit rather than edge by
edge). It equals TL's `patching.get_act_patch_direct_path` on single edges (tests/test_edges.py).

Joint receivers must share one layer: a receiver in a later layer would read a residual that already
carries an earlier receiver's patched output, mixing in a longer path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformer_lens.utilities import get_act_name

from common.cli import UsageError
from common.stages import timed
from common.stats import share
from models.bridge import device_of
from models.components import Head, HeadSet
from models.graph import HEAD_PORTS, Edge, Graph, Input
from models import Model
from probes.circuits.oracle import Direction, Runs, model_graph, patched_runs, record_runs
from tasks.data import Batch

COMPONENTS = HEAD_PORTS


@dataclass(frozen=True)
class PathPatch:
    sender: HeadSet  # one head, or several for a joint path
    positions: tuple[int, ...] | None  # sender positions patched; None = every position
    receiver: HeadSet  # one head, or several in one layer
    component: str  # q | k | v
    metric: float
    recovered: float  # share of the clean - corrupt gap closed
    restored: float  # share of scored positions predicting the clean answer again
    # Receivers' scored rows. Several receivers: attention_moved is the mean over receivers;
    # attention_recovered the gap-weighted mean, 1 - sum TV(patched, clean) / sum TV(corrupt, clean),
    # so a receiver whose attention the corruption barely moves cannot blow up the ratio.
    attention_moved: float  # total variation, patched vs corrupt
    attention_recovered: float  # 1 - TV(patched, clean) / TV(corrupt, clean)
    clean_values: bool = False  # receivers' values came from the clean run (see PathTarget)

    @property
    def where(self) -> str:
        if self.positions is None:
            return "all positions"
        return ",".join(f"p{p}" for p in self.positions) or "no positions"


@dataclass(frozen=True)
class PathTarget:
    sender: HeadSet
    positions: tuple[int, ...] | None
    receiver: HeadSet  # all patched together, in one layer
    component: str
    # Receivers (of a q or k path) read their values from the clean run: the path alone decides
    # where they look, the clean run what they copy. A counterfactual that changes the copied
    # tokens (induction's) needs both to restore the answer; positions=() with clean values is the
    # matching baseline (clean values, no path).
    clean_values: bool = False

    def __post_init__(self):
        object.__setattr__(self, "sender", HeadSet(self.sender))
        object.__setattr__(self, "receiver", HeadSet(self.receiver))
        senders, receivers = self.sender, self.receiver
        if not senders or not receivers:
            raise UsageError("a path needs at least one sender and one receiver head")
        if self.component not in COMPONENTS:
            raise UsageError(f"component must be one of {COMPONENTS}, got {self.component!r}")
        if self.clean_values and self.component == "v":
            raise UsageError("clean_values goes with a q or k path; a v path already sets the values")
        if len(receivers.layers) > 1:
            raise UsageError(
                f"receivers {receivers} span several layers; a later receiver would "
                f"read an earlier one's patched output, so patch one layer at a time"
            )
        if receivers[0].layer <= max(senders.layers):
            raise UsageError(f"the receiver(s) {receivers} must sit in a later block than the sender(s) {senders}")

    @property
    def layer(self) -> int:
        return self.receiver[0].layer

    def edges(self, graph: Graph) -> frozenset[Edge]:
        """The oracle's edges this path patches: each sender into each receiver's input, at every
        position or one edge per patched position; with clean values, also every write into each
        receiver's v input (which then reads the clean residual)."""
        where = (None,) if self.positions is None else self.positions
        edges = {
            Edge(sender, Input(receiver, self.component), p)
            for sender in self.sender
            for receiver in self.receiver
            for p in where
        }
        if self.clean_values:
            edges |= {edge for receiver in self.receiver for edge in graph.into(Input(receiver, "v"))}
        return frozenset(edges)


def receiver_rows(pattern: torch.Tensor, batch: Batch, head: int) -> torch.Tensor:
    """[k, key] a head's attention rows at the scored positions, from [n, head, query, key]."""
    return pattern[batch.example_index, head, batch.positions]


def total_variation(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(0.5 * (a - b).abs().sum(-1).mean(-1))


@timed("path runs")
def path_runs(model: Model, batch: Batch, layers=None) -> Runs:
    """The two runs path patching moves between, with the attention patterns of `layers` (default
    every block after the first: any receiver's), for several path_patch_many calls to share."""
    layers = range(1, model.cfg.n_layers) if layers is None else sorted(layers)
    return record_runs(
        model, batch, model_graph(model), Direction.DENOISE, observe=tuple(get_act_name("pattern", l) for l in layers)
    )


@torch.no_grad()
@timed("path patching by position")
def path_patch_many(model: Model, batch: Batch, targets: list[PathTarget], runs: Runs | None = None) -> list[PathPatch]:
    """`runs`: path_runs of `batch`, when the caller already recorded them."""
    batch = batch.to(device_of(model))
    graph = model_graph(model)
    layers = {t.layer for t in targets}
    runs = runs or path_runs(model, batch, layers)
    patterns = tuple(get_act_name("pattern", l) for l in sorted(layers))
    patched = patched_runs(model, batch, graph, [t.edges(graph) for t in targets], runs, observe=patterns)
    return [path_result(t, p, runs, batch) for t, p in zip(targets, patched)]


def path_result(target: PathTarget, patched, runs: Runs, batch: Batch) -> PathPatch:
    """The path's metric on the gap scale and how far it moved the receivers' attention."""
    name = get_act_name("pattern", target.layer)
    clean, corrupt = runs.other, runs.base
    rows = {
        run: {h: receiver_rows(observed[name], batch, h.head) for h in target.receiver}
        for run, observed in (("patched", patched.observed), ("clean", clean.observed), ("corrupt", corrupt.observed))
    }
    moved = [total_variation(rows["patched"][h], rows["corrupt"][h]) for h in target.receiver]
    left = sum(total_variation(rows["patched"][h], rows["clean"][h]) for h in target.receiver)
    gap_tv = sum(total_variation(rows["corrupt"][h], rows["clean"][h]) for h in target.receiver)
    return PathPatch(
        sender=target.sender,
        positions=target.positions,
        receiver=target.receiver,
        component=target.component,
        metric=patched.outcome.metric,
        recovered=share(patched.outcome.metric, corrupt.outcome.metric, clean.outcome.metric),
        restored=patched.outcome.restored,
        attention_moved=sum(moved) / len(moved),
        attention_recovered=share(left, gap_tv, 0.0),
        clean_values=target.clean_values,
    )


def joint_path_patch(model: Model, batch: Batch, senders, receivers, component: str, positions=None) -> PathPatch:
    """The senders' summed writes at `positions` (None = all) reach only the `component` input of
    every receiver (one layer, later than every sender). Heads as Heads, (layer, head) or "L0H1"."""
    target = PathTarget(
        HeadSet(senders), None if positions is None else tuple(positions), HeadSet(receivers), component
    )
    return path_patch_many(model, batch, [target])[0]


def path_patch(model: Model, batch: Batch, sender, receiver, component: str, positions=None) -> PathPatch:
    """One path: sender head at `positions` (None = all) into the receiver's `component`."""
    return joint_path_patch(model, batch, [sender], [receiver], component, positions)


@timed("path patching")
def path_sweep(model: Model, batch: Batch, runs: Runs | None = None) -> list[PathPatch]:
    """Every sender -> later receiver head, Q, K and V, sender patched at all positions (`runs`:
    path_runs of `batch`, when already recorded)."""
    heads = [Head(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]
    targets = [
        PathTarget(HeadSet([s]), None, HeadSet([r]), c)
        for s in heads
        for r in heads
        if r.layer > s.layer
        for c in COMPONENTS
    ]
    return path_patch_many(model, batch, targets, runs)
