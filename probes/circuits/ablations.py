"""What an edge outside a circuit carries instead of its clean write: the counterfactual run's write
(interchange ablation, MIB's and ACDC's "random" ablation), the sender's mean write at that position
(mean ablation: over the batch itself, or over a reference batch, as the head view averages the
run's training rows), or zero (ACDC's zero ablation). Each is a `Runs` the oracle, the methods and
the searches take unchanged: base = the clean run, other = the replacement writes, and the other
run's outcome is the metric with every edge given its replacement (the empty circuit), so the
faithfulness scale keeps 0 = empty circuit, 1 = full model for every ablation.
"""

from __future__ import annotations

import dataclasses

import torch

from common.cli import UsageError
from models.bridge import device_of
from models.graph import MLP, Embed, Graph, Head
from models import Model
from probes.ablation import Ablation, Reference, chunked_cache, position_mean
from probes.circuits.oracle import Direction, Runs, patched_outcomes, record, record_runs
from probes.circuits.edge_hooks import Writes, mlp_out_name
from tasks.data import Batch


EDGE_ABLATIONS = (Ablation.COUNTERFACTUAL, Ablation.MEAN, Ablation.ZERO)  # what an edge can carry


def reference_writes(model: Model, batch: Batch, graph: Graph, reference) -> dict:
    """Each sender's write at each position averaged over `reference` (a Batch, or a
    probes.ablation.Reference holding its activations), real positions only, shaped for `batch`. A head's
    mean write is its mean z through W_O, the mean probes.ablation's mean ablation replaces z with."""
    from transformer_lens.utilities import get_act_name

    names = [get_act_name("resid_pre", 0)] + [mlp_out_name(s.layer) for s in graph.senders if isinstance(s, MLP)]
    names += [get_act_name("z", l) for l in range(graph.n_layers)]
    if isinstance(reference, Reference):
        cache = {**reference.writes, **{get_act_name("z", l): z for l, z in reference.z.items()}}
        reference = reference.batch
    else:
        reference = reference.to(device_of(model))
        with torch.no_grad():
            _, cache = chunked_cache(model, reference.inputs, names)
    width, n = batch.inputs.shape[1], len(batch)
    W_O, out = model.W_O, {}
    z = {l: position_mean(cache[get_act_name("z", l)], reference, width) for l in range(graph.n_layers)}
    for sender in graph.senders:
        if isinstance(sender, Head):
            mean = z[sender.layer][:, sender.head] @ W_O[sender.layer, sender.head]
        else:
            name = get_act_name("resid_pre", 0) if isinstance(sender, Embed) else mlp_out_name(sender.layer)
            mean = position_mean(cache[name], reference, width)
        out[sender] = mean[None].expand(n, -1, -1)
    return out


def ablated_runs(model: Model, batch: Batch, graph: Graph, ablation: Ablation, reference=None) -> Runs:
    """`reference`: what MEAN averages over (a Batch or a probes.ablation.Reference; default the
    batch itself)."""
    if ablation not in EDGE_ABLATIONS:
        raise UsageError(f"edge ablation must be one of {', '.join(EDGE_ABLATIONS)}, got {ablation!r}")
    batch = batch.to(device_of(model))
    if ablation is Ablation.COUNTERFACTUAL:
        return record_runs(model, batch, graph, Direction.NOISE)
    clean = record(model, batch, batch.inputs, graph)
    if ablation is Ablation.MEAN and reference is not None:
        writes = reference_writes(model, batch, graph, reference)
    elif ablation is Ablation.MEAN:
        writes = {s: w.mean(0, keepdim=True).expand_as(w) for s, w in clean.writes.items()}
    else:
        writes = {s: torch.zeros_like(w) for s, w in clean.writes.items()}
    other = Writes(clean.outcome, writes, {0: writes[Embed()]}, {})
    placeholder = Runs(Direction.NOISE, clean, other)
    empty = patched_outcomes(model, batch, graph, [frozenset(graph.edges)], placeholder)[0]
    return Runs(Direction.NOISE, clean, dataclasses.replace(other, outcome=empty))
