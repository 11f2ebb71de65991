"""The relation labels graded against the planted ones: for each relation a gate model plants
(probes.circuits.truth.gates.Relation), whether the logic of its true circuit (probes.circuits.logic,
on the counterfactual pairs) names it, read from the logic's typed relations, not its sentences:

- OR: an OR whose branches are exactly the components, one each;
- PARTIAL_OR: a partial OR, or an OR, whose parts together are exactly the components, with not
  every component a branch alone (that would claim a half backup suffices by itself);
- AND: an AND whose groups are exactly the components, one each;
- ADDITIVE: such an AND whose shares alone add up to what the components keep together;
- SERIES: a chain that is the components in order;
- NECESSARY / CARRIES: the MLP mean-ablated on the pairs reads "needed" / anything else, by the
  `word` the caller passes (the leaderboard passes the report's verdict: the rule lives with the
  words, a layer above this one).
`shares`: where the named relation has one component per part, whether each part's share alone is
the planted one (within SHARES of the gap); None where the relation states no such shares.
"""

from __future__ import annotations

from dataclasses import dataclass

from probes.circuits.logic import Logic, RelationKind
from probes.circuits.truth.gates import Kind, Relation

SHARES = 0.05  # of the gap: a measured share this close to the planted one is that share


@dataclass(frozen=True)
class RelationGrade:
    model: str
    kind: str  # the planted relation's Kind
    components: tuple[str, ...]
    named: bool
    found: str  # the logic's relation that names it, or the logic's relations over these components
    shares: bool | None

    def to_json(self) -> dict:
        return {**self.__dict__, "components": list(self.components)}


def parts_text(kind, parts) -> str:
    if kind is RelationKind.SERIES:
        return f"{kind}: " + " -> ".join(str(c) for c in parts[0])
    return f"{kind}: " + " | ".join("+".join(str(c) for c in part) for part in parts)


def one_each(parts, components) -> bool:
    return sorted(map(frozenset, parts), key=sorted) == sorted((frozenset([c]) for c in components), key=sorted)


def covers(parts, components) -> bool:
    return frozenset(c for part in parts for c in part) == frozenset(components)


def names(relation: Relation, found) -> bool:
    parts, kind = found.parts, found.kind
    if relation.kind is Kind.OR:
        return kind is RelationKind.OR and one_each(parts, relation.components)
    if relation.kind is Kind.PARTIAL_OR:
        return (
            kind in (RelationKind.OR, RelationKind.PARTIAL_OR)
            and covers(parts, relation.components)
            and not (kind is RelationKind.OR and one_each(parts, relation.components))
        )
    if relation.kind is Kind.AND:
        return kind is RelationKind.AND and one_each(parts, relation.components)
    if relation.kind is Kind.ADDITIVE:
        return (
            kind is RelationKind.AND
            and one_each(parts, relation.components)
            and abs(sum(found.alone) - found.together) <= SHARES
        )
    if relation.kind is Kind.SERIES:
        return kind is RelationKind.SERIES and tuple(parts[0]) == tuple(relation.components)
    raise ValueError(f"{relation.kind} is graded by the MLP's ablation, not the logic")


def shares_right(relation: Relation, found) -> bool | None:
    if relation.kind is Kind.SERIES or not all(len(p) == 1 for p in found.parts):
        return None
    planted = dict(zip(relation.components, relation.alone))
    return all(abs(a - planted[p[0]]) <= SHARES for p, a in zip(found.parts, found.alone))


def grade_logic(model: str, relation: Relation, logic: Logic) -> RelationGrade:
    components = tuple(str(c) for c in relation.components)
    match = next((r for r in logic.relations if names(relation, r)), None)
    if match is None:
        near = [r for r in logic.relations if frozenset(relation.components) & {c for p in r.parts for c in p}]
        said = "; ".join(parts_text(r.kind, r.parts) for r in near) or "no relation over these components"
        return RelationGrade(model, str(relation.kind), components, False, said, None)
    return RelationGrade(
        model, str(relation.kind), components, True, parts_text(match.kind, match.parts), shares_right(relation, match)
    )


def grade_mlp(model: str, relation: Relation, word: str) -> RelationGrade:
    named = (word == "needed") is (relation.kind is Kind.NECESSARY)
    components = tuple(str(c) for c in relation.components)
    return RelationGrade(model, str(relation.kind), components, named, f"mean-ablated: {word}", None)


def grade_relations(truth, word) -> tuple[RelationGrade, ...]:
    """Every planted relation of `truth` (probes.circuits.leaderboard.Truth) graded; () without any.
    `word(intact, ablated)`: the verdict on an MLP's mean ablation ("needed" or another word), from
    its accuracy and logit difference intact and ablated."""
    from probes.ablation import Ablation, ablate, reference_activations
    from probes.circuits.logic import logic
    from probes.circuits.oracle import edge_effects, record_runs
    from probes.sublayers import scores

    if not truth.relations:
        return ()
    runs = record_runs(truth.model, truth.batch, truth.graph)
    single = edge_effects(truth.model, truth.batch, truth.graph, runs=runs).normalised()
    found = logic(truth.model, truth.batch, truth.graph, truth.edges, single, runs)
    grades = []
    for relation in truth.relations:
        if relation.kind in (Kind.NECESSARY, Kind.CARRIES):
            # The MLP alone mean-ablated, as the report's sublayer part measures it (its probes unfit).
            reference = reference_activations(truth.model, truth.batch)
            ablated = ablate(truth.model, truth.batch, list(relation.components), Ablation.MEAN, 0, reference)
            grades.append(grade_mlp(truth.name, relation, word(scores(truth.model, truth.batch, []), ablated)))
        else:
            grades.append(grade_logic(truth.name, relation, found))
    return tuple(grades)
