"""Row by row: which pairs need which member, and the case split an average over pairs cannot see
(each pair needs exactly one of several members, each member alone restores its own pairs).

On each pair's own scale (subsets.Subsets.row_share: 0 = every member knocked out, 1 = the clean
run), a pair NEEDS a member when knocking that member out alone, everything else kept, leaves less
than NEEDS of the pair's gap. A case split over members D (two or more):
- each member of D is needed on at least SPLIT_MIN of the pairs the members move, and on at most
  1 - SPLIT_MIN of them (a member every pair needs is necessary, not a case);
- the pairs each member is needed for are disjoint: at most SPLIT_OVERLAP of the smaller set needs
  both of two members;
- each member alone restores its own pairs: with the other members of D knocked out (the rest
  kept), at least SPLIT_ALONE of the pairs it is needed for keep at least NEEDS of their gap.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from probes.circuits.components import Component
from probes.circuits.subsets import Subsets

NEEDS = 0.5
SPLIT_MIN = 0.05
SPLIT_OVERLAP = 0.1
SPLIT_ALONE = 0.9


@dataclass(frozen=True)
class CaseSplit:
    members: tuple[Component, ...]  # most pairs decided first
    decides: tuple[int, ...]  # pairs that need each member
    restores: tuple[int, ...]  # of those, pairs it alone restores (the other members knocked out)
    both: int  # pairs that need two or more of the members
    moved: int  # pairs the members move at all
    pairs: int


def needed_on(subsets: Subsets) -> dict[Component, torch.Tensor]:
    """Member -> [pairs] True where the pair needs it (NaN shares, flat pairs, never do)."""
    return {c: subsets.row_share(subsets.without(c)) < NEEDS for c in subsets.members}


def case_split(subsets: Subsets) -> CaseSplit | None:
    moved = int(subsets.moved().sum())
    needs = needed_on(subsets)
    deciders = [c for c in subsets.members if SPLIT_MIN * moved <= int(needs[c].sum()) <= (1 - SPLIT_MIN) * moved]
    deciders = [c for c in deciders if int(needs[c].sum()) >= 2]
    if len(deciders) < 2:
        return None
    for a, b in itertools.combinations(deciders, 2):
        if int((needs[a] & needs[b]).sum()) > SPLIT_OVERLAP * min(int(needs[a].sum()), int(needs[b].sum())):
            return None
    restores = []
    for c in deciders:
        alone = subsets.row_share(subsets.all - (frozenset(deciders) - {c})) >= NEEDS
        restores.append(int((alone & needs[c]).sum()))
        if restores[-1] < SPLIT_ALONE * int(needs[c].sum()):
            return None
    order = sorted(range(len(deciders)), key=lambda i: (-int(needs[deciders[i]].sum()), str(deciders[i])))
    count = torch.stack([needs[c] for c in deciders]).sum(0)
    return CaseSplit(
        tuple(deciders[i] for i in order),
        tuple(int(needs[deciders[i]].sum()) for i in order),
        tuple(restores[i] for i in order),
        int((count >= 2).sum()),
        moved,
        subsets.pairs,
    )
