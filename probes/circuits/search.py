"""Circuit search and faithfulness (the report's measuring is probes.report.run_analysis, its command
toylens.report).

A circuit is a set of nodes: a head, kept at some positions (or all). Faithfulness runs the clean
input with every head output outside the circuit mean-ablated (per-position mean over a reference
batch) and puts the metric on two scales: TransformerLens's (`attribution_patching.faithfulness`),
(m(C) - m(corrupt)) / (m(clean) - m(corrupt)), and the null-normalised one of the MIB benchmark,
(m(C) - m(empty)) / (m(clean) - m(empty)), where the empty circuit mean-ablates every head: 0 = the
signal is gone, 1 = the full model. The first reads ~0.5 for "nothing left" when the counterfactual
is the clean input's mirror image (its metric is minus the clean one), so the second is the one a
verdict uses. A circuit holding every head output that can reach the scored logits is the full
model at those logits: its faithfulness is 1 by construction (`upstream_complete`). Written here because TL's
version ablates edges through the split-QKV fork the native bridge refuses, one pair at a time;
node ablation over a whole batch is what we need. MLPs and embeddings are always kept.

Search: rank heads by how much knocking each one out of the full model loses, add them in that
order until the circuit recovers `target` of the gap, drop any it can do without, then try to pin
each head to its few most important positions (from activation patching). Edges between circuit
heads are measured by exact path patching (Q, K, V; all positions, then each position).
"""

from __future__ import annotations

from dataclasses import dataclass

from models.bridge import device_of
from models.components import Head

# torch and TransformerLens load inside the functions, so `--help` answers at once.

MAX_POSITIONS = 3


@dataclass(frozen=True)
class Node:
    layer: int
    head: int
    positions: tuple[int, ...] | None = None   # None: every position

    @property
    def name(self) -> str:
        return f"L{self.layer}H{self.head}"

    def describe(self) -> str:
        where = "all positions" if self.positions is None else "/".join(f"p{p}" for p in self.positions)
        return f"{self.name}@{where}"


@dataclass(frozen=True)
class Faithfulness:
    nodes: tuple[str, ...]
    recovered: float           # (ablated - corrupt) / (clean - corrupt): counterfactual scale
    normalised: float          # (ablated - empty) / (clean - empty): null scale, 0 = signal gone
    metric: float              # clean input, everything outside mean-ablated
    accuracy: float            # share of scored positions still predicting the answer
    clean: float
    corrupt: float
    empty: float               # clean input, every head mean-ablated


def keep_masks(model, nodes: list[Node], width: int) -> dict:
    """Per layer, [pos, head] True where a head's output is kept."""
    import torch

    masks = {layer: torch.zeros(width, model.cfg.n_heads, dtype=torch.bool, device=device_of(model))
             for layer in range(model.cfg.n_layers)}
    for node in nodes:
        masks[node.layer][slice(None) if node.positions is None else list(node.positions), node.head] = True
    return masks


def mean_outputs(model, batch, reference) -> dict:
    """Per layer, every head's per-position mean output over `reference`, shaped for `batch`."""
    from probes.ablation import replacement_z

    return replacement_z(model, batch, list(range(model.cfg.n_layers)), "mean", 0, reference)


def outside_ablated_hooks(model, nodes: list[Node], means: dict, width: int) -> list:
    import torch

    from transformer_lens.utilities import get_act_name

    from probes.ablation import check_heads

    check_heads(model, [(n.layer, n.head) for n in nodes])
    masks = keep_masks(model, nodes, width)

    def hook(layer):
        def ablate(z, hook):
            keep = masks[layer][None, :z.shape[1], :, None]
            return torch.where(keep, z, means[layer][:z.shape[0], :z.shape[1]])
        return ablate

    return [(get_act_name("z", layer), hook(layer)) for layer in range(model.cfg.n_layers)]


def faithfulness(model, batch, nodes: list[Node], reference=None, *, means: dict | None = None,
                 clean=None, corrupt=None, empty=None) -> Faithfulness:
    """Mean-ablate every head output outside `nodes` (means over `reference`, or precomputed
    `means`) on the clean input, and place the metric left between the counterfactual and the
    clean run, and between the empty circuit and the clean run. `clean`, `corrupt` and `empty` are
    those runs' Outcomes, when already measured."""
    from probes.patching import corrupt_inputs, run_outcome
    from common.stats import share

    batch = batch.to(device_of(model))
    means = means if means is not None else mean_outputs(model, batch, reference or batch)
    width = batch.inputs.shape[1]
    clean = clean or run_outcome(model, batch, batch.inputs)
    corrupt = corrupt or run_outcome(model, batch, corrupt_inputs(batch))
    empty = empty or run_outcome(model, batch, batch.inputs, outside_ablated_hooks(model, [], means, width))
    ablated = run_outcome(model, batch, batch.inputs, outside_ablated_hooks(model, nodes, means, width))
    return Faithfulness(
        nodes=tuple(n.describe() for n in nodes),
        recovered=share(ablated.metric, corrupt.metric, clean.metric),
        normalised=share(ablated.metric, empty.metric, clean.metric),
        metric=ablated.metric,
        accuracy=ablated.restored,
        clean=clean.metric,
        corrupt=corrupt.metric,
        empty=empty.metric,
    )


def upstream_complete(model, nodes: list[Node], batch) -> bool:
    """Whether `nodes` keep every head output that can reach a scored logit: every head before the
    last layer at every position up to the last scored one, every last-layer head at the scored
    positions (after the last attention each position is computed on its own). Mean-ablating
    outside such a circuit changes no scored logit, so its faithfulness is 1 by construction."""
    width = batch.inputs.shape[1]
    masks = keep_masks(model, nodes, width)
    scored = sorted(set(batch.positions.tolist()))
    last = model.cfg.n_layers - 1
    return all(bool(masks[layer][scored if layer == last else slice(0, scored[-1] + 1)].all())
               for layer in range(model.cfg.n_layers))


@dataclass(frozen=True)
class Circuit:
    nodes: tuple[Node, ...]
    faithfulness: Faithfulness          # the nodes as found (heads pinned to positions where possible)
    head_faithfulness: Faithfulness     # the same heads at every position
    knockout: dict[str, Faithfulness]   # head -> the full model with only that head mean-ablated
    trace: list[tuple[tuple[str, ...], float, float]]  # the search step by step: heads, recovered, normalised
    upstream: bool = False              # the nodes hold every head output that can reach the scored logits
    head_upstream: bool = False         # ... the heads at every position do

    @property
    def heads(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)


def all_heads(model) -> list[tuple[int, int]]:
    return [(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]


def as_nodes(heads) -> list[Node]:
    return [Node(l, h) for l, h in heads]


def search_circuit(model, batch, reference, patching, target: float = 0.9) -> Circuit:
    """The fewest heads (then positions) whose circuit keeps `target` of the clean - counterfactual
    gap. `batch` holds counterfactual pairs, `reference` the examples mean ablation averages over,
    `patching` the batch's probes.patching.ActivationPatching."""
    from probes.patching import run_outcome

    batch = batch.to(device_of(model))
    means = mean_outputs(model, batch, reference)
    empty = run_outcome(model, batch, batch.inputs, outside_ablated_hooks(model, [], means, batch.inputs.shape[1]))

    def measure(nodes):
        return faithfulness(model, batch, nodes, means=means, clean=patching.clean, corrupt=patching.corrupt,
                            empty=empty)

    def step(heads):
        result = measure(as_nodes(heads))
        trace.append((tuple(str(Head(*h)) for h in heads), result.recovered, result.normalised))
        return result.recovered

    heads = all_heads(model)
    knockout = {h: measure(as_nodes([g for g in heads if g != h])) for h in heads}
    restore = {h: abs(float(patching.recovered(patching.head_all[h]))) for h in heads}
    ranked = sorted(heads, key=lambda h: (-(1 - knockout[h].recovered), -restore[h]))
    chosen, trace = [], []
    for head in ranked:
        chosen.append(head)
        if step(chosen) >= target:
            break
    for head in reversed(list(chosen)):
        fewer = [h for h in chosen if h != head]
        if fewer and measure(as_nodes(fewer)).recovered >= target:
            chosen = fewer
            step(chosen)
    chosen.sort()
    nodes = pin_positions(as_nodes(chosen), patching, measure, target, batch)
    return Circuit(tuple(nodes), measure(nodes), measure(as_nodes(chosen)),
                   {str(Head(*h)): result for h, result in knockout.items()}, trace,
                   upstream_complete(model, nodes, batch), upstream_complete(model, as_nodes(chosen), batch))


def pin_positions(nodes: list[Node], patching, measure, target: float, batch) -> list[Node]:
    """Restrict each head, in turn, to its 1..MAX_POSITIONS most important live positions while the
    circuit still recovers `target`; a head that needs more keeps every position."""
    from probes.patching import live_positions

    live = live_positions(batch)
    for index, node in enumerate(nodes):
        effect = patching.recovered(patching.head_out[node.layer, :, node.head]).abs()
        ranked = sorted(live, key=lambda p: -float(effect[p]))
        for count in range(1, min(MAX_POSITIONS, len(ranked)) + 1):
            trial = list(nodes)
            trial[index] = Node(node.layer, node.head, tuple(sorted(ranked[:count])))
            if measure(trial).recovered >= target:
                nodes = trial
                break
    return nodes
