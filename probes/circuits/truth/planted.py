"""Planted circuits: small models whose weights are set by hand so that a known set of edges carries
the answer, with distractor heads (and MLP neurons) whose outputs are large and change with the
counterfactual but never reach the answer - foil logit. Ground truth for the edge methods.

The planted edges are the ones the counterfactual's change flows through to the answer, true by
construction: every other edge either carries no change (its sender writes the same in both runs,
or its receiver does not read the dimensions written) or reaches no dimension the unembedding reads
for the answer or foil. No LayerNorm, so a write nothing reads stays irrelevant. Residual dimensions
are named slices of one-hot bases; scores are not scaled (scale_scores=False), attention is made
sharp with SHARP.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from models import ModelSpec, build_model
from models.graph import MLP, Edge, Embed, Head, Input, Logits
from probes.circuits.redundancy import Structure
from tasks.data import Batch

if TYPE_CHECKING:
    from transformer_lens import TransformerBridge

SHARP = 30.0  # attention score gap: softmax leaks e^-30 to the keys it should ignore
LOUD = 10.0  # scale of the distractors' writes


@dataclass(frozen=True)
class Planted:
    name: str
    story: str
    spec: ModelSpec
    model: TransformerBridge  # with the planted weights, eval mode
    batch: Batch
    edges: frozenset  # the planted circuit, as graph edges
    structure: Structure = Structure.SERIES  # the verdict a redundancy analysis must reach
    branches: tuple = ()  # the heads whose branches are alternatives or share the answer


class Weights:
    """A zeroed state dict of `spec`'s model and per-head views into it."""

    def __init__(self, spec: ModelSpec):
        self.spec, self.model = spec, build_model(spec, seed=0)
        self.state = {name: torch.zeros_like(value) for name, value in self.model.state_dict().items()}

    def head(self, layer: int, head: int, part: str) -> torch.Tensor:
        """[d_head, d_model] of q/k/v, [d_model, d_head] of o; writes go to the state dict."""
        rows = slice(head * self.spec.d_head, (head + 1) * self.spec.d_head)
        weight = self.state[f"blocks.{layer}.attn.{part}.weight"]
        return weight[:, rows] if part == "o" else weight[rows]

    def load(self):
        self.model.load_state_dict(self.state)
        return self.model.eval()


def story_of(build) -> str:
    """A planted model's story: the first sentence of its builder's docstring."""
    return (build.__doc__ or build.__name__).split(".")[0]


def pairs_batch(tokens: torch.Tensor, counterfactual: torch.Tensor, position: int, answers, foils) -> Batch:
    n = len(tokens)
    return Batch(
        tokens=tokens,
        lengths=torch.full((n,), tokens.shape[1]),
        example_index=torch.arange(n),
        positions=torch.full((n,), position),
        answers=answers,
        foils=foils,
        groups=["planted"] * n,
        counterfactual=counterfactual,
    )


def copy(w: Weights, layer: int, head: int, source: list[int], target: list[int], scale: float = 1.0):
    """The head's value reads residual dims `source` and its output writes them to `target`."""
    for i, (s, t) in enumerate(zip(source, target)):
        w.head(layer, head, "v")[i, s] = 1.0
        w.head(layer, head, "o")[t, i] = scale


def attend_position(w: Weights, layer: int, head: int, constant: list[int], key_dim: int):
    """Every query attends the position whose one-hot dim is `key_dim` (`constant`: dims summing to
    1 at every position, so the query is the same everywhere); the row before it, if any, gets 0."""
    w.head(layer, head, "q")[-1, constant] = 1.0
    w.head(layer, head, "k")[-1, key_dim] = SHARP


def two_hop(n: int = 64, seed: int = 0) -> Planted:
    """`x y adj so` -> the noun the adjective's role picks (Winograd-style, two hops). L0H0 at `so`
    attends the adjective and writes its role (+1: x, -1: y); L1H0's query reads the role (Q
    composition) and attends x or y, copying that noun to the logits. The counterfactual swaps the
    adjective for one of the other role, so the answer becomes the other noun."""
    spec = ModelSpec(n_layers=2, d_model=32, n_heads=2, mlp=False, norm=None, scale_scores=False, n_ctx=4, d_vocab=9)
    w = Weights(spec)
    nouns, adjectives, so = list(range(4)), list(range(4, 8)), 8
    position, role, junk, answer = [9, 10, 11, 12], 13, list(range(14, 22)), list(range(22, 26))
    w.state["embed.weight"][:, :9] = torch.eye(9)
    w.state["pos_embed.weight"][:, position] = torch.eye(4)
    attend_position(w, 0, 0, position, position[2])
    w.head(0, 0, "v")[0, adjectives] = torch.tensor([1.0, 1.0, -1.0, -1.0])
    w.head(0, 0, "o")[role, 0] = 1.0
    w.head(1, 0, "q")[0, role] = SHARP
    w.head(1, 0, "k")[0, position[:2]] = torch.tensor([1.0, -1.0])
    copy(w, 1, 0, nouns, answer)
    w.state["unembed.weight"][:4, answer[0] : answer[-1] + 1] = LOUD * torch.eye(4)
    # Distractors: L0H1 copies the adjective's identity, loud, into junk; L1H1 reads junk, writes junk.
    attend_position(w, 0, 1, position, position[2])
    copy(w, 0, 1, adjectives, junk[:4], LOUD)
    w.head(1, 1, "q")[:4, junk[:4]] = torch.eye(4)
    w.head(1, 1, "k")[:4, junk[:4]] = torch.eye(4)
    copy(w, 1, 1, junk[:4], junk[4:], LOUD)
    generator = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 4, (n,), generator=generator)
    y = (x + torch.randint(1, 4, (n,), generator=generator)) % 4
    adjective = torch.randint(4, 8, (n,), generator=generator)
    flipped = torch.where(adjective < 6, adjective + 2, adjective - 2)
    picks = lambda adj: torch.where(adj < 6, x, y)  # noqa: E731
    tokens = torch.stack([x, y, adjective, torch.full((n,), so), picks(adjective)], 1)
    counterfactual = torch.stack([x, y, flipped, torch.full((n,), so), picks(flipped)], 1)
    edges = {
        Edge(Embed(), Input(Head(0, 0), "v")),
        Edge(Head(0, 0), Input(Head(1, 0), "q")),
        Edge(Head(1, 0), Input(Logits())),
    }
    return Planted(
        "two-hop",
        story_of(two_hop),
        spec,
        w.load(),
        pairs_batch(tokens, counterfactual, 3, picks(adjective), picks(flipped)),
        frozenset(edges),
    )


def induction(n: int = 64, seed: int = 0) -> Planted:
    """`BOS a b c d q` with q = a or c -> the token after q's first occurrence (induction). L0H0
    attends the previous position and writes its token into "previous" dims; L1H0's key reads them
    (K composition), its query the current token, and it copies the matching position's token. The
    counterfactual swaps a and c, so q's first occurrence moves and the answer changes."""
    spec = ModelSpec(n_layers=2, d_model=48, n_heads=2, mlp=False, norm=None, scale_scores=False, n_ctx=6, d_vocab=9)
    w = Weights(spec)
    tokens_, bos = list(range(8)), 8
    position, previous, answer, junk = list(range(9, 15)), list(range(15, 23)), list(range(23, 31)), list(range(31, 47))
    w.state["embed.weight"][:, :9] = torch.eye(9)
    w.state["pos_embed.weight"][:, position] = torch.eye(6)
    for p in range(1, 6):  # query at p, key at p - 1
        w.head(0, 0, "q")[p, position[p]] = SHARP
        w.head(0, 0, "k")[p, position[p - 1]] = 1.0
    copy(w, 0, 0, tokens_, previous)
    w.head(1, 0, "q")[:8, tokens_] = SHARP * torch.eye(8)
    w.head(1, 0, "k")[:8, previous] = torch.eye(8)
    copy(w, 1, 0, tokens_, answer)
    w.state["unembed.weight"][:8, answer[0] : answer[-1] + 1] = LOUD * torch.eye(8)
    # Distractors: L0H1 copies the current token, loud, into junk; L1H1 attends by junk and writes junk.
    for p in range(6):
        w.head(0, 1, "q")[p, position[p]] = SHARP
        w.head(0, 1, "k")[p, position[p]] = 1.0
    copy(w, 0, 1, tokens_, junk[:8], LOUD)
    w.head(1, 1, "q")[:8, junk[:8]] = torch.eye(8)
    w.head(1, 1, "k")[:8, junk[:8]] = torch.eye(8)
    copy(w, 1, 1, junk[:8], junk[8:], LOUD)
    generator = torch.Generator().manual_seed(seed)
    distinct = torch.stack([torch.randperm(8, generator=generator)[:4] for _ in range(n)])
    first = torch.randint(0, 2, (n,), generator=generator) * 2  # q = a (0) or c (2)
    query = distinct.gather(1, first[:, None])[:, 0]
    swapped = distinct[:, [2, 1, 0, 3]]

    def sequence(body):
        after = body.gather(1, ((body == query[:, None]).int().argmax(1) + 1)[:, None])[:, 0]
        return torch.cat([torch.full((n, 1), bos), body, query[:, None], after[:, None]], 1), after

    tokens, answers = sequence(distinct)
    counterfactual, foils = sequence(swapped)
    edges = {
        Edge(Embed(), Input(Head(0, 0), "v")),
        Edge(Head(0, 0), Input(Head(1, 0), "k")),
        Edge(Head(1, 0), Input(Logits())),
    }
    return Planted(
        "induction",
        story_of(induction),
        spec,
        w.load(),
        pairs_batch(tokens, counterfactual, 5, answers, foils),
        frozenset(edges),
    )


def mlp_xor(n: int = 64, seed: int = 0) -> Planted:
    """`a b ?` with bits a, b -> T if a != b else F, computed by an MLP. L0H0 and L0H1 at `?` copy
    the two bits (+-1) into two dims; two MLP neurons fire when the bits agree (|a + b| = 2) and write
    the XOR to the dim the logits read. Distractors L0H2/L0H3 copy the bits, loud, into junk that a
    third neuron reads and writes back to junk. The counterfactual flips one bit (a or b)."""
    spec = ModelSpec(n_layers=1, d_model=32, n_heads=4, mlp=True, norm=None, scale_scores=False, n_ctx=3, d_vocab=5)
    w = Weights(spec)
    zero, one, ask, true, false = range(5)
    position, bits, out, junk = [5, 6, 7], [8, 9], 10, list(range(11, 15))
    w.state["embed.weight"][:, :5] = torch.eye(5)
    w.state["pos_embed.weight"][:, position] = torch.eye(3)
    for head, source in ((0, 0), (1, 1), (2, 0), (3, 1)):
        attend_position(w, 0, head, position, position[source])
        w.head(0, head, "v")[0, [zero, one]] = torch.tensor([-1.0, 1.0])
        w.head(0, head, "o")[bits[source] if head < 2 else junk[head - 2], 0] = 1.0 if head < 2 else LOUD
    mlp_in, mlp_out = w.state["blocks.0.mlp.in.weight"], w.state["blocks.0.mlp.out.weight"]
    mlp_in[0, bits], mlp_in[1, bits] = 5.0, -5.0  # gelu(+-5(a + b) - 5): 5 when they agree
    w.state["blocks.0.mlp.in.bias"][:2] = -5.0
    mlp_out[out, :2] = 1.0
    w.state["blocks.0.mlp.out.bias"][out] = -2.5  # +2.5 agree, -2.5 differ
    mlp_in[2, junk[:2]] = 1.0  # the distractor neuron
    mlp_out[junk[2:], 2] = LOUD
    w.state["unembed.weight"][true, out], w.state["unembed.weight"][false, out] = -4.0, 4.0
    generator = torch.Generator().manual_seed(seed)
    a, b = (torch.randint(0, 2, (n,), generator=generator) for _ in range(2))
    flip_a = torch.randint(0, 2, (n,), generator=generator).bool()
    ca, cb = torch.where(flip_a, 1 - a, a), torch.where(flip_a, b, 1 - b)
    label = lambda x, y: torch.where(x != y, true, false)  # noqa: E731
    tokens = torch.stack([a, b, torch.full((n,), ask), label(a, b)], 1)
    counterfactual = torch.stack([ca, cb, torch.full((n,), ask), label(ca, cb)], 1)
    edges = {
        Edge(Embed(), Input(Head(0, 0), "v")),
        Edge(Embed(), Input(Head(0, 1), "v")),
        Edge(Head(0, 0), Input(MLP(0))),
        Edge(Head(0, 1), Input(MLP(0))),
        Edge(MLP(0), Input(Logits())),
    }
    return Planted(
        "mlp-xor",
        story_of(mlp_xor),
        spec,
        w.load(),
        pairs_batch(tokens, counterfactual, 2, label(a, b), label(ca, cb)),
        frozenset(edges),
    )


def three_hop(n: int = 64, seed: int = 0) -> Planted:
    """`w a b ?` -> w, carried along a chain of three heads (V composition twice). L0H0 copies w
    (attending position 0) into r1 at every position; L1H0 at `?` attends position 1 and copies r1
    into r2; L2H0 attends position 2 and copies r2 into the dims the logits read. The counterfactual
    changes w. Distractors L0H1, L1H1, L2H1 pass a loud copy of w along junk dims."""
    spec = ModelSpec(n_layers=3, d_model=32, n_heads=2, mlp=False, norm=None, scale_scores=False, n_ctx=4, d_vocab=9)
    w = Weights(spec)
    words, ask = list(range(4)), 8
    position, r1, r2, answer, junk = (
        [9, 10, 11, 12],
        list(range(13, 17)),
        list(range(17, 21)),
        list(range(21, 25)),
        list(range(25, 32)),
    )
    w.state["embed.weight"][:, :9] = torch.eye(9)
    w.state["pos_embed.weight"][:, position] = torch.eye(4)
    for layer, (source, target) in enumerate(((words, r1), (r1, r2), (r2, answer))):
        attend_position(w, layer, 0, position, position[layer])
        copy(w, layer, 0, source, target)
        attend_position(w, layer, 1, position, position[0])
    w.state["unembed.weight"][:4, answer[0] : answer[-1] + 1] = LOUD * torch.eye(4)
    w.head(0, 1, "v")[0, words] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    w.head(0, 1, "o")[junk[0], 0] = LOUD
    w.head(1, 1, "v")[0, junk[0]] = 1.0
    w.head(1, 1, "o")[junk[1], 0] = LOUD
    w.head(2, 1, "v")[0, junk[1]] = 1.0
    w.head(2, 1, "o")[junk[2], 0] = LOUD
    generator = torch.Generator().manual_seed(seed)
    first = torch.randint(0, 4, (n,), generator=generator)
    other = (first + torch.randint(1, 4, (n,), generator=generator)) % 4
    fillers = torch.randint(4, 8, (n, 2), generator=generator)
    ask_column = torch.full((n, 1), ask)

    def sequence(word):
        return torch.cat([word[:, None], fillers, ask_column, word[:, None]], 1)

    edges = {
        Edge(Embed(), Input(Head(0, 0), "v")),
        Edge(Head(0, 0), Input(Head(1, 0), "v")),
        Edge(Head(1, 0), Input(Head(2, 0), "v")),
        Edge(Head(2, 0), Input(Logits())),
    }
    return Planted(
        "three-hop",
        story_of(three_hop),
        spec,
        w.load(),
        pairs_batch(sequence(first), sequence(other), 3, first, other),
        frozenset(edges),
    )


# A neuron of the two-branch models as a sum of ramps c * relu(x - t) over x = bit1 + bit2 (0, 1 or
# 2), each ramp made of one GELU neuron scaled so GELU's curve sits within e^-RAMP of relu's.
RAMP = 30.0
NEURONS = {
    # either bit alone gives the full output: relu(x) - relu(x - 1) is 0, 1, 1
    Structure.ALTERNATIVES: ((1.0, 0.0), (-1.0, 1.0)),
    # one bit gives 70%: 0.7 relu(x) - 0.4 relu(x - 1) is 0, 0.7, 1
    Structure.SHARED: ((0.7, 0.0), (-0.4, 1.0)),
}
# flat where both bits are on (its gradient 0 there): (relu(x) - relu(x - 1.5)) / 1.5 is 0, 0.67, 1
SATURATED = ((1 / 1.5, 0.0), (-1 / 1.5, 1.5))


def two_branches(name: str, story: str, structure: Structure, ramps, n: int, seed: int, branches: int = 2) -> Planted:
    """`w ?` -> T if w is a positive word (0 or 1), else F. L0H0 and L0H1 (and L0H2, ... up to
    `branches` heads) at `?` each copy "w is positive" (1 or 0) into their own dim; an MLP neuron
    reads the sum x of those dims and writes `ramps`(x) - 1/2 to the dim the logits read. Every clean
    word is positive and its counterfactual negative (a pair flips positive to negative; the model
    answers every word right). Two distractor heads after the branches copy the word's identity,
    loud, into junk a further neuron reads and writes back to junk."""
    heads = branches + 2
    spec = ModelSpec(
        n_layers=1, d_model=8 * heads, n_heads=heads, mlp=True, norm=None, scale_scores=False, n_ctx=2, d_vocab=7
    )
    w = Weights(spec)
    ask, true, false = 4, 5, 6
    position, bits, out = [7, 8], list(range(9, 9 + branches)), 9 + branches
    junk = list(range(out + 1, out + 5))
    w.state["embed.weight"][:, :7] = torch.eye(7)
    w.state["pos_embed.weight"][:, position] = torch.eye(2)
    for head in range(heads):
        attend_position(w, 0, head, position, position[0])
    for head in range(branches):
        w.head(0, head, "v")[0, [0, 1]] = 1.0
        w.head(0, head, "o")[bits[head], 0] = 1.0
    for head in (branches, branches + 1):
        w.head(0, head, "v")[0, :4] = torch.tensor([1.0, 2.0, 3.0, 4.0])
        w.head(0, head, "o")[junk[head - branches], 0] = LOUD
    mlp_in, mlp_out, bias = (w.state[f"blocks.0.mlp.{part}"] for part in ("in.weight", "out.weight", "in.bias"))
    for neuron, (scale, threshold) in enumerate(ramps):
        mlp_in[neuron, bits] = RAMP
        bias[neuron] = -RAMP * threshold
        mlp_out[out, neuron] = scale / RAMP
    w.state["blocks.0.mlp.out.bias"][out] = -0.5
    distractor = len(ramps)
    mlp_in[distractor, junk[:2]] = 1.0
    mlp_out[junk[2:], distractor] = LOUD
    w.state["unembed.weight"][true, out], w.state["unembed.weight"][false, out] = 8.0, -8.0
    generator = torch.Generator().manual_seed(seed)
    positive = torch.randint(0, 2, (n,), generator=generator)
    negative = torch.randint(2, 4, (n,), generator=generator)
    tokens = torch.stack([positive, torch.full((n,), ask), torch.full((n,), true)], 1)
    counterfactual = torch.stack([negative, torch.full((n,), ask), torch.full((n,), false)], 1)
    branch_heads = tuple(Head(0, head) for head in range(branches))
    edges = {Edge(MLP(0), Input(Logits()))}
    edges |= {edge for head in branch_heads for edge in (Edge(Embed(), Input(head, "v")), Edge(head, Input(MLP(0))))}
    return Planted(
        name,
        story,
        spec,
        w.load(),
        pairs_batch(tokens, counterfactual, 1, torch.full((n,), true), torch.full((n,), false)),
        frozenset(edges),
        structure,
        branch_heads,
    )


def backup_pair(n: int = 64, seed: int = 0) -> Planted:
    return two_branches(
        "backup-pair",
        "Two heads each carry the answer alone (an OR): either suffices",
        Structure.ALTERNATIVES,
        NEURONS[Structure.ALTERNATIVES],
        n,
        seed,
    )


def partial_pair(n: int = 64, seed: int = 0) -> Planted:
    return two_branches(
        "partial-pair",
        "Two heads each keep 70% of the answer alone; both are needed for 90%",
        Structure.SHARED,
        NEURONS[Structure.SHARED],
        n,
        seed,
    )


def saturated_mlp(n: int = 64, seed: int = 0) -> Planted:
    return two_branches(
        "saturated-mlp",
        "An MLP flat at the clean input: each of its two inputs moves 33% of the gap while its gradient there is 0",
        Structure.SHARED,
        SATURATED,
        n,
        seed,
    )


def three_backups(n: int = 64, seed: int = 0) -> Planted:
    return two_branches(
        "three-backups",
        "Three heads each carry the answer alone (an OR of three): any one suffices",
        Structure.ALTERNATIVES,
        NEURONS[Structure.ALTERNATIVES],
        n,
        seed,
        branches=3,
    )


def and_pair(n: int = 64, seed: int = 0) -> Planted:
    # relu(x - 1) is 0, 0, 1: one bit alone gives nothing
    return two_branches(
        "and-pair",
        "Two heads both needed (an AND): either knocked out loses the answer",
        Structure.SERIES,
        ((1.0, 1.0),),
        n,
        seed,
    )


def backup_chain(n: int = 64, seed: int = 0) -> Planted:
    """`w f ?` -> T if w is a positive word (0 or 1), else F, along a chain whose middle step has a
    backup. L0H0 copies "w is positive" from position 0 into r at every position; L1H0 and L1H1 at
    `?` each attend position 1 (which holds w only through L0H0) and copy r into their own dim; an
    MLP1 neuron, min(x, 1) of their sum, writes to the dim the logits read, so either layer-1 head
    suffices. Distractors: L0H2 copies w's identity, loud, into junk; L1H2 at `?` copies that junk
    from position 1 into more junk, which an MLP1 neuron reads and writes back to junk."""
    spec = ModelSpec(n_layers=2, d_model=48, n_heads=3, mlp=True, norm=None, scale_scores=False, n_ctx=3, d_vocab=8)
    w = Weights(spec)
    filler, ask, true, false = 4, 5, 6, 7
    position, r, bits, out, junk = [8, 9, 10], 11, [12, 13], 14, list(range(15, 19))
    w.state["embed.weight"][:, :8] = torch.eye(8)
    w.state["pos_embed.weight"][:, position] = torch.eye(3)
    for head in (0, 2):
        attend_position(w, 0, head, position, position[0])
    w.head(0, 0, "v")[0, [0, 1]] = 1.0
    w.head(0, 0, "o")[r, 0] = 1.0
    w.head(0, 2, "v")[0, :4] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    w.head(0, 2, "o")[junk[0], 0] = LOUD
    for head in range(3):
        attend_position(w, 1, head, position, position[1])
    for head in (0, 1):
        w.head(1, head, "v")[0, r] = 1.0
        w.head(1, head, "o")[bits[head], 0] = 1.0
    w.head(1, 2, "v")[0, junk[0]] = 1.0
    w.head(1, 2, "o")[junk[1], 0] = LOUD
    mlp_in, mlp_out, bias = (w.state[f"blocks.1.mlp.{part}"] for part in ("in.weight", "out.weight", "in.bias"))
    for neuron, (scale, threshold) in enumerate(NEURONS[Structure.ALTERNATIVES]):
        mlp_in[neuron, bits] = RAMP
        bias[neuron] = -RAMP * threshold
        mlp_out[out, neuron] = scale / RAMP
    w.state["blocks.1.mlp.out.bias"][out] = -0.5
    mlp_in[2, junk[1]] = 1.0
    mlp_out[junk[2:], 2] = LOUD
    w.state["unembed.weight"][true, out], w.state["unembed.weight"][false, out] = 8.0, -8.0
    generator = torch.Generator().manual_seed(seed)
    positive = torch.randint(0, 2, (n,), generator=generator)
    negative = torch.randint(2, 4, (n,), generator=generator)

    def sequence(word, answer):
        return torch.stack([word, torch.full((n,), filler), torch.full((n,), ask), torch.full((n,), answer)], 1)

    edges = {
        Edge(Embed(), Input(Head(0, 0), "v")),
        Edge(Head(0, 0), Input(Head(1, 0), "v")),
        Edge(Head(0, 0), Input(Head(1, 1), "v")),
        Edge(Head(1, 0), Input(MLP(1))),
        Edge(Head(1, 1), Input(MLP(1))),
        Edge(MLP(1), Input(Logits())),
    }
    return Planted(
        "backup-chain",
        story_of(backup_chain),
        spec,
        w.load(),
        pairs_batch(
            sequence(positive, true), sequence(negative, false), 2, torch.full((n,), true), torch.full((n,), false)
        ),
        frozenset(edges),
        Structure.ALTERNATIVES,
        (Head(1, 0), Head(1, 1)),
    )


def planted_models(n: int = 64, seed: int = 0) -> list[Planted]:
    return [
        two_hop(n, seed),
        induction(n, seed),
        mlp_xor(n, seed),
        three_hop(n, seed),
        backup_pair(n, seed),
        partial_pair(n, seed),
        saturated_mlp(n, seed),
    ]
