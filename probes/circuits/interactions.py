"""What each member of a circuit contributes and how members interact, from f on subsets of them
(probes.circuits.subsets: each member knocked out by its own output, the rest of the model kept),
every number with a bootstrap interval over the pairs.

For members i, j of the set M of all members (f on the gap scale: 0 = the counterfactual run,
1 = the clean run):
- loss(i) = f(M) - f(M - i): what knocking i out alone costs, everything else kept;
- shapley(i): i's Shapley share of f(M) - f(none); the shares add up to it (exact: every subset
  measured; None beyond subsets.EXACT_MEMBERS members);
- for a pair {i, j}, everything else kept: together = f(M) - f(M - i - j), what the two add;
  alone(i) = f(M - j) - f(M - i - j), what i adds with j knocked out; and the interaction
  together - alone(i) - alone(j) = f(M) - f(M - i) - f(M - j) + f(M - i - j): 0 when their gains add
  up, positive when together they do more than the sum (synergy), negative when they overlap;
- the Harsanyi (Mobius) term of every set S of two or more members,
  sum over T in S of (-1)^(|S| - |T|) f(T): what S adds beyond all its subsets (exact only).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

from probes.circuits.components import Component
from probes.circuits.subsets import Subsets

HIGHER_SHOWN = 0.1  # a Harsanyi term of three or more members is kept when |value| reaches this share
LEVEL = 0.95  # the intervals' coverage


@dataclass(frozen=True)
class Interval:
    value: float  # on the pairs as drawn
    low: float  # LEVEL bootstrap interval over the pairs (percentile)
    high: float

    def to_json(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high}


def interval(resampled: torch.Tensor) -> Interval:
    """From [BOOTSTRAP + 1] values: index 0 on the pairs as drawn, the rest on resamples."""
    rest = resampled[1:][~resampled[1:].isnan()]
    if not len(rest):
        return Interval(float(resampled[0]), math.nan, math.nan)
    tail = (1 - LEVEL) / 2
    low, high = torch.quantile(rest, torch.tensor([tail, 1 - tail], dtype=rest.dtype, device=rest.device)).tolist()
    return Interval(float(resampled[0]), low, high)


@dataclass(frozen=True)
class Member:
    component: Component
    loss: Interval
    shapley: Interval | None


@dataclass(frozen=True)
class PairTerms:
    members: tuple[Component, Component]
    together: Interval
    alone: tuple[Interval, Interval]
    interaction: Interval
    ratio: Interval  # interaction / together (NaN where together is 0)


@dataclass(frozen=True)
class Interactions:
    members: tuple[Member, ...]  # by contribution, largest first
    pairs: tuple[PairTerms, ...]
    higher: tuple[tuple[tuple[Component, ...], Interval], ...]  # Harsanyi terms of 3+ members, exact only
    total: Interval  # f(all) - f(none)
    none: Interval  # f with every member knocked out
    exhaustive: bool
    limit: int
    pairs_n: int

    def contribution(self, component) -> float:
        """Shapley share where every subset was measured, else the loss knocking it out alone costs."""
        m = next(m for m in self.members if m.component == component)
        return (m.shapley or m.loss).value


def shapley(subsets: Subsets) -> dict:
    """Each member's exact Shapley share, [BOOTSTRAP + 1] each."""
    n, out = len(subsets.members), {}
    for i in subsets.members:
        others = [c for c in subsets.members if c != i]
        total = torch.zeros_like(subsets.f(frozenset()))
        for k in range(n):
            weight = math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n)
            for rest in itertools.combinations(others, k):
                total += weight * (subsets.f(frozenset(rest) | {i}) - subsets.f(frozenset(rest)))
        out[i] = total
    return out


def harsanyi(subsets: Subsets, members: tuple[Component, ...]) -> torch.Tensor:
    return sum(
        (-1) ** (len(members) - k) * subsets.f(frozenset(t))
        for k in range(len(members) + 1)
        for t in itertools.combinations(members, k)
    )


def pair_terms(subsets: Subsets, a, b) -> PairTerms:
    full, none = subsets.f(subsets.all), subsets.f(subsets.without(a, b))
    together = full - none
    alone = (subsets.f(subsets.without(b)) - none, subsets.f(subsets.without(a)) - none)
    interaction = together - alone[0] - alone[1]
    return PairTerms(
        (a, b),
        interval(together),
        (interval(alone[0]), interval(alone[1])),
        interval(interaction),
        interval(interaction / together),
    )


def interactions(subsets: Subsets) -> Interactions:
    full, none = subsets.f(subsets.all), subsets.f(frozenset())
    shares = shapley(subsets) if subsets.exhaustive else {}
    members = [
        Member(c, interval(full - subsets.f(subsets.without(c))), interval(shares[c]) if c in shares else None)
        for c in subsets.members
    ]
    members.sort(key=lambda m: -(m.shapley or m.loss).value)
    higher = []
    if subsets.exhaustive:
        for k in range(3, len(subsets.members) + 1):
            for group in itertools.combinations(subsets.members, k):
                term = interval(harsanyi(subsets, group))
                if abs(term.value) >= HIGHER_SHOWN:
                    higher.append((group, term))
    return Interactions(
        tuple(members),
        tuple(pair_terms(subsets, a, b) for a, b in itertools.combinations(subsets.members, 2)),
        tuple(higher),
        interval(full - none),
        interval(none),
        subsets.exhaustive,
        subsets.limit,
        subsets.pairs,
    )
