"""Planted GATE models: hand-set weights whose answer is a known function of a few components (heads,
MLPs), so the relation between those components (OR, partial OR, AND, series, additive, an MLP that
computes or one that only carries) is true by construction. Each is a `Gate`: a planted.Planted plus
`relations` saying, per relation, what each component keeps alone and what knocking it out costs.

Shares are on the faithfulness scale (0 = every edge given its counterfactual write, 1 = the full
model; probes.circuits.oracle.circuit_outcomes):
- `alone[i]`: the true circuit with the out-edges of every OTHER component of the relation knocked
  out (component i alone among them);
- `knocked[i]`: the true circuit with component i's out-edges knocked out;
- `mean_knocked[i]`: as `knocked`, every edge outside given its mean write over the clean batch
  (probes.circuits.ablations; 0 = every edge mean-ablated), for the MLPs that compute or carry.
A component's edges are the true edges it sends. Nothing has LayerNorm, so the metric is linear in
the gate neuron's output and a share is the gate function's value at that input over its value at
the full input: the shares are set exactly by the ramps below, not measured.

Most models are one gate: `branches` heads each copy "the word is positive" (1 or 0), times their
weight, into their own dim; an MLP in the last layer reads the sum x of those dims and writes
g(x) - g(full)/2 to the dim the logits read, g piecewise linear through chosen points (one GELU ramp
per bend, as planted.two_branches). Distractors copy the word's identity, loud, into junk dims a
further neuron reads and writes back to junk (planted's convention: loud, changing, irrelevant).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import torch

from models import ModelSpec
from models.graph import MLP, Edge, Embed, Head, Input, Logits
from probes.circuits.redundancy import Structure
from probes.circuits.truth.planted import LOUD, RAMP, SHARP, Planted, Weights, attend_position, copy, pairs_batch

TRUE, FALSE, ASK = 5, 6, 4  # tokens of the gate models: words 0-3 (0, 1 positive), `?`, T, F
GAIN = 8.0  # unembedding scale: the clean metric is GAIN x g(full)


class Kind(StrEnum):
    OR = "OR"  # each component alone keeps (about) everything
    PARTIAL_OR = "PARTIAL_OR"  # one alone keeps everything, others part; none is necessary
    AND = "AND"  # each alone keeps at most part (below target); all together needed
    SERIES = "SERIES"  # a chain: knocking out any link loses everything
    ADDITIVE = "ADDITIVE"  # each keeps its own share alone; shares add up to 1
    NECESSARY = "NECESSARY"  # an MLP that computes: mean-ablating it destroys the answer
    CARRIES = "CARRIES"  # an MLP that only amplifies: the answer is decodable without it
    SHARED = "SHARED"  # each alone keeps part, knocking out each costs little, all together a lot
    CASE_SPLIT = "CASE_SPLIT"  # each pair needs exactly one component (relation_gates.py)


@dataclass(frozen=True)
class Relation:
    kind: Kind
    components: tuple  # Head / MLP senders, in the order `alone` and `knocked` follow
    alone: tuple[float, ...]
    knocked: tuple[float, ...]
    mean_knocked: tuple[float, ...] | None = None  # `knocked` with mean ablation (NECESSARY, CARRIES)


@dataclass(frozen=True)
class Gate(Planted):
    relations: tuple[Relation, ...] = ()


def ramps(points: tuple[tuple[float, float], ...]) -> list[tuple[float, float]]:
    """(scale, threshold) ramps summing to the piecewise-linear curve through `points` (x rising,
    starting at (0, 0)), flat after the last point."""
    slopes = [(y1 - y0) / (x1 - x0) for (x0, y0), (x1, y1) in zip(points, points[1:])]
    bends = [b - a for a, b in zip([0.0, *slopes], [*slopes, 0.0])]
    return [(c, x) for c, (x, _) in zip(bends, points) if abs(c) > 1e-12]


def curve(points, x: float) -> float:
    """The curve `ramps(points)` draws, at x (relu sums: what the GELU ramps approximate)."""
    return sum(c * max(x - t, 0.0) for c, t in ramps(points))


def write_ramps(w: Weights, layer: int, reads: list[int], out: int, points, first: int = 0) -> int:
    """MLP `layer`'s neurons from `first` on draw the curve of the sum of `reads` into `out`; returns
    the next free neuron."""
    mlp_in, mlp_out, bias = (w.state[f"blocks.{layer}.mlp.{part}"] for part in ("in.weight", "out.weight", "in.bias"))
    for neuron, (scale, threshold) in enumerate(ramps(points), first):
        mlp_in[neuron, reads] = RAMP
        bias[neuron] = -RAMP * threshold
        mlp_out[out, neuron] = scale / RAMP
    return first + len(ramps(points))


def word_pairs(n: int, seed: int, mixed: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Clean and counterfactual words: every clean word positive and its partner negative, or
    (`mixed`) half the pairs the other way round, so a mean over the clean batch is balanced."""
    generator = torch.Generator().manual_seed(seed)
    positive = torch.randint(0, 2, (n,), generator=generator)
    negative = torch.randint(2, 4, (n,), generator=generator)
    if not mixed:
        return positive, negative
    swap = torch.arange(n) % 2 == 1
    return torch.where(swap, negative, positive), torch.where(swap, positive, negative)


def answer_of(word: torch.Tensor) -> torch.Tensor:
    return torch.where(word < 2, TRUE, FALSE)


def word_batch(clean: torch.Tensor, other: torch.Tensor, width: int):
    """`w f ... ?` pairs (fillers are token ASK too: nothing reads them) answered T/F."""
    n = len(clean)

    def sequence(word):
        return torch.cat([word[:, None], torch.full((n, width - 1), ASK), answer_of(word)[:, None]], 1)

    return pairs_batch(sequence(clean), sequence(other), width - 1, answer_of(clean), answer_of(other))


def layout(spec: ModelSpec, width: int, extra: int):
    """Residual dims: tokens 0-6, positions, then `extra` named dims, then 4 junk dims."""
    position = list(range(7, 7 + width))
    free = list(range(7 + width, 7 + width + extra))
    junk = list(range(7 + width + extra, 7 + width + extra + 4))
    assert junk[-1] < spec.d_model, "d_model too small for the layout"
    return position, free, junk


def base_weights(spec: ModelSpec, width: int) -> Weights:
    w = Weights(spec)
    w.state["embed.weight"][:, :7] = torch.eye(7)
    w.state["pos_embed.weight"][:, 7 : 7 + width] = torch.eye(width)
    return w


def distract(w: Weights, position: list[int], junk: list[int], mlp_layer: int | None, neuron: int):
    """The last head of layer 0 copies the word's identity, loud, into junk[0]; the last head of the
    last layer (if another) copies junk[0] from position 0 into junk[1]; an MLP neuron reads both and
    writes junk[2:]. Large, changing with the counterfactual, read by nothing the logits read."""
    spec = w.spec
    last_head, last_layer = spec.n_heads - 1, spec.n_layers - 1
    attend_position(w, 0, last_head, position, position[0])
    w.head(0, last_head, "v")[0, :4] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    w.head(0, last_head, "o")[junk[0], 0] = LOUD
    if last_layer > 0:
        attend_position(w, last_layer, last_head, position, position[0])
        copy(w, last_layer, last_head, [junk[0]], [junk[1]], LOUD)
    if mlp_layer is not None:
        w.state[f"blocks.{mlp_layer}.mlp.in.weight"][neuron, junk[:2]] = 1.0
        w.state[f"blocks.{mlp_layer}.mlp.out.weight"][junk[2:], neuron] = LOUD


def spec_for(n_layers: int, n_heads: int, width: int, extra: int, mlp: bool = True) -> ModelSpec:
    d_model = n_heads * -(-(7 + width + extra + 4) // n_heads)  # the smallest multiple of n_heads that fits
    return ModelSpec(
        n_layers=n_layers,
        d_model=max(d_model, 2 * n_heads),
        n_heads=n_heads,
        mlp=mlp,
        norm=None,
        scale_scores=False,
        n_ctx=width,
        d_vocab=7,
    )


def gate(
    name: str,
    story: str,
    kind: Kind,
    branches: tuple[tuple[Head, float], ...],
    points,
    n: int,
    seed: int,
    structure: Structure = Structure.SERIES,
) -> Gate:
    """One gate (the module docstring): `branches` (head, weight), the MLP of the last layer drawing
    the curve through `points` of their weighted sum, normalised so the full input gives 1."""
    n_layers = 1 + max(head.layer for head, _ in branches)
    n_heads = 2 + max(head.head for head, _ in branches)
    width, last = 2, n_layers - 1
    spec = spec_for(n_layers, n_heads, width, len(branches) + 1)
    w = base_weights(spec, width)
    position, free, junk = layout(spec, width, len(branches) + 1)
    bits, out = free[:-1], free[-1]
    for (head, weight), bit in zip(branches, bits):
        attend_position(w, head.layer, head.head, position, position[0])
        w.head(head.layer, head.head, "v")[0, [0, 1]] = 1.0
        w.head(head.layer, head.head, "o")[bit, 0] = weight
    full = curve(points, sum(weight for _, weight in branches))
    points = tuple((x, y / full) for x, y in points)
    neuron = write_ramps(w, last, bits, out, points)
    w.state[f"blocks.{last}.mlp.out.bias"][out] = -0.5
    distract(w, position, junk, last, neuron)
    w.state["unembed.weight"][TRUE, out], w.state["unembed.weight"][FALSE, out] = GAIN, -GAIN
    heads = tuple(head for head, _ in branches)
    edges = {Edge(MLP(last), Input(Logits()))}
    edges |= {e for head in heads for e in (Edge(Embed(), Input(head, "v")), Edge(head, Input(MLP(last))))}
    total = sum(weight for _, weight in branches)
    alone = tuple(round(curve(points, weight), 6) for _, weight in branches)
    knocked = tuple(round(curve(points, total - weight), 6) for _, weight in branches)
    relation = Relation(kind, heads, alone, knocked)
    return Gate(
        name,
        story,
        spec,
        w.load(),
        word_batch(*word_pairs(n, seed, False), width),
        frozenset(edges),
        structure,
        heads if structure is not Structure.SERIES else (),
        (relation,),
    )


EITHER = ((0.0, 0.0), (1.0, 1.0))  # min(x, 1): any one weight-1 input suffices
BOTH = ((0.0, 0.0), (1.0, 0.0), (2.0, 1.0))  # relu(x - 1): one weight-1 input alone gives nothing
LINEAR = ((0.0, 0.0), (1.0, 1.0))  # x, for weights summing to 1


def or_across(n: int = 64, seed: int = 0) -> Gate:
    return gate(
        "or-across",
        "A layer-0 and a layer-1 head each alone suffice (an OR across layers)",
        Kind.OR,
        ((Head(0, 0), 1.0), (Head(1, 0), 1.0)),
        EITHER,
        n,
        seed,
        Structure.ALTERNATIVES,
    )


def or_within_l1(n: int = 64, seed: int = 0) -> Gate:
    return gate(
        "or-within-l1",
        "Two layer-1 heads each alone suffice (an OR within layer 1)",
        Kind.OR,
        ((Head(1, 0), 1.0), (Head(1, 1), 1.0)),
        EITHER,
        n,
        seed,
        Structure.ALTERNATIVES,
    )


def or_three_layers(n: int = 64, seed: int = 0) -> Gate:
    return gate(
        "or-three-layers",
        "One head in each of three layers, any one alone suffices (an OR of three)",
        Kind.OR,
        ((Head(0, 0), 1.0), (Head(1, 0), 1.0), (Head(2, 0), 1.0)),
        EITHER,
        n,
        seed,
        Structure.ALTERNATIVES,
    )


def partial_or_across(n: int = 64, seed: int = 0) -> Gate:
    return gate(
        "partial-or-across",
        "A layer-0 head alone keeps 100%, a layer-1 head alone 50% (a partial OR)",
        Kind.PARTIAL_OR,
        ((Head(0, 0), 1.0), (Head(1, 0), 0.5)),
        EITHER,
        n,
        seed,
    )


def partial_or_three(n: int = 64, seed: int = 0) -> Gate:
    return gate(
        "partial-or-three",
        "One head alone keeps 100%, two others 50% each and 100% together (a three-way partial OR)",
        Kind.PARTIAL_OR,
        ((Head(0, 0), 1.0), (Head(0, 1), 0.5), (Head(1, 0), 0.5)),
        EITHER,
        n,
        seed,
    )


def and_across(n: int = 64, seed: int = 0) -> Gate:
    return gate(
        "and-across",
        "A layer-0 and a layer-1 head both needed: each alone keeps nothing (an AND across layers)",
        Kind.AND,
        ((Head(0, 0), 1.0), (Head(1, 0), 1.0)),
        BOTH,
        n,
        seed,
    )


def soft_and_across(n: int = 64, seed: int = 0) -> Gate:
    return gate(
        "soft-and-across",
        "A layer-0 and a layer-1 head each alone keep 25%, together 100% (a soft AND)",
        Kind.AND,
        ((Head(0, 0), 1.0), (Head(1, 0), 1.0)),
        ((0.0, 0.0), (1.0, 0.25), (2.0, 1.0)),
        n,
        seed,
    )


def and_within_l1(n: int = 64, seed: int = 0) -> Gate:
    return gate(
        "and-within-l1",
        "Two layer-1 heads: one alone keeps 75%, the other nothing, together 100% (an AND within layer 1)",
        Kind.AND,
        ((Head(1, 0), 1.0), (Head(1, 1), 0.5)),
        ((0.0, 0.0), (0.5, 0.0), (1.0, 0.75), (1.5, 1.0)),
        n,
        seed,
    )


def and_three(n: int = 64, seed: int = 0) -> Gate:
    return gate(
        "and-three",
        "Three heads in three layers all needed: any two keep nothing (an AND of three)",
        Kind.AND,
        ((Head(0, 0), 1.0), (Head(1, 0), 1.0), (Head(2, 0), 1.0)),
        ((0.0, 0.0), (2.0, 0.0), (3.0, 1.0)),
        n,
        seed,
    )


def adder(n: int = 64, seed: int = 0) -> Gate:
    return gate(
        "adder",
        "Three heads add their shares, 50%, 30% and 20% (an ADDER)",
        Kind.ADDITIVE,
        ((Head(0, 0), 0.5), (Head(0, 1), 0.3), (Head(0, 2), 0.2)),
        LINEAR,
        n,
        seed,
        Structure.SHARED,
    )


def adder_across(n: int = 64, seed: int = 0) -> Gate:
    return gate(
        "adder-across",
        "A head in each of two layers adds 60% and 40% (an ADDER across layers)",
        Kind.ADDITIVE,
        ((Head(0, 0), 0.6), (Head(1, 0), 0.4)),
        LINEAR,
        n,
        seed,
        Structure.SHARED,
    )


def chain(hops: int, n: int = 64, seed: int = 0) -> Gate:
    """`w f ... ?` -> T/F of w along `hops` heads in series (V composition): L0H0 copies "w is
    positive" from position 0 into r0 at every position, each next layer's H0 copies the previous
    r from position l (which holds w only through the chain) into the next r, and the last r is the
    logits' dim. Distractors: planted's loud junk."""
    width = hops + 1
    spec = spec_for(hops, 2, width, hops, mlp=False)
    w = base_weights(spec, width)
    position, r, junk = layout(spec, width, hops)
    for layer in range(hops):
        attend_position(w, layer, 0, position, position[layer])
        if layer == 0:
            w.head(0, 0, "v")[0, [0, 1]] = 1.0
            w.head(0, 0, "o")[r[0], 0] = 1.0
        else:
            copy(w, layer, 0, [r[layer - 1]], [r[layer]])
    w.state["unembed.weight"][TRUE, r[-1]], w.state["unembed.weight"][FALSE, r[-1]] = GAIN, -GAIN
    # r is 1 (T) or 0 (F): the unembedding's bias, equal in every run and no edge, centres it
    w.state["unembed.bias"][TRUE], w.state["unembed.bias"][FALSE] = -GAIN / 2, GAIN / 2
    distract(w, position, junk, None, 0)
    heads = tuple(Head(layer, 0) for layer in range(hops))
    edges = {Edge(Embed(), Input(heads[0], "v")), Edge(heads[-1], Input(Logits()))}
    edges |= {Edge(a, Input(b, "v")) for a, b in zip(heads, heads[1:])}
    relation = Relation(Kind.SERIES, heads, (0.0,) * hops, (0.0,) * hops)
    return Gate(
        f"chain-{hops}",
        f"A chain of {hops} heads in series (V composition)",
        spec,
        w.load(),
        word_batch(*word_pairs(n, seed, False), width),
        frozenset(edges),
        Structure.SERIES,
        (),
        (relation,),
    )


def chain_2(n: int = 64, seed: int = 0) -> Gate:
    return chain(2, n, seed)


def chain_3(n: int = 64, seed: int = 0) -> Gate:
    return chain(3, n, seed)


def chain_4(n: int = 64, seed: int = 0) -> Gate:
    return chain(4, n, seed)


def mlp_chain(n: int = 64, seed: int = 0) -> Gate:
    """`x y adj so` -> the noun the adjective's role picks (planted.two_hop) with an MLP between the
    hops: L0H0 writes the role r (+1: x, -1: y) at every position; MLP0 turns it into 2 relu(r) - 1
    in another dim; L1H0's query reads only that dim (Q composition through the MLP) and copies the
    picked noun to the logits. Chain L0H0 -> MLP0 -> L1H0.q -> logits, in series."""
    spec = ModelSpec(n_layers=2, d_model=32, n_heads=2, mlp=True, norm=None, scale_scores=False, n_ctx=4, d_vocab=9)
    w = Weights(spec)
    nouns, adjectives, so = list(range(4)), list(range(4, 8)), 8
    position, role, role2, junk, answer = [9, 10, 11, 12], 13, 14, list(range(15, 22)), list(range(22, 26))
    w.state["embed.weight"][:, :9] = torch.eye(9)
    w.state["pos_embed.weight"][:, position] = torch.eye(4)
    attend_position(w, 0, 0, position, position[2])
    w.head(0, 0, "v")[0, adjectives] = torch.tensor([1.0, 1.0, -1.0, -1.0])
    w.head(0, 0, "o")[role, 0] = 1.0
    write_ramps(w, 0, [role], role2, ((0.0, 0.0), (1.0, 2.0)))  # 2 relu(r) for r in {-1, 1}
    w.state["blocks.0.mlp.out.bias"][role2] = -1.0
    w.head(1, 0, "q")[0, role2] = SHARP
    w.head(1, 0, "k")[0, position[:2]] = torch.tensor([1.0, -1.0])
    copy(w, 1, 0, nouns, answer)
    w.state["unembed.weight"][:4, answer[0] : answer[-1] + 1] = LOUD * torch.eye(4)
    # Distractors: L0H1 copies the adjective's identity, loud, into junk; an MLP0 neuron reads it.
    attend_position(w, 0, 1, position, position[2])
    copy(w, 0, 1, adjectives, junk[:4], LOUD)
    w.state["blocks.0.mlp.in.weight"][2, junk[:4]] = 1.0
    w.state["blocks.0.mlp.out.weight"][junk[4:], 2] = LOUD
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 4, (n,), generator=generator)
    y = (x + torch.randint(1, 4, (n,), generator=generator)) % 4
    adjective = torch.randint(4, 8, (n,), generator=generator)
    flipped = torch.where(adjective < 6, adjective + 2, adjective - 2)
    picks = lambda adj: torch.where(adj < 6, x, y)  # noqa: E731
    tokens = torch.stack([x, y, adjective, torch.full((n,), so), picks(adjective)], 1)
    counterfactual = torch.stack([x, y, flipped, torch.full((n,), so), picks(flipped)], 1)
    links = (Head(0, 0), MLP(0), Head(1, 0))
    edges = {
        Edge(Embed(), Input(Head(0, 0), "v")),
        Edge(Head(0, 0), Input(MLP(0))),
        Edge(MLP(0), Input(Head(1, 0), "q")),
        Edge(Head(1, 0), Input(Logits())),
    }
    return Gate(
        "mlp-chain",
        "L0H0 -> MLP0 -> L1H0's query -> logits, in series",
        spec,
        w.load(),
        pairs_batch(tokens, counterfactual, 3, picks(adjective), picks(flipped)),
        frozenset(edges),
        Structure.SERIES,
        (),
        (Relation(Kind.SERIES, links, (0.0,) * 3, (0.0,) * 3),),
    )


def mlp_computes(n: int = 64, seed: int = 0) -> Gate:
    """`a b ?` with bits a, b (tokens 0, 1) -> T if a != b else F. L0H0 copies a (+-1) from position
    0, L1H0 copies b from position 1, and two MLP1 neurons fire when they agree (as planted.mlp_xor),
    writing +1 (agree) or -1 (differ) to the logits' dim: the answer is in no head's write, only in
    MLP1's. The pairs cycle through every (a, b), the counterfactual flips a or b, so the clean answers
    are balanced and MLP1's mean write says nothing."""
    width = 3
    spec = spec_for(2, 2, width, 3)
    w = base_weights(spec, width)
    position, (bit_a, bit_b, out), junk = layout(spec, width, 3)
    for layer, bit in ((0, bit_a), (1, bit_b)):
        attend_position(w, layer, 0, position, position[layer])
        w.head(layer, 0, "v")[0, [0, 1]] = torch.tensor([-1.0, 1.0])
        w.head(layer, 0, "o")[bit, 0] = 1.0
    mlp_in, mlp_out, bias = (w.state[f"blocks.1.mlp.{p}"] for p in ("in.weight", "out.weight", "in.bias"))
    mlp_in[0, [bit_a, bit_b]], mlp_in[1, [bit_a, bit_b]] = RAMP, -RAMP  # relu(+-(a + b) - 1) x RAMP
    bias[:2] = -RAMP
    mlp_out[out, :2] = 2.0 / RAMP
    w.state["blocks.1.mlp.out.bias"][out] = -1.0
    distract(w, position, junk, 1, 2)
    w.state["unembed.weight"][TRUE, out], w.state["unembed.weight"][FALSE, out] = -GAIN / 2, GAIN / 2
    i = torch.arange(n) + seed
    a, b, flip_a = i % 2, (i // 2) % 2, (i // 4) % 2 == 0
    ca, cb = torch.where(flip_a, 1 - a, a), torch.where(flip_a, b, 1 - b)
    label = lambda x, y: torch.where(x != y, TRUE, FALSE)  # noqa: E731
    ask = torch.full((n,), ASK)
    batch = pairs_batch(
        torch.stack([a, b, ask, label(a, b)], 1),
        torch.stack([ca, cb, ask, label(ca, cb)], 1),
        2,
        label(a, b),
        label(ca, cb),
    )
    edges = {
        Edge(Embed(), Input(Head(0, 0), "v")),
        Edge(Embed(), Input(Head(1, 0), "v")),
        Edge(Head(0, 0), Input(MLP(1))),
        Edge(Head(1, 0), Input(MLP(1))),
        Edge(MLP(1), Input(Logits())),
    }
    relation = Relation(Kind.NECESSARY, (MLP(1),), (1.0,), (0.0,), mean_knocked=(0.0,))
    return Gate(
        "mlp-computes",
        "An MLP that computes (XOR of two heads' bits): mean-ablating it destroys the answer",
        spec,
        w.load(),
        batch,
        frozenset(edges),
        Structure.SERIES,
        (),
        (relation,),
    )


def mlp_carries(n: int = 64, seed: int = 0) -> Gate:
    """`w ?` -> T/F of w, clean answers balanced. L0H0 writes s = +-1 ("w is positive") straight into
    the logits' dim and MLP0 adds 2 relu(s) - 1 = s on top (an amplifier). Counterfactual-ablated,
    MLP0 writes the other run's -s and cancels the head (the metric sits halfway between the runs');
    mean-ablated it writes its mean, 0 over the balanced batch, and the head's s still decides: half
    the metric, every answer kept."""
    width = 2
    spec = spec_for(1, 2, width, 1)
    w = base_weights(spec, width)
    position, (out,), junk = layout(spec, width, 1)
    attend_position(w, 0, 0, position, position[0])
    w.head(0, 0, "v")[0, :4] = torch.tensor([1.0, 1.0, -1.0, -1.0])
    w.head(0, 0, "o")[out, 0] = 1.0
    neuron = write_ramps(w, 0, [out], out, ((0.0, 0.0), (1.0, 2.0)))
    w.state["blocks.0.mlp.out.bias"][out] = -1.0
    distract(w, position, junk, 0, neuron)
    w.state["unembed.weight"][TRUE, out], w.state["unembed.weight"][FALSE, out] = GAIN / 2, -GAIN / 2
    edges = {
        Edge(Embed(), Input(Head(0, 0), "v")),
        Edge(Head(0, 0), Input(MLP(0))),
        Edge(Head(0, 0), Input(Logits())),
        Edge(MLP(0), Input(Logits())),
    }
    relation = Relation(Kind.CARRIES, (MLP(0),), (1.0,), (0.5,), mean_knocked=(0.5,))
    return Gate(
        "mlp-carries",
        "An MLP that only amplifies a head's answer: mean-ablating it keeps the answer",
        spec,
        w.load(),
        word_batch(*word_pairs(n, seed, True), width),
        frozenset(edges),
        Structure.SERIES,
        (),
        (relation,),
    )


GATES = (
    or_across,
    or_within_l1,
    or_three_layers,
    partial_or_across,
    partial_or_three,
    and_across,
    soft_and_across,
    and_within_l1,
    and_three,
    adder,
    adder_across,
    chain_2,
    chain_3,
    chain_4,
    mlp_chain,
    mlp_computes,
    mlp_carries,
)


def gate_models(n: int = 64, seed: int = 0) -> list[Gate]:
    return [build(n, seed) for build in GATES]
