"""Induction: `BOS a1 a2 ... aR a1 a2 ... aR`, R random tokens and then the same R tokens again.

The repeat length R is drawn per sequence: with a fixed R the repeat sits a fixed distance back and
layer-0 heads solve it positionally (measured), so no induction head forms. Each sequence's tokens
are distinct, so "the token after the earlier copy of this one" always names one answer.

Scored positions are the repeat from its first token on: the logits at the first repeated token a1
predict a2, ..., the logits at a(R-1) predict aR. The first repeated token itself is not an answer
(nothing says where the repeat starts), so it is never scored. The counterfactual partner keeps the
repeat and shuffles the first half, so the same query tokens find different successors: the
induction answer changes at every scored position while the bag of tokens stays the same.
Held-out sequences are drawn from the same pool as training and never occur in it.

Roles name the pattern [A][B] ... [A] -> [B] at the first scored position: `first_A` the first
copy of a1, `B` its successor a2, `second_A` the repeated a1 (a scored position, whose logits
predict a2). probes.circuits.roles measures the other roles from the rows at `second_A`.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from models import ModelSpec, UsageError
from models.spec import Attention, Positions
from tasks.base import Domain, Example, Task

BOS = "<bos>"
# Bounds that keep generation to seconds and the data to megabytes; far beyond what the study uses.
MAX_REPEAT = 256
MAX_TRAIN = 1_000_000
MAX_EVAL = 100_000


@dataclass(frozen=True)
class InductionParams:
    tokens: int = 64  # random tokens (the vocabulary is these plus BOS)
    min_repeat: int = 20
    max_repeat: int = 30
    train: int = 20_000  # sequences; large, so memorising them is harder than induction
    validation: int = 128  # ~3,200 scored positions; evaluated every 25 steps, so kept small
    heldout: int = 512


class InductionTask(Task):
    """Induction: predict the rest of a repeated random sequence ([A][B] ... [A] -> [B])."""

    name = "induction"
    Params = InductionParams
    version = 2  # the examples name their roles (tasks.data's cache fingerprint)

    def __init__(self, params=None):
        super().__init__(params)
        p = self.params
        if not isinstance(p.tokens, int) or not 4 <= p.tokens <= 100_000:
            raise UsageError(f"tokens must be an integer between 4 and 100000, got {p.tokens}")
        if not 2 <= p.min_repeat <= p.max_repeat <= min(p.tokens, MAX_REPEAT):
            raise UsageError(
                f"need 2 <= min_repeat <= max_repeat <= tokens and max_repeat <= {MAX_REPEAT} "
                f"(a sequence is 2 * max_repeat + 1 tokens), got min_repeat={p.min_repeat}, "
                f"max_repeat={p.max_repeat}, tokens={p.tokens}"
            )
        for split, limit in (("train", MAX_TRAIN), ("validation", MAX_EVAL), ("heldout", MAX_EVAL)):
            if not isinstance(getattr(p, split), int) or not 0 < getattr(p, split) <= limit:
                raise UsageError(f"{split} must be a number of sequences from 1 to {limit}, got {getattr(p, split)}")
        need = 2 * (p.train + p.validation + p.heldout)
        possible = 0
        for r in range(p.min_repeat, p.max_repeat + 1):  # stop once enough: the counts grow fast
            possible += math.perm(p.tokens, r)
            if possible >= need:
                break
        if possible < need:
            raise UsageError(
                f"only {possible} distinct sequences exist with these tokens and repeat "
                "lengths, too few for disjoint splits; raise tokens or max_repeat"
            )

    def vocabulary(self) -> list[str]:
        return [BOS] + [f"t{i}" for i in range(self.params.tokens)]

    def generate(self, seed: int) -> dict[str, list[Example]]:
        p = self.params
        rng = random.Random(seed)
        sizes = {"train": p.train, "validation": p.validation, "heldout": p.heldout}
        # One pool, drawn without duplicates, then cut into splits: no sequence is in two splits.
        seen: set[tuple[int, ...]] = set()
        pool: list[tuple[int, ...]] = []
        while len(pool) < sum(sizes.values()):
            first = tuple(rng.sample(range(1, p.tokens + 1), rng.randint(p.min_repeat, p.max_repeat)))
            if first not in seen:
                seen.add(first)
                pool.append(first)
        splits, start = {}, 0
        for split, size in sizes.items():
            splits[split] = [self.example(first, rng) for first in pool[start : start + size]]
            start += size
        return splits

    def example(self, first: tuple[int, ...], rng: random.Random) -> Example:
        repeat = len(first)
        tokens = (0,) + first + first
        return Example(
            tokens=tokens,
            positions=tuple(range(repeat + 1, 2 * repeat)),
            group=f"repeat{repeat}",
            counterfactual=(0,) + shuffled_successors(first, rng) + first,
            roles={"first_A": 1, "B": 2, "second_A": repeat + 1},
        )

    def domain(self) -> Domain:
        """Every sequence of distinct tokens at every repeat length, indexed repeat length first
        (far too many to enumerate at the defaults: a certificate samples it and says so); the i-th
        sequence's counterfactual partner is drawn with seed i."""
        p = self.params
        counts = [math.perm(p.tokens, r) for r in range(p.min_repeat, p.max_repeat + 1)]

        def example(i: int) -> Example:
            repeat = p.min_repeat
            for count in counts:
                if i < count:
                    break
                i, repeat = i - count, repeat + 1
            return self.example(nth_arrangement(i, p.tokens, repeat), random.Random(i))

        return Domain(
            sum(counts),
            example,
            f"every sequence of {p.min_repeat}-{p.max_repeat} distinct tokens of {p.tokens}, repeated",
        )

    def default_models(self) -> dict[str, ModelSpec]:
        return {
            # The bag of words is the 1-layer model with uniform attention and no positions: the
            # same architecture minus the ability to choose what to read.
            "bag-of-words": ModelSpec(
                n_layers=1, n_heads=4, mlp=False, attention=Attention.UNIFORM, positions=Positions.NONE
            ),
            "attn-only-1x4": ModelSpec(n_layers=1, n_heads=4, mlp=False),
            "attn-only-2x4": ModelSpec(n_layers=2, n_heads=4, mlp=False),
        }

    def default_training(self) -> dict:
        # Measured (3 seeds): the loss sits at ln(64) for ~150-350 steps before any model learns, so
        # "stalled" waits 400 steps; the 2-layer model is solved by step 375-750, the 1-layer model
        # reaches its ceiling (~17%) by ~500, the bag of words never leaves ln(64).
        return {
            "max_steps": 800,
            "batch_size": 64,
            "lr": 1e-3,
            "eval_every": 25,
            "snapshot_every": 50,
            "plateau_steps": 400,
        }


def nth_arrangement(index: int, tokens: int, length: int) -> tuple[int, ...]:
    """The index-th ordered choice of `length` distinct tokens from 1..tokens (mixed radix: the
    k-th digit picks among the tokens not yet chosen)."""
    left, out = list(range(1, tokens + 1)), []
    for k in range(length):
        index, digit = divmod(index, tokens - k)
        out.append(left.pop(digit))
    return tuple(out)


def shuffled_successors(first: tuple[int, ...], rng: random.Random) -> tuple[int, ...]:
    """A permutation of `first` in which no token keeps its successor, so every induction answer
    changes. Rejection sampling: a random permutation qualifies with probability ~1/e."""
    pairs = set(zip(first, first[1:]))
    while True:
        shuffled = tuple(rng.sample(first, len(first)))
        if not pairs & set(zip(shuffled, shuffled[1:])):
            return shuffled
