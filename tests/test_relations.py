"""The relation classes on planted models whose relations are true by construction
(probes.circuits.truth.relation_gates and gates): each sentence asserted, incl. a case split's row
counts, and the strict relation grading (an additive pair or a partial OR read as AND is a miss)."""

from __future__ import annotations

import pytest

from tests.test_logic import traced

PAIRS = 16


@pytest.fixture(scope="module")
def found():
    from probes.circuits.truth.relation_gates import relation_gate_models

    return {g.name: (g, traced(g)) for g in relation_gate_models(PAIRS)}


def text(logic) -> str:
    from probes.report.logic_words import logic_sentences

    return " | ".join(logic_sentences(logic))


def test_a_symmetric_partial_or_is_an_overlap_not_an_and(found):
    _, logic = found["partial-or-symmetric"]
    said = text(logic)
    assert "partial overlap (a partial OR): L0H0 and L1H0 carry part of the same answer" in said, said
    assert "L0H0 adds 70% [70%, 70%] with L1H0 knocked out, L1H0 70% [70%, 70%]" in said
    assert "AND (synergy): L0H0 and L1H0" not in said


def test_four_heads_sharing_the_work_are_shared_not_an_or(found):
    _, logic = found["shared-four"]
    said = text(logic)
    assert "shared work: L0H0, L0H1, L0H2 and L0H3" in said, said
    assert "knocking out each alone costs 12%, 12%, 12%, 12%" in said
    assert "OR:" not in said and "AND" not in said
    assert "additive: MLP0" not in said  # a head's gain through the MLP it feeds is no additive pair


@pytest.mark.parametrize("name", ["case-split-2", "case-split-3"])
def test_a_case_split_names_the_pairs_each_head_decides(found, name):
    g, logic = found[name]
    said = text(logic)
    (planted,) = g.relations
    counts = [round(share * PAIRS) for share in planted.alone]
    by_count = sorted(zip(planted.components, counts), key=lambda hc: (-hc[1], str(hc[0])))
    first, rest = by_count[0], by_count[1:]
    assert f"case split: {first[0]} decides {first[1]} of {PAIRS} pairs" in said, said
    assert f"{rest[-1][0]} the other {rest[-1][1]}" in said
    assert "no pair needs two of them" in said
    assert "AND" not in said and "OR:" not in said


def test_a_chain_whose_downstream_heads_add_up(found):
    _, logic = found["chain-adding"]
    said = text(logic)
    assert "in series L0H0 -> L1H0: L1H0's effect needs L0H0" in said, said
    assert "in series L0H0 -> L1H1: L1H1's effect needs L0H0" in said
    assert "additive: L1H0 and L1H1 add up" in said
    assert "L0H0 is necessary" in said


def test_every_planted_relation_is_graded_named(found):
    from probes.circuits.truth.relations import grade_logic

    for name, (g, logic) in found.items():
        for relation in g.relations:
            grade = grade_logic(name, relation, logic)
            assert grade.named, (name, grade)


def test_the_grading_is_strict_an_and_over_additive_heads_is_a_miss(found):
    """The grade reads the kind: the same members named with another word do not count."""
    from dataclasses import replace

    from probes.circuits.relation_classes import Kind as Found
    from probes.circuits.truth.relations import grade_logic

    g, logic = found["chain-adding"]
    additive = next(r for r in g.relations if r.kind.value == "ADDITIVE")
    as_and = replace(
        logic, relations=tuple(replace(r, kind=Found.AND) if r.kind is Found.ADDITIVE else r for r in logic.relations)
    )
    assert grade_logic(g.name, additive, logic).named
    assert not grade_logic(g.name, additive, as_and).named
    g, logic = found["partial-or-symmetric"]
    (partial,) = g.relations
    as_and = replace(
        logic, relations=tuple(replace(r, kind=Found.AND) if r.kind is Found.OVERLAP else r for r in logic.relations)
    )
    assert not grade_logic(g.name, partial, as_and).named


def test_a_borderline_interval_prints_borderline_not_the_word():
    """The decision reads every resample: a word most resamples give but not CLEARS of them is borderline."""
    import torch

    from probes.circuits.relation_classes import Kind, code, decided

    additive, overlap = code(Kind.ADDITIVE), code(Kind.OVERLAP)
    clear = torch.tensor([additive] * 201)
    assert decided(clear, torch.tensor([additive] * 5))[0] is Kind.ADDITIVE
    shaky = torch.tensor([additive] * 150 + [overlap] * 51)
    word, between, rows = decided(shaky, torch.tensor([additive] * 3 + [overlap] * 2))
    assert word is Kind.BORDERLINE and between == (Kind.ADDITIVE, Kind.OVERLAP) and rows == 3


def test_the_cell_names_members_by_contribution_not_index(found):
    """case-split-2 on these 16 pairs: L1H0 decides 10, L0H0 6; its Shapley share is the larger, so
    it is named first although its index is later; equal shares are written '='."""
    from probes.report.logic_words import mechanism_cell

    assert mechanism_cell(found["case-split-2"][1]) == "case split(L1H0>L0H0)"
    assert mechanism_cell(found["case-split-3"][1]) == "case split(L0H0>L0H1=L1H0)"


def test_an_and_of_three_is_named_as_one_and_not_as_its_pairs():
    """and-three: any two of its heads keep nothing, all three everything. Its pairs each show a
    synergy with the third kept, but only the three together carry it (Harsanyi term 100%)."""
    from probes.circuits.truth.gates import and_three, and_across

    said = text(traced(and_three(PAIRS)))
    assert "AND of L0H0, L1H0 and L2H0: only all 3 together add what they add" in said, said
    assert "beyond every smaller subset, 100% [100%, 100%]" in said
    assert "AND (synergy): L0H0 and L1H0" not in said
    pair = text(traced(and_across(PAIRS)))  # an AND of two is no AND of three with a third member
    assert "AND (synergy): L0H0 and L1H0 together" in pair and "AND of" not in pair, pair


def test_the_relations_run_on_every_pair_given_within_the_token_budget(monkeypatch):
    """The circuit is found on a few pairs; its members' relations on every pair `wide` holds, or on
    as many as subsets.TOKEN_BUDGET allows, evenly spread, and every sentence says on how many."""
    from probes.circuits import subsets
    from probes.circuits.logic import logic
    from probes.circuits.oracle import edge_effects, record_runs
    from probes.circuits.truth.relation_gates import relation_gate_models
    from models.graph import graph_of
    from tasks.data import spread_subset

    g = next(m for m in relation_gate_models(3 * PAIRS) if m.name == "partial-or-symmetric")
    graph, few = graph_of(g.spec), spread_subset(g.batch, PAIRS)
    runs = record_runs(g.model, few, graph)
    single = edge_effects(g.model, few, graph, runs=runs).normalised()
    found = logic(g.model, few, graph, g.edges, single, runs, wide=g.batch)
    assert found.pairs == PAIRS and found.interactions.pairs_n == 3 * PAIRS
    assert f"({3 * PAIRS} pairs)" in text(found) and f"contributions on {3 * PAIRS} pairs" in text(found)
    per_pair = g.batch.inputs.shape[1] * 2 ** len(found.interactions.members)
    monkeypatch.setattr(subsets, "TOKEN_BUDGET", 20 * per_pair)
    budgeted = logic(g.model, few, graph, g.edges, single, runs, wide=g.batch)
    assert budgeted.interactions.pairs_n == 20 and all(r.pairs == 20 for r in budgeted.relations)


def test_every_relation_sentence_says_on_how_many_pairs_it_holds(found):
    import re

    from probes.report.logic_words import path_sentence, relation_sentence

    for name, (_, logic) in found.items():
        for r in logic.relations:
            said = relation_sentence(r)
            assert re.search(rf"holds on \d+ of \d+ pairs the members move \({PAIRS} pairs\)", said), (name, said)
        assert f"on {PAIRS} pairs" in path_sentence(logic), name
