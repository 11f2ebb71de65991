"""A feature circuit: the features of transcoders over a block model's MLPs as nodes, one error
node per transcoder, and the logits; every edge measured by exact activation patching through
the dictionaries, on a task's counterfactual pairs.

Through the dictionary, MLP l writes sum_j f_j W_dec[j] + b_dec + error_l (error_l = its real output
minus the transcoder's rebuild, in the same forward), so the MLP's write splits exactly into one
write per feature (f_j W_dec[j]) and the error node's; b_dec is the same in every run. An edge
sender -> receiver is the oracle's (probes.circuits.oracle, direction "noise"): the receiver's
input gets the residual it reads in the clean run plus (the sender's write on the counterfactual
- its clean write) and is recomputed; everything else stays clean. Receivers:
- a later transcoder's feature: that MLP's input (its LayerNorm over the patched residual), read by
  the transcoder; the edge is the change of the feature's activation, mean over the scored
  positions (units of the feature's activation);
- the logits: the final norm and unembedding over the patched final residual; the edge is the
  change of the metric (answer - foil logit, mean over the scored positions), as the oracle's
  edge effects.
Both are direct effects (the sender reaches the receiver through the residual stream alone), as
the oracle's edges. Nothing is linearised; `attribution` beside the logit edges is EAP's estimate
(the clean metric's gradient at the final residual, dotted with the sender's change), to show
how far the linear estimate is from the exact edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from models.bridge import native
from models.graph import MLP, Edge, Input, Logits
from models.resume import forward_from
from models import Model
from probes.circuits.oracle import Direction, Runs, edge_effects, model_graph, patched_outcomes, record_runs
from probes.circuits.edge_hooks import resid_mid_name
from probes.features.dictionary import Dictionary
from probes.features.splice import spliced_logits
from probes.patching import corrupt_inputs, outcome, replica_scored, scored_metric
from tasks.data import Batch

CHUNK = 32  # senders patched per batched recomputation


@dataclass(frozen=True)
class Node:
    """A transcoder feature (`feature` its index) or the transcoder's error node (`feature` None)."""

    layer: int
    feature: int | None

    def __str__(self) -> str:
        return f"MLP{self.layer}.err" if self.feature is None else f"MLP{self.layer}.f{self.feature}"


@dataclass(frozen=True)
class FeatureCircuit:
    """Edges of the feature graph of one run, and what they are measured against.

    `effect[s, r]`: sender `senders[s]` -> receiver `receivers[r]` (None: the logits), NaN where
    the receiver does not lie downstream. `attribution[s]`: EAP's estimate of the sender -> logits
    edge. `mlp_logits[l]`: the oracle's MLP l -> logits edge, the sum of whose parts (its features'
    and error node's edges) says how additive the split is. `head_edges`: the oracle's top edges of
    the head/MLP graph on the same pairs (the head-level circuit to set it beside)."""

    run: str
    dictionaries: tuple[str, ...]
    pairs: int
    clean_metric: float
    other_metric: float
    senders: tuple[Node, ...]
    receivers: tuple[Node | None, ...]
    effect: torch.Tensor = field(hash=False)
    attribution: torch.Tensor = field(hash=False)
    mlp_logits: dict = field(hash=False)
    head_edges: tuple[tuple[str, float], ...]
    spliced_error: float  # max |logits with every transcoder and error node spliced - model's|
    features_only_gap: float  # the metric gap with the error nodes dropped (the transcoders alone)

    @property
    def gap(self) -> float:
        return self.other_metric - self.clean_metric


def mlp_in_name(layer: int) -> str:
    return f"blocks.{layer}.mlp.hook_in"


@dataclass(frozen=True)
class Writes:
    """One run's transcoder activations and error writes, per layer."""

    acts: dict  # layer -> [n, pos, d_sae]
    errors: dict  # layer -> [n, pos, d_model]


def split_writes(runs: Runs, dictionaries: dict[int, Dictionary]) -> tuple[Writes, Writes]:
    def of(writes) -> Writes:
        acts = {l: d.encode(writes.observed[mlp_in_name(l)].float()) for l, d in dictionaries.items()}
        errors = {l: writes.writes[MLP(l)] - d.decode(acts[l]) for l, d in dictionaries.items()}
        return Writes(acts, errors)

    return of(runs.base), of(runs.other)


def sender_changes(dictionaries: dict[int, Dictionary], clean: Writes, other: Writes):
    """(node, [n, pos, d_model] its write on the counterfactual - its clean write) for every error
    node and every feature whose activation differs somewhere (the others' edges are exactly 0)."""
    for layer, dictionary in sorted(dictionaries.items()):
        change = other.acts[layer] - clean.acts[layer]
        moved = change.flatten(0, 1).abs().amax(0) > 0
        for j in torch.nonzero(moved).flatten().tolist():
            yield Node(layer, j), change[..., j, None] * dictionary.weights["W_dec"][j]
        yield Node(layer, None), other.errors[layer] - clean.errors[layer]


@torch.no_grad()
def feature_circuit(model: Model, batch: Batch, dictionaries: dict[int, Dictionary], run: str = "") -> FeatureCircuit:
    """The feature graph of `model` on the pairs of `batch` through transcoders {layer: Dictionary}."""
    graph = model_graph(model)
    layers = sorted(dictionaries)
    observe = tuple(name for l in layers for name in (mlp_in_name(l), resid_mid_name(l)))
    runs = record_runs(model, batch, graph, Direction.NOISE, observe)
    clean, other = split_writes(runs, dictionaries)
    changes = list(sender_changes(dictionaries, clean, other))
    senders = tuple(node for node, _ in changes)
    receivers = tuple([Node(l, j) for l in layers[1:] for j in range(dictionaries[l].config.d_sae)] + [None])
    effect = torch.full((len(senders), len(receivers)), float("nan"))
    final = runs.base.resid_pre[graph.n_layers]
    column = {node: i for i, node in enumerate(receivers)}
    for first in range(0, len(changes), CHUNK):
        chunk = changes[first : first + CHUNK]
        deltas = torch.stack([delta for _, delta in chunk])  # [c, n, pos, d]
        rows = torch.arange(first, first + len(chunk))
        effect[rows, -1] = logit_effects(model, batch, final, deltas, runs.base.outcome.metric)
        for receiver_layer in layers[1:]:
            later = [i for i, (node, _) in enumerate(chunk) if node.layer < receiver_layer]
            if later:
                moved = feature_effects(
                    model,
                    batch,
                    receiver_layer,
                    runs.base.observed[resid_mid_name(receiver_layer)],
                    deltas[later],
                    dictionaries[receiver_layer],
                    clean.acts[receiver_layer],
                )
                start = column[Node(receiver_layer, 0)]
                effect[rows[later], start : start + moved.shape[1]] = moved
    mlp_logits = dict(zip(layers, oracle_mlp_logits(model, batch, graph, runs, layers)))
    return FeatureCircuit(
        run,
        tuple(dictionaries[l].config.name for l in layers),
        len(batch),
        runs.base.outcome.metric,
        runs.other.outcome.metric,
        senders,
        receivers,
        effect,
        eap_logits(model, batch, final, [delta for _, delta in changes]),
        mlp_logits,
        head_edges(model, batch, graph, runs),
        spliced_error(model, batch, dictionaries),
        features_only_gap(model, batch, dictionaries),
    )


def logit_effects(
    model: Model, batch: Batch, final: torch.Tensor, deltas: torch.Tensor, clean_metric: float
) -> torch.Tensor:
    logits = forward_from(model, (final[None] + deltas).flatten(0, 1), model.cfg.n_layers)
    return torch.tensor([o.metric for o in outcome(replica_scored(logits, batch), batch)]) - clean_metric


def feature_effects(
    model: Model,
    batch: Batch,
    layer: int,
    resid_mid: torch.Tensor,
    deltas: torch.Tensor,
    dictionary: Dictionary,
    clean_acts: torch.Tensor,
) -> torch.Tensor:
    """[senders, d_sae] each receiving feature of MLP `layer`'s transcoder: its change, mean over the
    scored positions."""
    ln2 = native(model.blocks[layer].ln2)
    acts = dictionary.encode(ln2(resid_mid[None] + deltas).float())  # [c, n, pos, d_sae]
    scored = (acts - clean_acts[None])[:, batch.example_index, batch.positions]
    return scored.mean(1)


def eap_logits(model: Model, batch: Batch, final: torch.Tensor, deltas: list[torch.Tensor]) -> torch.Tensor:
    with torch.enable_grad():
        residual = final.detach().clone().requires_grad_(True)
        logits = forward_from(model, residual, model.cfg.n_layers)
        (gradient,) = torch.autograd.grad(scored_mean(logits, batch), residual)
    return torch.tensor([float((gradient * delta).sum()) for delta in deltas])


def scored_mean(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    return scored_metric(replica_scored(logits, batch)[0], batch).mean()


def oracle_mlp_logits(model: Model, batch: Batch, graph, runs: Runs, layers: list[int]) -> list[float]:
    sets = [frozenset([Edge(MLP(l), Input(Logits()))]) for l in layers]
    return [o.metric - runs.base.outcome.metric for o in patched_outcomes(model, batch, graph, sets, runs)]


def head_edges(model: Model, batch: Batch, graph, runs: Runs, top: int = 8) -> tuple[tuple[str, float], ...]:
    effects = edge_effects(model, batch, graph, runs=runs)
    return tuple((str(edge), value / effects.gap) for edge, value in effects.ranked()[:top])


def spliced_error(model: Model, batch: Batch, dictionaries: dict[int, Dictionary]) -> float:
    spliced = spliced_logits(model, batch.inputs, *dictionaries.values())
    return float((spliced - model(batch.inputs)).abs().max())


def features_only_gap(model: Model, batch: Batch, dictionaries: dict[int, Dictionary]) -> float:
    metric = [
        scored_mean(spliced_logits(model, tokens, *dictionaries.values(), error_node=False), batch)
        for tokens in (batch.inputs, corrupt_inputs(batch))
    ]
    return float(metric[1] - metric[0])
