"""Sentences from probes.circuits.logic's findings: one per relation and one for the paths, each
with the numbers that make it true and the rule's thresholds (f on the gap scale: 0 = the
counterfactual run, 1 = the clean run)."""

from __future__ import annotations

from probes.circuits.logic import NEEDED, PATH_CARRIES, SUFFICES, Logic, Path, Relation, RelationKind
from probes.report.words import pct

SHOWN_RELATIONS = 6  # sentences per run; every relation is in report.json
SHOWN_BRANCHES = 4  # an OR's branches named in a sentence or cell
ORDER = (RelationKind.OR, RelationKind.PARTIAL_OR, RelationKind.AND, RelationKind.NECESSARY, RelationKind.SERIES)


def names(components) -> str:
    names_ = [str(c) for c in components]
    return names_[0] if len(names_) == 1 else ", ".join(names_[:-1]) + " and " + names_[-1]


def branch(components) -> str:
    return "+".join(map(str, components))


def path_text(path: Path) -> str:
    """'embed -> L0H2.v -> MLP0 -> L1H1.q -> logits'."""
    return " -> ".join(["embed", *(str(edge.receiver) for edge in path.edges)])


def short_path(path: Path) -> str:
    """'L0H2>MLP0>L1H1.q' for a table cell: the components and the port each is read through."""
    return ">".join(str(edge.receiver) for edge in path.edges[:-1])


def relation_sentence(r: Relation) -> str:
    if r.kind is RelationKind.SERIES:
        links = ", ".join(f"without {c} {pct(w)}" for c, w in zip(r.parts[0], r.without))
        return (
            f"in series {' -> '.join(map(str, r.parts[0]))}: each link is needed (the minimal set keeps "
            f"{pct(r.together)}; {links})"
        )
    if r.kind is RelationKind.AND:
        return (
            f"AND: {names(c for part in r.parts for c in part)} are jointly needed: each alone (the others "
            f"knocked out) keeps {', '.join(pct(a) for a in r.alone)}, below the {pct(SUFFICES)} that suffices, "
            f"together {pct(r.together)}"
        )
    if r.kind is RelationKind.OR:
        shown = r.parts[:SHOWN_BRANCHES]
        more = f" and {len(r.parts) - len(shown)} more branches" if len(r.parts) > len(shown) else ""
        return (
            f"OR: {' | '.join(branch(b) for b in shown)}{more} are alternatives: each branch suffices alone "
            f"(keeps {', '.join(pct(a) for a in r.alone[:SHOWN_BRANCHES])}, at least {pct(SUFFICES)}), all of "
            f"them {pct(r.together)}"
        )
    if r.kind is RelationKind.PARTIAL_OR:
        (spare,), (backed,) = r.parts
        return (
            f"partial OR: {spare} is a partial backup of {backed}: with {backed} knocked out it keeps "
            f"{pct(r.alone[0])} (it adds at least {pct(NEEDED)} there), with {backed} "
            f"{pct(r.alone[1])}, both {pct(r.together)}"
        )
    without = ", ".join(f"without {c} {pct(w)}" for c, w in zip(r.parts[0], r.without))
    return f"{names(r.parts[0])} {'is' if len(r.parts[0]) == 1 else 'are'} in every minimal set: necessary ({without})"


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


def path_sentence(logic: Logic) -> str:
    carrying = logic.carrying_paths
    if carrying:
        shown = carrying[:3]
        more = f" and {len(carrying) - len(shown)} more" if len(carrying) > len(shown) else ""
        return (
            "main path" + ("s" if len(carrying) > 1 else "") + f" (each keeps at least {pct(PATH_CARRIES)} of the "
            "gap on its own, with the raw embeddings its components read): "
            + "; ".join(f"{path_text(p)} ({pct(p.effect)})" for p in shown)
            + more
        )
    if logic.paths:
        best = logic.paths[0]
        return (
            f"no single path through the circuit keeps {pct(PATH_CARRIES)} of the gap on its own (the strongest, "
            f"{path_text(best)}, keeps {pct(best.effect)}): the answer needs several paths together"
        )
    return "the circuit has no path from the embeddings to the logits"


def logic_sentences(logic: Logic) -> list[str]:
    ranked = sorted(logic.relations, key=lambda r: ORDER.index(r.kind))
    shown = [relation_sentence(r) for r in ranked[:SHOWN_RELATIONS]]
    more = [f"{len(ranked) - SHOWN_RELATIONS} more relations in report.json"] if len(ranked) > SHOWN_RELATIONS else []
    return [basis(logic), *shown, *more, path_sentence(logic)]


def mechanism_cell(logic: Logic | None) -> str:
    """The summary's mechanism column: the main path, or the relation that stands in for one."""
    if logic is None:
        return "-"
    if logic.carrying_paths:
        extra = len(logic.carrying_paths) - 1
        return short_path(logic.carrying_paths[0]) + (f" (+{extra})" if extra else "")
    kinds = {r.kind for r in logic.relations}
    series = [r.parts[0] for r in logic.relations if r.kind is RelationKind.SERIES]
    if series and RelationKind.OR not in kinds:
        chain = max(series, key=len)
        return ">".join(map(str, chain)) + (" +AND" if RelationKind.AND in kinds else "")
    for kind in (RelationKind.OR, RelationKind.AND):
        if kind in kinds:
            r = next(r for r in logic.relations if r.kind is kind)
            more = f" | +{len(r.parts) - SHOWN_BRANCHES}" if len(r.parts) > SHOWN_BRANCHES else ""
            return f"{kind.value.upper()}({' | '.join(branch(p) for p in r.parts[:SHOWN_BRANCHES])}{more})"
    return "no path >= " + pct(PATH_CARRIES)


def logic_json(logic: Logic) -> dict:
    return {
        "components": [str(c) for c in logic.components],
        "exhaustive": logic.exhaustive,
        "sets_measured": logic.sets_measured,
        "pairs": logic.pairs,
        "suffices": SUFFICES,
        "minimal_sets": [sorted(map(str, s)) for s in logic.minimal_sets],
        "relations": [
            {
                "kind": r.kind.value,
                "parts": [[str(c) for c in p] for p in r.parts],
                "alone": list(r.alone),
                "together": r.together,
                "without": list(r.without),
            }
            for r in logic.relations
        ],
        "paths": [{"path": path_text(p), "effect": p.effect} for p in logic.paths],
    }
