"""Planted models for the relation classes gates.py does not plant (probes.circuits.relation_classes):
a symmetric partial OR, shared work over four heads, case splits of two and three heads (each pair
needs exactly one head), and a chain whose two downstream heads add up. Hand-set weights, so each
relation is true by construction; `alone` / `knocked` as in gates.Relation (a case split's are each
head's share of the pairs it decides, and 1 - that share).
"""

from __future__ import annotations

import torch

from models import ModelSpec
from models.graph import Edge, Embed, Head, Input, Logits
from probes.circuits.redundancy import Structure
from probes.circuits.truth.gates import GAIN, Gate, Kind, Relation, base_weights, distract, gate, layout, spec_for
from probes.circuits.truth.gates import word_batch, word_pairs
from probes.circuits.truth.planted import attend_position, copy, pairs_batch


def partial_or_symmetric(n: int = 64, seed: int = 0) -> Gate:
    return gate(
        "partial-or-symmetric",
        "A layer-0 and a layer-1 head each alone keep 70%, together 100% (a symmetric partial OR)",
        Kind.PARTIAL_OR,
        ((Head(0, 0), 1.0), (Head(1, 0), 1.0)),
        ((0.0, 0.0), (1.0, 0.7), (2.0, 1.0)),
        n,
        seed,
    )


def shared_four(n: int = 64, seed: int = 0) -> Gate:
    return gate(
        "shared-four",
        "Four layer-0 heads share the work: one alone keeps 30%, two 65%, three 88%, all four 100%",
        Kind.SHARED,
        tuple((Head(0, h), 1.0) for h in range(4)),
        ((0.0, 0.0), (1.0, 0.3), (2.0, 0.65), (3.0, 0.88), (4.0, 1.0)),
        n,
        seed,
        Structure.SHARED,
    )


def case_split(heads: tuple[Head, ...], n: int, seed: int) -> Gate:
    """`w ?` -> T if w is positive, for 2k words (k = len(heads)): word c and k + c are case c's
    positive and negative. Head c reads only case c's two words (+1 / -1) and writes the logits' dim;
    a pair's counterfactual keeps the case, so exactly one head decides each pair and the others
    write the same in both runs."""
    k = len(heads)
    ask, true, false = 2 * k, 2 * k + 1, 2 * k + 2
    width, vocab = 2, 2 * k + 3
    n_heads = 1 + max(h.head for h in heads) + 1
    d_model = n_heads * -(-(vocab + width + 1 + 4) // n_heads)
    spec = ModelSpec(
        n_layers=2,
        d_model=d_model,
        n_heads=n_heads,
        mlp=False,
        norm=None,
        scale_scores=False,
        n_ctx=width,
        d_vocab=vocab,
    )
    w = base_weights_for(spec, vocab, width)
    position, out, junk = list(range(vocab, vocab + width)), vocab + width, list(range(vocab + width + 1, d_model))
    for c, head in enumerate(heads):
        attend_position(w, head.layer, head.head, position, position[0])
        w.head(head.layer, head.head, "v")[0, [c, k + c]] = torch.tensor([1.0, -1.0])
        w.head(head.layer, head.head, "o")[out, 0] = 1.0
    distract(w, position, junk, None, 0)
    w.state["unembed.weight"][true, out], w.state["unembed.weight"][false, out] = GAIN / 2, -GAIN / 2
    generator = torch.Generator().manual_seed(seed)
    case = torch.randint(0, k, (n,), generator=generator)
    answer = lambda word: torch.where(word < k, true, false)  # noqa: E731
    clean, other = case, case + k
    sequence = lambda word: torch.stack([word, torch.full((n,), ask), answer(word)], 1)  # noqa: E731
    batch = pairs_batch(sequence(clean), sequence(other), 1, answer(clean), answer(other))
    edges = {e for h in heads for e in (Edge(Embed(), Input(h, "v")), Edge(h, Input(Logits())))}
    decides = tuple(float((case == c).float().mean()) for c in range(k))
    return Gate(
        f"case-split-{k}",
        f"Each pair needs exactly one of {k} heads, by its word's case (a case split)",
        spec,
        w.load(),
        batch,
        frozenset(edges),
        Structure.SERIES,
        (),
        (Relation(Kind.CASE_SPLIT, heads, decides, tuple(1 - d for d in decides)),),
    )


def base_weights_for(spec: ModelSpec, vocab: int, width: int):
    from probes.circuits.truth.planted import Weights

    w = Weights(spec)
    w.state["embed.weight"][:, :vocab] = torch.eye(vocab)
    w.state["pos_embed.weight"][:, vocab : vocab + width] = torch.eye(width)
    return w


def case_split_2(n: int = 64, seed: int = 0) -> Gate:
    return case_split((Head(0, 0), Head(1, 0)), n, seed)


def case_split_3(n: int = 64, seed: int = 0) -> Gate:
    return case_split((Head(0, 0), Head(0, 1), Head(1, 0)), n, seed)


def chain_adding(n: int = 64, seed: int = 0) -> Gate:
    """`w f ?` -> T/F of w: L0H0 copies "w is positive" into r0 at every position; L1H0 and L1H1 each
    copy half of r0 into r1, the logits' dim: L0H0 -> L1H0 and L0H0 -> L1H1 in series, the two
    downstream heads adding up (50% each)."""
    width = 3
    spec = spec_for(2, 3, width, 2, mlp=False)
    w = base_weights(spec, width)
    position, r, junk = layout(spec, width, 2)
    attend_position(w, 0, 0, position, position[0])
    w.head(0, 0, "v")[0, [0, 1]] = 1.0
    w.head(0, 0, "o")[r[0], 0] = 1.0
    for head in (0, 1):
        attend_position(w, 1, head, position, position[1])
        copy(w, 1, head, [r[0]], [r[1]], 0.5)
    w.state["unembed.weight"][5, r[1]], w.state["unembed.weight"][6, r[1]] = GAIN, -GAIN
    w.state["unembed.bias"][5], w.state["unembed.bias"][6] = -GAIN / 2, GAIN / 2
    distract(w, position, junk, None, 0)
    up, downs = Head(0, 0), (Head(1, 0), Head(1, 1))
    edges = {Edge(Embed(), Input(up, "v"))} | {
        e for d in downs for e in (Edge(up, Input(d, "v")), Edge(d, Input(Logits())))
    }
    return Gate(
        "chain-adding",
        "L0H0 feeds two layer-1 heads that each carry half the answer (a chain whose downstream heads add up)",
        spec,
        w.load(),
        word_batch(*word_pairs(n, seed, False), width),
        frozenset(edges),
        Structure.SERIES,
        (),
        (
            Relation(Kind.SERIES, (up, downs[0]), (0.0, 0.0), (0.0, 0.5)),
            Relation(Kind.SERIES, (up, downs[1]), (0.0, 0.0), (0.0, 0.5)),
            Relation(Kind.ADDITIVE, downs, (0.5, 0.5), (0.5, 0.5)),
        ),
    )


RELATION_GATES = (partial_or_symmetric, shared_four, case_split_2, case_split_3, chain_adding)


def relation_gate_models(n: int = 64, seed: int = 0) -> list[Gate]:
    return [build(n, seed) for build in RELATION_GATES]
