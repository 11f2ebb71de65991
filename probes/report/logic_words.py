"""Sentences from probes.circuits.logic's findings: one per relation and one for the paths, each
with the numbers that make it true and the rule's thresholds (f on the gap scale: 0 = the
counterfactual run, 1 = the clean run)."""

from __future__ import annotations

from probes.circuits.interactions import Interval
from probes.circuits.logic import PATH_CARRIES, SUFFICES, Logic, Path
from probes.circuits.relation_classes import ADDITIVE, EXACT_OR, SHARED_LOSS, Kind, Relation
from probes.report.words import pct

SHOWN_RELATIONS = 6  # sentences per run; every relation is in report.json
SHOWN_MEMBERS = 4  # a group's members named in a cell
ORDER = (
    Kind.CASE_SPLIT,
    Kind.OR,
    Kind.SHARED,
    Kind.OVERLAP,
    Kind.ADDITIVE,
    Kind.AND,
    Kind.SERIES,
    Kind.NECESSARY,
    Kind.BORDERLINE,
)
TIE = 0.005  # contributions this close (of the gap) are a tie, said as "="


def names(components) -> str:
    names_ = [str(c) for c in components]
    return names_[0] if len(names_) == 1 else ", ".join(names_[:-1]) + " and " + names_[-1]


def path_text(path: Path) -> str:
    """'embed -> L0H2.v -> MLP0 -> L1H1.q -> logits' ('L0H0.k/v' where two readings are one path)."""
    first = str(path.edges[0].receiver)
    if path.readings:
        head = str(path.edges[0].receiver.node)
        first = head + "." + "/".join(sorted(e.receiver.port for e in path.readings))
    return " -> ".join(["embed", first, *(str(edge.receiver) for edge in path.edges[1:])])


def short_path(path: Path) -> str:
    """'L0H2>MLP0>L1H1.q' for a table cell: the components and the port each is read through."""
    return ">".join(path_text(path).split(" -> ")[1:-1])


def ci(i: Interval) -> str:
    return f"{pct(i.value)} [{pct(i.low)}, {pct(i.high)}]"


def held(r: Relation) -> str:
    return f"holds on {r.rows} of {r.moved} pairs the members move ({r.pairs} pairs)"


def pair_numbers(r: Relation) -> str:
    (a, b), (x, y) = r.members, r.alone
    return (
        f"{a} adds {ci(x)} with {b} knocked out, {b} {ci(y)} with {a} knocked out, together {ci(r.together)}; "
        f"interaction {ci(r.interaction) if r.interaction else '-'}"
    )


def group_numbers(r: Relation) -> str:
    alone = ", ".join(f"{c} {pct(a.value)}" for c, a in zip(r.members, r.alone))
    losses = ", ".join(pct(x.value) for x in r.losses)
    return (
        f"each alone (the others of the group knocked out) adds {alone}; knocking out each alone costs {losses}; "
        f"all of them {ci(r.together)}"
    )


def split_sentence(r: Relation) -> str:
    split = r.split
    assert split is not None
    parts = [f"{split.members[0]} decides {split.decides[0]} of {split.moved} pairs"]
    parts += [
        f"{c} {'the other' if i == len(split.members) - 1 else 'another'} {n}"
        for i, (c, n) in enumerate(zip(split.members[1:], split.decides[1:]), 1)
    ]
    both = "no pair needs two of them" if not split.both else f"{split.both} pairs need two of them"
    restores = ", ".join(f"{c} {k} of {n}" for c, k, n in zip(split.members, split.restores, split.decides))
    return (
        f"case split: {', '.join(parts)}; {both} (each alone, the others knocked out, restores its own pairs: "
        f"{restores}; a pair needs a member when knocking it out alone leaves less than half its gap)"
    )


def higher_and_sentence(r: Relation) -> str:
    alone = ", ".join(f"{c} {ci(a)}" for c, a in zip(r.members, r.alone))
    return (
        f"AND of {names(r.members)}: only all {len(r.members)} together add what they add (with the other members "
        f"kept, together {ci(r.together)}; what only all of them together add, beyond every smaller subset, "
        f"{ci(r.interaction) if r.interaction else '-'}; above {pct(ADDITIVE)} of together); each alone, the others "
        f"of the group knocked out, adds {alone}"
    )


def word_sentence(kind: Kind, r: Relation) -> str:
    if kind is Kind.ADDITIVE:
        return (
            f"additive: {names(r.members)} add up (|interaction| within {pct(ADDITIVE)} of together): {pair_numbers(r)}"
        )
    if kind is Kind.AND and len(r.members) > 2:
        return higher_and_sentence(r)
    if kind is Kind.AND:
        return f"AND (synergy): {names(r.members)} together add more than the sum of what each adds alone: {pair_numbers(r)}"
    if kind is Kind.SERIES:
        up, down = r.members
        return (
            f"in series {up} -> {down}: {down}'s effect needs {up} (it adds {ci(r.alone[1])} with {up} knocked out, "
            f"knocking it out costs {ci(r.losses[1])} with {up} kept); together {ci(r.together)}"
        )
    if kind is Kind.OR:
        body = pair_numbers(r) if len(r.members) == 2 else group_numbers(r)
        return (
            f"OR: {' | '.join(map(str, r.members))} are alternatives: each alone adds at least {pct(EXACT_OR)} of what "
            f"all add: {body}"
        )
    if kind is Kind.OVERLAP:
        body = pair_numbers(r) if len(r.members) == 2 else group_numbers(r)
        return f"partial overlap (a partial OR): {names(r.members)} carry part of the same answer, not each all of it: {body}"
    if kind is Kind.SHARED:
        return (
            f"shared work: {names(r.members)}: no one alone keeps what the group does and knocking out each costs at "
            f"most {pct(SHARED_LOSS)} of what the group adds: {group_numbers(r)}"
        )
    return (
        f"{r.members[0]} is necessary: knocking it out alone, everything else kept, leaves {ci(r.together)} of the gap "
        f"(below {pct(1 - SUFFICES)})"
    )


def relation_sentence(r: Relation) -> str:
    if r.kind is Kind.CASE_SPLIT:
        return split_sentence(r) + f"; {held(r)}"
    if r.kind is Kind.BORDERLINE and r.between:
        point, other = r.between
        return (
            f"borderline {point} / {other or 'no relation'} (the bootstrap interval straddles the rule's line): "
            + word_sentence(point, r)
            + f"; {held(r)}"
        )
    return word_sentence(r.kind, r) + f"; {held(r)}"


def basis(logic: Logic) -> str:
    n = len(logic.components)
    search = (
        f"every one of the 2^{n} subsets"
        if logic.exhaustive
        else f"a bounded search beyond {logic.limit} components: greedy removal from the whole and from the whole "
        f"without each member of a set found, {logic.sets_measured} sets; its sets are minimal against "
        f"removing any one member"
    )
    return (
        f"logic of {n} heads and MLPs on {logic.pairs} pairs (measured: {search}; each component outside a "
        f"set given its counterfactual output; a set suffices at {pct(SUFFICES)} of the gap): "
        f"{len(logic.minimal_sets)} minimal sufficient set(s): "
        + "; ".join("{" + ", ".join(map(str, sorted(s, key=str))) + "}" for s in logic.minimal_sets)
    )


def ranked(members, value) -> str:
    """'L1H3 29% > L1H0 23% = L1H1 23%': by contribution, ties (within TIE) said."""
    out = []
    for i, m in enumerate(members):
        if i:
            out.append(" = " if abs(value(members[i - 1]) - value(m)) < TIE else " > ")
        out.append(f"{m.component} {pct(value(m))}")
    return "".join(out)


def contributions(logic: Logic) -> str:
    """The members by contribution: Shapley shares (exact) or each one's loss (beyond the exact size)."""
    found = logic.interactions
    if found is None:
        return "the circuit has no head or MLP"
    n = len(found.members)
    if found.exhaustive:
        how = (
            f"Shapley shares over every one of the 2^{n} subsets of its {n} members (each knocked out by its own "
            f"output, everything else kept), adding up to all members' {ci(found.total)} of the gap"
        )
        value = lambda m: m.shapley.value  # noqa: E731
    else:
        how = (
            f"each member's loss knocked out alone (beyond {found.limit} members only the sets knocking out at "
            f"most two are measured, so no Shapley share)"
        )
        value = lambda m: m.loss.value  # noqa: E731
    return f"contributions on {found.pairs_n} pairs ({how}): {ranked(found.members, value)}"


def path_sentence(logic: Logic) -> str:
    carrying = logic.carrying_paths
    if carrying:
        shown = carrying[:3]
        more = f" and {len(carrying) - len(shown)} more" if len(carrying) > len(shown) else ""
        return (
            "main path" + ("s" if len(carrying) > 1 else "") + f" (each keeps at least {pct(PATH_CARRIES)} of the "
            f"gap on its own edges, with its first component's other embedding inputs, on {logic.pairs} pairs): "
            + "; ".join(f"{path_text(p)} ({pct(p.effect)})" for p in shown)
            + more
        )
    if logic.paths:
        best = logic.paths[0]
        return (
            f"no single path through the circuit keeps {pct(PATH_CARRIES)} of the gap on its own on {logic.pairs} pairs "
            "(the strongest, "
            f"{path_text(best)}, keeps {pct(best.effect)}): the answer needs several paths together"
        )
    return "the circuit has no path from the embeddings to the logits"


def ranked_relations(relations) -> list[Relation]:
    """By ORDER of kinds, within a kind the one whose members add most together first."""
    return sorted(relations, key=lambda r: (ORDER.index(r.kind), -r.together.value))


def logic_sentences(logic: Logic) -> list[str]:
    found = ranked_relations(logic.relations)
    shown = [relation_sentence(r) for r in found[:SHOWN_RELATIONS]]
    more = [f"{len(found) - SHOWN_RELATIONS} more relations in report.json"] if len(found) > SHOWN_RELATIONS else []
    return [basis(logic), contributions(logic), *shown, *more, path_sentence(logic)]


def longest_chain(logic: Logic) -> tuple:
    """The longest chain of series links, the one with the larger summed contribution among equals."""
    found = logic.interactions
    links = [r.members for r in logic.relations if r.kind is Kind.SERIES]
    chains: list[list] = []

    def walk(chain: list) -> None:
        nexts = [b for a, b in links if a == chain[-1] and b not in chain]
        if not nexts:
            chains.append(chain)
        for b in nexts:
            walk([*chain, b])

    for start in dict.fromkeys(a for a, _ in links):
        walk([start])
    if not chains or found is None:
        return ()
    contribution = found.contribution

    def weight(chain: list) -> tuple[int, float]:
        return len(chain), sum(contribution(m) for m in chain)

    return tuple(sorted(chains, key=weight)[-1])


def mechanism_cell(logic: Logic | None) -> str:
    """The summary's mechanism column: the main path, or the longest series chain and the first other
    relation, its members by contribution (ties '=')."""
    if logic is None:
        return "-"
    split = next((r for r in logic.relations if r.kind is Kind.CASE_SPLIT), None)
    if logic.carrying_paths and split is None:
        extra = len(logic.carrying_paths) - 1
        return short_path(logic.carrying_paths[0]) + (f" (+{extra})" if extra else "")
    found = logic.interactions
    chain = longest_chain(logic)
    others = ranked_relations(r for r in logic.relations if r.kind is not Kind.SERIES)
    others = [r for r in others if r.kind is not Kind.NECESSARY or not chain]
    parts = [">".join(map(str, chain))] if chain else []
    if others and found is not None:
        r = others[0]
        by = sorted(r.members, key=lambda c: -found.contribution(c))[:SHOWN_MEMBERS]
        tied = lambda a, b: abs(found.contribution(a) - found.contribution(b)) < TIE  # noqa: E731
        text = "".join((("=" if tied(by[i - 1], c) else ">") if i else "") + str(c) for i, c in enumerate(by))
        word = r.between[0] if r.kind is Kind.BORDERLINE and r.between else r.kind
        parts.append(f"{word.value.upper() if word in (Kind.OR, Kind.AND) else word.value}({text})")
    return " +".join(parts) if parts else "no path >= " + pct(PATH_CARRIES)


def relation_json(r: Relation) -> dict:
    return {
        "kind": r.kind.value,
        "members": [str(c) for c in r.members],
        "together": r.together.to_json(),
        "alone": [a.to_json() for a in r.alone],
        "losses": [x.to_json() for x in r.losses],
        "interaction": None if r.interaction is None else r.interaction.to_json(),
        "rows": r.rows,
        "moved": r.moved,
        "between": None if r.between is None else [None if k is None else k.value for k in r.between],
        "split": None if r.split is None else {**r.split.__dict__, "members": [str(c) for c in r.split.members]},
    }


def interactions_json(logic: Logic) -> dict | None:
    found = logic.interactions
    if found is None:
        return None
    return {
        "exhaustive": found.exhaustive,
        "limit": found.limit,
        "total": found.total.to_json(),
        "members": [
            {"component": str(m.component), "loss": m.loss.to_json(), "shapley": m.shapley and m.shapley.to_json()}
            for m in found.members
        ],
        "pairs": [
            {
                "members": [str(c) for c in p.members],
                "together": p.together.to_json(),
                "alone": [a.to_json() for a in p.alone],
                "interaction": p.interaction.to_json(),
            }
            for p in found.pairs
        ],
        "higher": [{"members": [str(c) for c in g], "harsanyi": t.to_json()} for g, t in found.higher],
    }


def logic_json(logic: Logic) -> dict:
    return {
        "components": [str(c) for c in logic.components],
        "exhaustive": logic.exhaustive,
        "sets_measured": logic.sets_measured,
        "pairs": logic.pairs,
        "suffices": SUFFICES,
        "minimal_sets": [sorted(map(str, s)) for s in logic.minimal_sets],
        "relations": [relation_json(r) for r in logic.relations],
        "interactions": interactions_json(logic),
        "paths": [{"path": path_text(p), "effect": p.effect} for p in logic.paths],
    }
