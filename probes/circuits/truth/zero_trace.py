"""Why a Tracr program's true edges can measure 0 under zero ablation, traced edge by edge: what
the sender writes in the dimensions its receiver reads (its mean and spread across inputs), what
the receiver computes with that write zeroed, and the edge's effect at the compiled length and on
ACDC's shorter inputs (benchmarks/tracr_table.py prints it beside the AUROC table)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.graph import MLP, Edge, Graph, Head
from models import Model
from probes.ablation import Ablation
from probes.circuits.truth.tracr import Compiled, acdc_pairs, inert_edges, pairs, read_write_dims, true_edges, variables
from tasks.data import Batch


@dataclass(frozen=True)
class ZeroTrace:
    """One true edge zero ablation cannot see on the full-length pairs, traced: what its sender
    writes in the dimensions its receiver reads, what the receiver computes with that write
    zeroed, and the edge's effect at the full length and on ACDC's shorter inputs."""

    edge: Edge
    variables: tuple  # the variables the sender writes and the receiver reads
    write: tuple  # (mean, largest std across inputs) of the write there (write_stats)
    write_acdc: tuple  # the same on ACDC's inputs
    observed: str  # what the receiver computes: "attention pattern", "head output", ...
    change: float  # max |zeroed - clean| of it at the scored positions
    change_bos: float  # the same at BOS (never scored)
    effect: float  # zero-ablation effect / gap, full length
    effect_acdc: float  # the same on ACDC's inputs
    inert: bool  # in inert_edges: no logit moves on any input of the domain


def receiver_output(edge) -> tuple[str, str]:
    """(what, hook name) of what the edge's receiver computes from its input."""
    from transformer_lens.utilities import get_act_name

    from probes.circuits.edge_hooks import LOGITS_IN, mlp_out_name

    node = edge.receiver.node
    if isinstance(node, Head):
        qk = edge.receiver.port in ("q", "k")
        return (
            ("attention pattern", get_act_name("pattern", node.layer))
            if qk
            else ("head output", get_act_name("z", node.layer))
        )
    if isinstance(node, MLP):
        return "MLP output", mlp_out_name(node.layer)
    return "logits", LOGITS_IN


def trace_zero_edges(model: Model, compiled: Compiled, graph: Graph, n: int = 64) -> list[ZeroTrace]:
    """Every true edge whose zero-ablation effect on the full-length pairs is below the AUROC's
    float noise, traced (the program must name ACDC's input length)."""
    from probes.circuits.ablations import ablated_runs
    from probes.circuits.methods.scores import FLOAT_NOISE
    from probes.circuits.oracle import edge_effects, patched_runs

    truth = true_edges(model, compiled, graph)
    write_dims, read_dims = read_write_dims(model)
    inert = inert_edges(model, compiled, graph, truth)
    measured = []
    for batch in (pairs(model, compiled, n), acdc_pairs(model, compiled, n)):
        runs = ablated_runs(model, batch, graph, Ablation.ZERO)
        measured.append((batch, runs, edge_effects(model, batch, graph, runs=runs).normalised()))
    (batch, runs, effect), (acdc_batch, acdc_runs, acdc_effect) = measured
    floor = FLOAT_NOISE * float(effect.abs().max())
    traces = []
    for index, edge in enumerate(graph.edges):
        if edge not in truth or abs(float(effect[index])) >= floor:
            continue
        dims = write_dims[edge.sender] & read_dims[edge.receiver]
        what, name = receiver_output(edge)
        with torch.no_grad():
            _, cache = model.run_with_cache(batch.inputs, names_filter=[name])
        zeroed = patched_runs(model, batch, graph, [frozenset([edge])], runs, observe=(name,))[0].observed[name]
        scored, bos = at_positions(cache[name] - zeroed, what, edge, batch)
        traces.append(
            ZeroTrace(
                edge,
                tuple(sorted(variables(dims, compiled.residual_labels))),
                write_stats(runs.base.writes[edge.sender], dims, edge, batch),
                write_stats(acdc_runs.base.writes[edge.sender], dims, edge, acdc_batch),
                what,
                scored,
                bos,
                float(effect[index]),
                float(acdc_effect[index]),
                edge in inert,
            )
        )
    return traces


def write_stats(write: torch.Tensor, dims: torch.Tensor, edge, batch: Batch) -> tuple[float, float]:
    """(mean, largest std across inputs at one position) of a sender's write in `dims` where the
    receiver reads it: at the scored positions for a query, MLP or the logits, at every position
    for a key or value (every key position is read)."""
    if edge.receiver.port in ("k", "v"):
        values = write[..., dims]  # [n, pos, dims]
        return float(values.mean()), float(values.std(0).max())
    values = write[batch.example_index, batch.positions][:, dims]
    return float(values.mean()), float(values.std(0).max())


def at_positions(difference: torch.Tensor, what: str, edge, batch: Batch) -> tuple[float, float]:
    """max |difference| at the scored positions and at BOS (a pattern's query positions)."""
    if what == "attention pattern":
        head = difference[:, edge.receiver.node.head]  # [n, query, key]
    elif what == "head output":
        head = difference[:, :, edge.receiver.node.head]  # [n, pos, d_head]
    else:
        head = difference
    return float(head[batch.example_index, batch.positions].abs().max()), float(head[:, 0].abs().max())
