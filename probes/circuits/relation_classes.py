"""What a circuit's members are to each other, classed by rules read off the definitions, from f on
subsets of them (probes.circuits.subsets; terms as in probes.circuits.interactions: for a pair,
together T, alone(i), interaction I = T - alone(a) - alone(b), everything else kept).

A pair counts when T >= NEEDED and each member moves something (what it adds alone, or what knocking
it out costs, T - alone(other), reaches NEEDED). Then, with r = I / T:
- ADDITIVE: |r| <= ADDITIVE, the two not linked: their gains add up;
- AND (synergy): r > ADDITIVE, the two not linked: together more than the sum;
- SERIES: r > ADDITIVE along a circuit link a -> b: b's effect needs a (what b adds with a knocked
  out is below ADDITIVE x T) and only then;
- OR: r < -ADDITIVE and each alone adds at least EXACT_OR of what both add (an exact OR);
- OVERLAP (a partial OR): r < -ADDITIVE, not exact.
A group: three or more members joined by OR / OVERLAP pairs, G = what they add together:
- OR: each alone adds at least EXACT_OR x G;
- SHARED work: no member alone adds EXACT_OR x G, knocking out each costs at most SHARED_LOSS x G,
  and G >= SHARED_GROUP;
- OVERLAP otherwise.
A higher AND (every subset measured): three or more members G, none linked to another, with the
other members kept, G's together >= NEEDED, together above the sum of what each adds alone (the
rest of G knocked out) by more than ADDITIVE x together (synergy, as for a pair), and the Harsanyi
term of G (sum over T in G of (-1)^(|G| - |T|) f(M - G + T): what only all of G together add,
beyond every smaller subset) above ADDITIVE x together, so no pair or smaller group explains the
synergy (an OR of three has a positive term too, but its members alone add more than together).
The largest such group is named and its pairs are not (an AND of three read as three pairwise ANDs).
NECESSARY: knocking the member out alone leaves less than 1 - SUFFICES of the gap.
CASE_SPLIT: probes.circuits.rows.

Uncertainty: every rule is applied to the pairs as drawn, to each bootstrap resample, and to each
pair alone (its own scale). A word is stated when it holds on at least CLEARS of the resamples (a
two-sided 95% percentile interval of every quantity in the rule clears the rule's line); else the
relation is BORDERLINE between that word and the one most resamples give instead. `rows` counts the
pairs on which the rule gives the same word.
"""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass
from enum import StrEnum

import torch

from models.graph import Edge
from probes.circuits.interactions import Interval, interval
from probes.circuits.components import Component, member_links
from probes.circuits.rows import CaseSplit, case_split
from probes.circuits.subsets import Subsets

NEEDED = 0.1
ADDITIVE = 0.2
EXACT_OR = 0.9
SUFFICES = 0.9
SHARED_LOSS = 0.25
SHARED_GROUP = 0.5
CLEARS = 0.975


class Kind(StrEnum):
    ADDITIVE = "additive"
    AND = "and"
    SERIES = "series"
    OR = "or"
    OVERLAP = "partial overlap"
    SHARED = "shared"
    NECESSARY = "necessary"
    CASE_SPLIT = "case split"
    BORDERLINE = "borderline"


CODES = (None, Kind.ADDITIVE, Kind.AND, Kind.SERIES, Kind.OR, Kind.OVERLAP, Kind.SHARED, Kind.NECESSARY)


@dataclass(frozen=True)
class Relation:
    kind: Kind
    members: tuple[Component, ...]  # SERIES: upstream first; else by contribution, largest first
    together: Interval  # what the members add together (the rest kept); NECESSARY: f without it
    alone: tuple[Interval, ...]  # what each adds with the relation's other members knocked out
    losses: tuple[Interval, ...]  # what knocking each out alone costs (everything else kept)
    interaction: Interval | None  # pairs: together - the sum of alone
    rows: int  # pairs on which the rule gives this word (BORDERLINE: the point word)
    moved: int  # pairs the members move
    pairs: int
    between: tuple[Kind, Kind | None] | None = None  # BORDERLINE: the point word, the resamples' other one
    split: CaseSplit | None = None


def code(kind) -> int:
    return CODES.index(kind)


def pair_codes(together, alone_a, alone_b, linked: bool) -> torch.Tensor:
    """The pair rule, elementwise over resamples or pairs; `linked`: a chain of circuit links runs
    from a to b."""
    ratio = (together - alone_a - alone_b) / together
    exact = torch.minimum(alone_a, alone_b) / together
    matters = (
        (together >= NEEDED)
        & (torch.maximum(alone_a, together - alone_b) >= NEEDED)
        & (torch.maximum(alone_b, together - alone_a) >= NEEDED)
    )
    vanishes = alone_b < ADDITIVE * together  # b's effect with a knocked out
    synergy = torch.where(vanishes, code(Kind.SERIES), code(Kind.AND)) if linked else code(Kind.AND)
    redundant = torch.where(exact >= EXACT_OR, code(Kind.OR), code(Kind.OVERLAP))
    # a's effect on b's reading runs through b: their gains adding up says nothing of a link
    adds = code(None) if linked else code(Kind.ADDITIVE)
    kinds = torch.where(ratio > ADDITIVE, synergy, torch.where(ratio < -ADDITIVE, redundant, adds))
    return torch.where(matters & ~ratio.isnan(), kinds, code(None))


def group_codes(together, alone: torch.Tensor, losses: torch.Tensor) -> torch.Tensor:
    """The group rule: `alone`, `losses` [members, ...]."""
    shared = (alone.max(0).values < EXACT_OR * together) & (losses.max(0).values <= SHARED_LOSS * together)
    shared &= together >= SHARED_GROUP
    kinds = torch.where(
        alone.min(0).values >= EXACT_OR * together,
        code(Kind.OR),
        torch.where(shared, code(Kind.SHARED), code(Kind.OVERLAP)),
    )
    return torch.where(together >= NEEDED, kinds, code(None))


def decided(resampled: torch.Tensor, by_row: torch.Tensor) -> tuple[Kind | None, tuple | None, int]:
    """(word, BORDERLINE's (point, other) or None, pairs with the word) from the rule's codes."""
    point = CODES[int(resampled[0])]
    rest = Counter(int(c) for c in resampled[1:])
    agree = rest[int(resampled[0])] / max(sum(rest.values()), 1)
    rows = int((by_row == int(resampled[0])).sum())
    if point is None or agree >= CLEARS:
        return point, None, rows
    other = max((c for c in rest if c != int(resampled[0])), key=lambda c: rest[c], default=None)
    return Kind.BORDERLINE, (point, None if other is None else CODES[other]), rows


class Terms:
    """f and each pair's own share of the sets a relation reads, as [BOOTSTRAP + 1] and [pairs]."""

    def __init__(self, subsets: Subsets):
        self.subsets = subsets

    def both(self, kept) -> tuple[torch.Tensor, torch.Tensor]:
        return self.subsets.f(kept), self.subsets.row_share(kept).double()


def pair_relation(terms: Terms, a, b, linked: bool, moved: int) -> Relation | None:
    s = terms.subsets
    (full, full_r), (none, none_r) = terms.both(s.all), terms.both(s.without(a, b))
    (only_a, only_a_r), (only_b, only_b_r) = terms.both(s.without(b)), terms.both(s.without(a))
    together, alone = full - none, (only_a - none, only_b - none)
    word, between, rows = decided(
        pair_codes(together, *alone, linked),
        pair_codes(full_r - none_r, only_a_r - none_r, only_b_r - none_r, linked),
    )
    if word is None:
        return None
    losses = (full - only_b, full - only_a)
    order = [0, 1] if alone[0][0] + losses[0][0] >= alone[1][0] + losses[1][0] else [1, 0]
    if word is Kind.SERIES or (between and between[0] is Kind.SERIES):
        order = [0, 1]  # upstream first: the caller passes the link's sender as `a`
    pick = lambda pair: tuple(interval(pair[i]) for i in order)  # noqa: E731
    return Relation(
        word,
        tuple((a, b)[i] for i in order),
        interval(together),
        pick(alone),
        pick(losses),
        interval(together - alone[0] - alone[1]),
        rows,
        moved,
        s.pairs,
        between,
    )


def group_relation(terms: Terms, group: tuple, moved: int) -> Relation | None:
    s = terms.subsets
    (full, full_r), (none, none_r) = terms.both(s.all), terms.both(s.all - frozenset(group))
    only = [terms.both(s.all - (frozenset(group) - {c})) for c in group]
    without = [terms.both(s.without(c)) for c in group]
    word, between, rows = decided(
        group_codes(full - none, torch.stack([o - none for o, _ in only]), torch.stack([full - w for w, _ in without])),
        group_codes(
            full_r - none_r,
            torch.stack([o - none_r for _, o in only]),
            torch.stack([full_r - w for _, w in without]),
        ),
    )
    if word is None:
        return None
    order = sorted(range(len(group)), key=lambda i: (-float(only[i][0][0]), str(group[i])))
    return Relation(
        word,
        tuple(group[i] for i in order),
        interval(full - none),
        tuple(interval(only[i][0] - none) for i in order),
        tuple(interval(full - without[i][0]) for i in order),
        None,
        rows,
        moved,
        s.pairs,
        between,
    )


def necessary(terms: Terms, c, moved: int) -> Relation | None:
    s = terms.subsets
    (full, _), (without, without_r) = terms.both(s.all), terms.both(s.without(c))
    is_needed = lambda v: torch.where(v < 1 - SUFFICES, code(Kind.NECESSARY), code(None))  # noqa: E731
    word, between, rows = decided(is_needed(without), is_needed(without_r))
    if word is None:
        return None
    return Relation(word, (c,), interval(without), (), (interval(full - without),), None, rows, moved, s.pairs, between)


def group_interaction(f, rest: frozenset, group: tuple) -> torch.Tensor:
    """What only all of `group` together add, the members in `rest` kept (its Harsanyi term)."""
    return sum(
        (-1) ** (len(group) - k) * f(rest | frozenset(t))
        for k in range(len(group) + 1)
        for t in itertools.combinations(group, k)
    )


def and_codes(together, alone: torch.Tensor, interaction) -> torch.Tensor:
    """The higher AND rule: `alone` [members, ...] what each adds with the rest of the group knocked out."""
    synergy = (together - alone.sum(0) > ADDITIVE * together) & (interaction > ADDITIVE * together)
    return torch.where((together >= NEEDED) & synergy, code(Kind.AND), code(None))


def higher_and(terms: Terms, group: tuple, moved: int) -> Relation | None:
    s = terms.subsets
    rest = s.all - frozenset(group)
    (full, full_r), (none, none_r) = terms.both(s.all), terms.both(rest)
    interaction = group_interaction(lambda kept: terms.both(kept)[0], rest, group)
    by_row = group_interaction(lambda kept: terms.both(kept)[1], rest, group)
    only = [s.f(rest | {c}) - none for c in group]
    only_r = torch.stack([s.row_share(rest | {c}).double() - none_r for c in group])
    word, between, rows = decided(
        and_codes(full - none, torch.stack(only), interaction), and_codes(full_r - none_r, only_r, by_row)
    )
    if word is None:
        return None
    order = sorted(range(len(group)), key=lambda i: (-float(only[i][0]), str(group[i])))
    return Relation(
        word,
        tuple(group[i] for i in order),
        interval(full - none),
        tuple(interval(only[i]) for i in order),
        tuple(interval(full - s.f(s.without(group[i]))) for i in order),
        interval(interaction),
        rows,
        moved,
        s.pairs,
        between,
    )


def higher_ands(terms: Terms, reach: dict, moved: int) -> list[Relation]:
    """The largest groups of three or more unlinked members read as an AND (every subset measured)."""
    s, found = terms.subsets, []
    if not s.exhaustive:
        return []
    for k in range(len(s.members), 2, -1):
        for group in itertools.combinations(s.members, k):
            if any(b in reach[a] for a in group for b in group) or any(set(group) <= set(r.members) for r in found):
                continue
            relation = higher_and(terms, group, moved)
            if relation is not None and relation.kind is Kind.AND:
                found.append(relation)
    return found


def quiet_group(terms: Terms) -> tuple:
    """Members each of whose loss is below SHARED_LOSS of the gap but that add at least NEEDED alone
    among them (the others of the group knocked out): redundancy among three or more that no pair
    shows when the third is kept (an OR of three)."""
    s = terms.subsets
    full = float(s.f(s.all)[0])
    group = [c for c in s.members if full - float(s.f(s.without(c))[0]) < SHARED_LOSS]
    for _ in range(2):
        none = float(s.f(s.all - frozenset(group))[0])
        group = [c for c in group if float(s.f(s.all - (frozenset(group) - {c}))[0]) - none >= NEEDED]
    return tuple(sorted(group, key=str)) if len(group) >= 3 else ()


def groups_of(pairs: dict) -> list[tuple]:
    """Connected groups of three or more members joined by redundant (OR / OVERLAP) pairs."""
    redundant = {
        k
        for k, r in pairs.items()
        if r.kind in (Kind.OR, Kind.OVERLAP) or (r.between and r.between[0] in (Kind.OR, Kind.OVERLAP))
    }
    found: list[set] = []
    for a, b in redundant:
        joined = [g for g in found if a in g or b in g]
        merged = set().union({a, b}, *joined)
        found = [g for g in found if g not in joined] + [merged]
    return [tuple(sorted(g, key=str)) for g in found if len(g) >= 3]


def relations(subsets: Subsets, links: frozenset[Edge]) -> tuple[Relation, ...]:
    """Every relation among the members: case split, groups, pairs (those in neither), necessary."""
    terms, moved = Terms(subsets), int(subsets.moved().sum())
    reach = reachable(member_links(subsets.all, links))
    pairs = {}
    for a, b in itertools.combinations(subsets.members, 2):
        a, b = (b, a) if a in reach[b] else (a, b)  # upstream first
        found = pair_relation(terms, a, b, b in reach[a], moved)
        if found is not None:
            pairs[frozenset((a, b))] = found
    split = case_split(subsets)
    out: list[Relation] = []
    if split is not None:
        out.append(
            Relation(
                Kind.CASE_SPLIT,
                split.members,
                subsets_interval(subsets, split.members),
                (),
                (),
                None,
                sum(split.decides) - split.both,
                split.moved,
                split.pairs,
                None,
                split,
            )
        )
    grouped = groups_of(pairs)
    quiet = quiet_group(terms)
    grouped = [g for g in grouped if not set(g) < set(quiet)] + ([quiet] if quiet and quiet not in grouped else [])
    grouped = [g for g in grouped if split is None or not set(g) <= set(split.members)]
    out += [r for g in grouped if (r := group_relation(terms, g, moved)) is not None]
    ands = higher_ands(terms, reach, moved)
    out += ands
    covered = [set(g) for g in grouped] + [set(r.members) for r in ands] + ([set(split.members)] if split else [])
    out += [r for k, r in pairs.items() if not any(k <= g for g in covered)]
    out += [r for c in subsets.members if (r := necessary(terms, c, moved)) is not None]
    return tuple(out)


def subsets_interval(subsets: Subsets, members) -> Interval:
    return interval(subsets.f(subsets.all) - subsets.f(subsets.all - frozenset(members)))


def reachable(to: dict) -> dict:
    """Member -> every member a chain of links reaches from it."""
    out = {}
    for start in to:
        seen, todo = set(), list(to[start])
        while todo:
            node = todo.pop()
            if node not in seen:
                seen.add(node)
                todo += to[node]
        out[start] = seen
    return out
