"""Circuit search and faithfulness (the report command is toylens.report).

A circuit is a set of nodes: a head, kept at some positions (or all). Faithfulness follows
TransformerLens's definition (`attribution_patching.faithfulness`): run the clean input with every
head output outside the circuit mean-ablated (per-position mean over a reference batch) and report
(metric_ablated - metric_corrupt) / (metric_clean - metric_corrupt). Written here because TL's
version ablates edges through the split-QKV fork the native bridge refuses, one pair at a time;
node ablation over a whole batch is what we need. MLPs and embeddings are always kept.

Search: rank heads by how much knocking each one out of the full model loses, add them in that
order until the circuit recovers `target` of the gap, drop any it can do without, then try to pin
each head to its few most important positions (from activation patching). Edges between circuit
heads are measured by exact path patching (Q, K, V; all positions, then each position).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from models.components import Head

# torch and TransformerLens load inside the functions, so `--help` answers at once.

TARGET = 0.9
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
    recovered: float           # (ablated - corrupt) / (clean - corrupt)
    metric: float              # clean input, everything outside mean-ablated
    accuracy: float            # share of scored positions still predicting the answer
    clean: float
    corrupt: float


def keep_masks(model, nodes: list[Node], width: int) -> dict:
    """Per layer, [pos, head] True where a head's output is kept."""
    import torch

    masks = {layer: torch.zeros(width, model.cfg.n_heads, dtype=torch.bool) for layer in range(model.cfg.n_layers)}
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
                 clean=None, corrupt=None) -> Faithfulness:
    """Mean-ablate every head output outside `nodes` (means over `reference`, or precomputed
    `means`) on the clean input; the share of the clean - corrupt metric gap that is left.
    `clean` and `corrupt` are the full model's Outcomes, when already measured."""
    from probes.patching import corrupt_inputs, run_outcome

    means = means if means is not None else mean_outputs(model, batch, reference or batch)
    clean = clean or run_outcome(model, batch, batch.inputs)
    corrupt = corrupt or run_outcome(model, batch, corrupt_inputs(batch))
    hooks = outside_ablated_hooks(model, nodes, means, batch.inputs.shape[1])
    ablated = run_outcome(model, batch, batch.inputs, hooks)
    return Faithfulness(
        nodes=tuple(n.describe() for n in nodes),
        recovered=(ablated.metric - corrupt.metric) / (clean.metric - corrupt.metric),
        metric=ablated.metric,
        accuracy=ablated.restored,
        clean=clean.metric,
        corrupt=corrupt.metric,
    )


@dataclass(frozen=True)
class Circuit:
    nodes: tuple[Node, ...]
    faithfulness: Faithfulness          # the nodes as found (heads pinned to positions where possible)
    head_faithfulness: Faithfulness     # the same heads at every position
    knockout: dict[str, float]          # head -> recovered with only that head ablated
    trace: list[tuple[tuple[str, ...], float]]  # the greedy search, step by step

    @property
    def heads(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)


def all_heads(model) -> list[tuple[int, int]]:
    return [(l, h) for l in range(model.cfg.n_layers) for h in range(model.cfg.n_heads)]


def as_nodes(heads) -> list[Node]:
    return [Node(l, h) for l, h in heads]


def search_circuit(model, batch, reference, patching, target: float = TARGET) -> Circuit:
    """`batch` holds counterfactual pairs, `reference` the examples mean ablation averages over,
    `patching` the batch's probes.patching.ActivationPatching."""

    means = mean_outputs(model, batch, reference)

    def measure(nodes):
        return faithfulness(model, batch, nodes, means=means, clean=patching.clean, corrupt=patching.corrupt)

    heads = all_heads(model)
    knockout = {h: measure(as_nodes([g for g in heads if g != h])).recovered for h in heads}
    restore = {h: abs(float(patching.recovered(patching.head_all[h]))) for h in heads}
    ranked = sorted(heads, key=lambda h: (-(1 - knockout[h]), -restore[h]))
    chosen, trace = [], []
    for head in ranked:
        chosen.append(head)
        recovered = measure(as_nodes(chosen)).recovered
        trace.append((tuple(str(Head(*h)) for h in chosen), recovered))
        if recovered >= target:
            break
    for head in reversed(list(chosen)):
        fewer = [h for h in chosen if h != head]
        recovered = measure(as_nodes(fewer)).recovered if fewer else float("-inf")
        if recovered >= target:
            chosen = fewer
            trace.append((tuple(str(Head(*h)) for h in chosen), recovered))
    chosen.sort()
    nodes = pin_positions(as_nodes(chosen), patching, measure, target, batch)
    return Circuit(tuple(nodes), measure(nodes), measure(as_nodes(chosen)),
                   {str(Head(*h)): r for h, r in knockout.items()}, trace)


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


PATCH_PAIRS = 64        # counterfactual pairs per run for patching and search (evenly spread) ...
PATCH_SCORED = 512      # ... or fewer, when that many pairs already hold this many scored positions
ABLATION_ROWS = 160     # held-out examples per ablation sweep and shuffle test (evenly spread)
REFERENCE_ROWS = 256    # training examples the mean ablation averages over
ROUTE_POSITIONS = 6     # sender positions each circuit route is resolved at
MIN_GAP = 1.0           # clean - corrupt metric (logits or nats) below which no circuit is traced


@dataclass(frozen=True)
class RunAnalysis:
    """Everything the report shows for one run. Uniform-attention runs (a bag of words) get their
    accuracy and shuffle test only: there is no attention pattern to trace."""

    model_name: str
    seed: int
    path: str
    spec: dict
    accuracy: object                      # probes.accuracy.RunAccuracy
    note: str = ""                        # why no circuit was traced, if none was
    attention: object = None              # probes.attention.ScoredAttention
    pair: object = None                   # probes.attention.PairAttention
    ablations: dict = None                # method -> list[AblationResult] (head sweep)
    patching: object = None               # probes.patching.ActivationPatching
    paths: list = None                    # PathPatch, every head pair, all positions
    path_positions: list = None           # PathPatch, circuit head pairs, one position at a time
    composition: object = None            # probes.composition.Composition
    circuit: Circuit = None
    circuit_ablation: object = None       # AblationResult: the circuit's heads mean-ablated
    node_attention: dict = None           # node -> group -> [key] attention row at its position
    labels: list = None                   # key position labels


def routes(paths: list, circuit: Circuit, floor: float = 0.1) -> list:
    """Path patches (sender at all positions) worth resolving by position: between circuit heads,
    recovering at least `floor` of the gap, or the best input of each circuit pair otherwise."""
    heads = set(circuit.heads)
    inside = [p for p in paths if p.sender in heads and p.receiver in heads]
    best = {}
    for p in inside:
        key = (p.sender, p.receiver)
        if key not in best or abs(p.recovered) > abs(best[key].recovered):
            best[key] = p
    return [p for p in inside if abs(p.recovered) >= floor or best[(p.sender, p.receiver)] is p]


def route_positions(patching, sender: str, batch) -> list[int]:
    """The sender's ROUTE_POSITIONS live positions where restoring its output matters most: a task
    scored at many positions (induction) would otherwise need one path patch per position."""
    from probes.ablation import parse_heads
    from probes.patching import live_positions

    layer, head = parse_heads([sender])[0]
    effect = patching.recovered(patching.head_out[layer, :, head]).abs()
    return sorted(sorted(live_positions(batch), key=lambda p: -float(effect[p]))[:ROUTE_POSITIONS])


def node_query(node: Node, batch) -> int:
    """The query position a node's attention is shown at: its first pinned position, else the
    first example's first scored position."""
    return node.positions[0] if node.positions else int(batch.positions[0])


def patch_pairs(heldout) -> int:
    """How many counterfactual pairs patching uses: PATCH_PAIRS, or as many as hold PATCH_SCORED
    scored positions. Every patch is a forward over all the pairs, and a task scored at ~25
    positions per sequence (induction) has a precise mean metric from ~20 of them."""
    scored_per_pair = len(heldout.answers) / max(len(heldout), 1)
    return max(1, min(PATCH_PAIRS, math.ceil(PATCH_SCORED / max(scored_per_pair, 1))))


def analyse_run(run) -> RunAnalysis:
    from probes.ablation import ABLATION_METHODS, ablate, clean_run, head_ablation_sweep, parse_heads
    from probes.accuracy import run_accuracy
    from probes.attention import attention_from, pair_attention, position_labels, scored_attention
    from probes.composition import composition_scores
    from probes.patching import activation_patching
    from tasks.data import spread_subset
    from probes.path_patching import PathTarget, path_patch_many, path_sweep

    model, batches, vocabulary = run.load_model(), run.batches(), run.task.vocabulary()
    heldout = batches["heldout"]
    base = dict(model_name=run.model_name, seed=run.seed, path=str(run.path), spec=run.config.get("spec", {}),
                accuracy=run_accuracy(run))
    if base["spec"].get("attention") == "uniform":
        return RunAnalysis(**base, note="uniform attention: a bag of words has no circuit to trace")
    if base["spec"].get("attention") == "none":
        return RunAnalysis(**base, note="no attention: each position reads only its own token, no circuit to trace")
    if base["spec"].get("residual") is False:
        # Path patching and the circuit search send a head's write to later layers through the
        # residual stream; without it a write reaches the next block only.
        return RunAnalysis(**base, note="attention replaces the residual stream: not traced (the tracer assumes one)")
    if heldout.counterfactual is None:
        return RunAnalysis(**base, note="the task declares no counterfactual pairs")
    reference = spread_subset(batches["train"], REFERENCE_ROWS)
    pairs = spread_subset(heldout, patch_pairs(heldout))
    sample = spread_subset(heldout, ABLATION_ROWS)
    clean = clean_run(model, sample)
    ablations = {method: head_ablation_sweep(model, sample, method, run.seed, reference, clean) for method in ABLATION_METHODS}
    patching = activation_patching(model, pairs)
    found = dict(attention=scored_attention(model, heldout, vocabulary),
                 pair=pair_attention(model, heldout, 0, vocabulary),
                 ablations=ablations, patching=patching, labels=position_labels(heldout.inputs, vocabulary))
    gap = patching.clean.metric - patching.corrupt.metric
    if gap < MIN_GAP:
        return RunAnalysis(**base, **found, note=f"clean minus counterfactual metric is only {gap:+.2f}: "
                                                   "the model barely tells the pairs apart, so no share of it "
                                                   "means much")
    circuit = search_circuit(model, pairs, reference, patching)
    paths = path_sweep(model, pairs) if model.cfg.n_layers > 1 else []
    positions = [PathTarget(parse_heads([p.sender])[0], (position,), parse_heads([p.receiver])[0], p.component)
                 for p in routes(paths, circuit) for position in route_positions(patching, p.sender, pairs)]
    node_attention = {}
    for node in circuit.nodes:
        rows = attention_from(model, pairs, node_query(node, pairs))
        node_attention[node.describe()] = {g: rows[g][node.layer, node.head].tolist() for g in rows}
    return RunAnalysis(
        **base, **found,
        paths=paths,
        path_positions=path_patch_many(model, pairs, positions) if positions else [],
        composition=composition_scores(model, seed=run.seed) if model.cfg.n_layers > 1 else None,
        circuit=circuit,
        circuit_ablation=ablate(model, heldout, circuit.heads, "mean", run.seed, reference),
        node_attention=node_attention,
    )


if __name__ == "__main__":
    from toylens.report import main  # `python -m probes.circuit report` is the command layer's report

    main()
