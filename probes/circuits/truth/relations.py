"""The relation labels graded against the planted ones: for each relation a gate model plants
(probes.circuits.truth.gates.Relation), whether the logic of its true circuit (probes.circuits.logic,
on the counterfactual pairs) names it, read from the logic's typed relations, not its sentences:

- OR: an OR (probes.circuits.relation_classes) whose members are exactly the components;
- PARTIAL_OR: a partial overlap whose members are exactly the components (an AND, an additive pair or
  an exact OR over them is a miss);
- AND: an AND (synergy) whose members are exactly the components;
- ADDITIVE: every pair of the components read as additive (an AND over them is a miss);
- SERIES: every consecutive pair of the components read as in series, upstream first;
- SHARED / CASE_SPLIT: shared work / a case split whose members are exactly the components;
- NECESSARY / CARRIES: the MLP mean-ablated on the pairs reads "needed" / anything else, by the
  `word` the caller passes (the leaderboard passes the report's verdict: the rule lives with the
  words, a layer above this one).
A borderline relation names nothing.
`shares`: where the named relation has one component per part, whether each part's share alone is
the planted one (within SHARES of the gap); None where the relation states no such shares.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from probes.circuits.logic import Logic
from probes.circuits.relation_classes import Kind as Found
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


EXACT = {Kind.OR: Found.OR, Kind.PARTIAL_OR: Found.OVERLAP, Kind.AND: Found.AND, Kind.SHARED: Found.SHARED}
EXACT[Kind.CASE_SPLIT] = Found.CASE_SPLIT


def parts_text(found) -> str:
    joiner = " -> " if found.kind is Found.SERIES else " | "
    return f"{found.kind}: " + joiner.join(str(c) for c in found.members)


def naming(relation: Relation, logic: Logic) -> list:
    """The logic's relations that together name the planted one ([] where it is not named)."""
    components = relation.components
    if relation.kind in EXACT:
        want = EXACT[relation.kind]
        return [r for r in logic.relations if r.kind is want and frozenset(r.members) == frozenset(components)][:1]
    if relation.kind is Kind.ADDITIVE:
        pairs = list(itertools.combinations(components, 2))
    elif relation.kind is Kind.SERIES:
        pairs = [(a, b) for a, b in zip(components, components[1:])]
    else:
        raise ValueError(f"{relation.kind} is graded by the MLP's ablation, not the logic")
    want = Found.ADDITIVE if relation.kind is Kind.ADDITIVE else Found.SERIES
    found = []
    for pair in pairs:
        match = [
            r
            for r in logic.relations
            if r.kind is want
            and (frozenset(r.members) == frozenset(pair) if want is Found.ADDITIVE else r.members == pair)
        ]
        if not match:
            return []
        found.append(match[0])
    return found


def shares_right(relation: Relation, found) -> bool | None:
    """Where one relation names it and states each member's share alone: those against the planted ones."""
    if len(found) != 1 or relation.kind not in (Kind.OR, Kind.PARTIAL_OR, Kind.AND, Kind.SHARED):
        return None
    planted = dict(zip(relation.components, relation.alone))
    return all(abs(a.value - planted[c]) <= SHARES for c, a in zip(found[0].members, found[0].alone))


def grade_logic(model: str, relation: Relation, logic: Logic) -> RelationGrade:
    components = tuple(str(c) for c in relation.components)
    match = naming(relation, logic)
    if not match:
        near = [r for r in logic.relations if frozenset(relation.components) & frozenset(r.members)]
        said = "; ".join(parts_text(r) for r in near) or "no relation over these components"
        return RelationGrade(model, str(relation.kind), components, False, said, None)
    said = "; ".join(parts_text(r) for r in match)
    return RelationGrade(model, str(relation.kind), components, True, said, shares_right(relation, match))


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
