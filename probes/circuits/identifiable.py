"""Which true edges an ablation can see at all. An edge sender -> receiver input is patched by
giving the receiver its residual plus (the sender's ablated write - its clean write); when what the
receiver computes from that residual (a head's Q, K or V, an MLP's pre-activations, the logits) is
the same with and without the patch at every real position of every pair, no measurement under
that ablation can tell the edge from one that is not there: it is *unidentifiable under that
ablation*. Tracr's length and position reads under counterfactual ablation are the common case (the
partner has the same length and positions, so those writes are equal in both runs: docs/tracr.md);
a constant write under mean ablation is another (the mean of a constant is the constant).

The leaderboard scores such true edges apart (neither true nor false) and counts them; this is a
property of the truth and the ablation, measured on the pairs, not of any method.
"""

from __future__ import annotations

from typing import Iterable

import torch

from models.bridge import native
from models.graph import MLP, Edge, Head, Input, Logits
from models import Model
from probes.circuits.edge_hooks import receiver_input
from probes.circuits.oracle import Runs
from tasks.data import Batch

SAME = 1e-5  # relative to the receiver's largest |input|: below it, float noise between two forwards


def residual_read(runs: Runs, receiver: Input, n_layers: int) -> torch.Tensor:
    """The clean run's residual stream that `receiver` reads, [n, pos, d_model]."""
    node, base = receiver.node, runs.base
    if isinstance(node, Head):
        return base.resid_pre[node.layer]
    if isinstance(node, MLP):  # resid_mid = what enters the next block minus this MLP's own write
        return base.resid_pre[node.layer + 1] - base.writes[MLP(node.layer)]
    return base.resid_pre[n_layers]


def computed_from(model: Model, receiver: Input, residual: torch.Tensor) -> torch.Tensor:
    """What `receiver` computes from `residual`: a head's Q/K/V, an MLP's pre-activations, the logits."""
    node = receiver.node
    if isinstance(node, Head):
        return receiver_input(model, node.layer, receiver.port, residual, [node.head])
    if isinstance(node, MLP):
        normed = native(model.blocks[node.layer].ln2)(residual)
        return normed @ model.W_in[node.layer] + model.b_in[node.layer]
    assert isinstance(node, Logits)
    return native(model.ln_final)(residual) @ model.W_U


@torch.no_grad()
def input_change(model: Model, batch: Batch, runs: Runs, edge: Edge) -> float:
    """The largest change, relative to the receiver's largest |input|, that patching `edge` alone
    makes to what its receiver computes, over the real positions of every pair."""
    residual = residual_read(runs, edge.receiver, model.cfg.n_layers)
    delta = runs.other.writes[edge.sender] - runs.base.writes[edge.sender]
    clean = computed_from(model, edge.receiver, residual)
    moved = computed_from(model, edge.receiver, residual + delta) - clean
    real = batch.real_positions(residual.shape[1]).to(residual.device)
    moved, clean = moved[real], clean[real]
    return float(moved.abs().max() / clean.abs().max().clamp(min=1e-12)) if moved.numel() else 0.0


def unidentifiable(model: Model, batch: Batch, runs: Runs, edges: Iterable[Edge]) -> frozenset[Edge]:
    """The edges among `edges` whose receiver computes the same with the edge ablated alone as
    without, at every real position of every pair (`runs`: the clean run and the ablation's writes)."""
    batch = batch.to(runs.base.resid_pre[0].device)
    return frozenset(edge for edge in edges if input_change(model, batch, runs, edge) <= SAME)


def weakest(edges: tuple[Edge, ...], score: torch.Tensor, true: frozenset, hidden: frozenset) -> str:
    """Why a ranking's AUROC on the identifiable truth falls short of 1 ("" where it does not): its
    lowest-ranked identifiable true edge and how many false edges score as high (ties count)."""
    from probes.circuits.methods.scores import without_float_noise

    size = without_float_noise(score).abs().tolist()
    truths = [(size[i], e) for i, e in enumerate(edges) if e in true and e not in hidden]
    if not truths:
        return ""
    low, edge = min(truths, key=lambda t: t[0])
    above = sum(1 for i, e in enumerate(edges) if e not in true and size[i] >= low)
    if not above:
        return ""
    tie = " (a tie at 0: its input moves, its effect does not reach the answer)" if low == 0 else ""
    return f"{edge} scores {low:.3g}, {above} false edge(s) as high{tie}"
