"""Planted circuits of shapes tests/test_joint.py does not cover: an OR of three heads (any one
suffices), an AND of two (both needed), and a chain whose middle step has a backup head. The
redundancy verdict, the joint search's circuit and the report's sentence must each match the
construction."""

from __future__ import annotations


import pytest

from models.graph import Head, graph_of

PAIRS = 16


@pytest.fixture(scope="module")
def shapes():
    from probes.circuits.truth.planted import and_pair, backup_chain, three_backups

    return {p.name: p for p in (three_backups(PAIRS), and_pair(PAIRS), backup_chain(PAIRS))}


def measured(p):
    from probes.circuits.oracle import edge_effects, record_runs

    graph = graph_of(p.spec)
    runs = record_runs(p.model, p.batch, graph)
    return graph, runs, edge_effects(p.model, p.batch, graph, runs=runs)


@pytest.mark.parametrize("name", ["three-backups", "and-pair", "backup-chain"])
def test_each_shape_answers_its_pairs_and_its_planted_edges_alone_are_the_model(shapes, name):
    from probes.circuits.oracle import circuit_outcomes

    p = shapes[name]
    graph, runs, _ = measured(p)
    assert runs.base.outcome.restored == 1.0 and runs.other.outcome.restored == 0.0
    circuit, rest = circuit_outcomes(p.model, p.batch, graph, [p.edges, set(graph.edges) - p.edges], runs)
    assert circuit.metric == pytest.approx(runs.base.outcome.metric, abs=1e-3)
    assert rest.metric == pytest.approx(runs.other.outcome.metric, abs=1e-3)


@pytest.mark.parametrize("name", ["three-backups", "and-pair", "backup-chain"])
def test_the_redundancy_verdict_is_the_planted_structure(shapes, name):
    """OR branches: each suffices, none is necessary, single knock-outs miss the whole effect
    (overlap 0). AND: every edge necessary alone, so single effects add up to one per edge."""
    from probes.circuits.redundancy import Structure, redundancy

    p = shapes[name]
    graph, _, single = measured(p)
    found = redundancy(p.model, p.batch, graph, p.edges, single.normalised())
    assert found.structure is p.structure
    if p.structure is Structure.ALTERNATIVES:
        (peers,) = found.alternative_sets
        assert tuple(g.sender for g in peers.alternatives) == p.branches
        assert peers.overlap == pytest.approx(0.0, abs=0.01)
        assert found.redundant
    else:
        assert not found.redundant and found.additivity == pytest.approx(len(p.edges), abs=0.01)


def test_the_joint_search_finds_all_three_branches_of_an_or_of_three(shapes):
    """Each stand-in search forbids one edge; the second branch stands in for every edge of the
    first, so the third is found only by asking the second branch's edges for a stand-in too.
    Catches: a joint circuit of 5 of the 7 planted edges, with L0H1 never named."""
    from probes.circuits.methods.joint import joint_search

    p = shapes["three-backups"]
    graph, runs, single = measured(p)
    found = joint_search(p.model, p.batch, graph, runs, single.normalised())
    assert found.circuit == p.edges
    assert len(found.alternatives) == 2 and len(found.first.circuit) == 3


@pytest.mark.parametrize("name", ["three-backups", "and-pair", "backup-chain"])
def test_the_report_names_the_planted_circuit_and_its_redundancy(shapes, name):
    """The report's path: the oracle-ranked circuit, then (where it shows overlap) the joint search
    from it, whose circuit is the planted one; the additivity sentence gives its numbers (the
    relations themselves: tests/test_logic.py)."""
    from probes.circuits.faithfulness import smallest_circuit
    from probes.circuits.redundancy import Structure, circuit_structure
    from probes.report.edge_part import structure_sentence

    p = shapes[name]
    graph, runs, single = measured(p)
    named = smallest_circuit(p.model, p.batch, graph, "oracle", single.effect)
    structure = circuit_structure(p.model, p.batch, graph, frozenset(named.edges), single.normalised(), runs)
    sentence = structure_sentence(structure)
    if p.structure is Structure.ALTERNATIVES:
        # single effects rank no branch edge, so the oracle's cut is padded and the joint search runs
        assert len(named.edges) > len(p.edges) and structure.joint is not None
        assert structure.joint.circuit == p.edges
        assert "Because the oracle-ranked circuit showed overlap (" in sentence and "-0%" not in sentence
        assert f"{len(p.edges)} edges keep 100%" in sentence
    else:
        assert frozenset(named.edges) == p.edges and structure.joint.circuit == p.edges
        assert "showed no overlap; the joint search, run on every traced circuit, ran" in sentence
        assert f"add up to {len(p.edges) * 100}% of its faithfulness 100%" in sentence


def test_the_sentence_mentions_stand_in_sets_only_when_there_are_some(shapes):
    """Catches: 'the search ... counts the stand-in sets' as the reason for a joint circuit's size
    when the search found none."""
    from probes.circuits.methods.joint import joint_search
    from probes.circuits.redundancy import CircuitStructure, redundancy
    from probes.report.edge_part import structure_sentence

    p = shapes["three-backups"]
    graph, runs, single = measured(p)
    named = redundancy(p.model, p.batch, graph, graph.edges, single.normalised(), runs)
    for alternatives, says in ((0, False), (8, True)):
        joint = joint_search(
            p.model, p.batch, graph, runs, single.normalised(), alternatives=alternatives, tighten=True
        )
        sentence = structure_sentence(
            CircuitStructure(
                named, joint, redundancy(p.model, p.batch, graph, joint.circuit, single.normalised(), runs)
            )
        )
        assert ("counts the stand-in sets" in sentence) is says, sentence
        assert ("stand-in set(s)" in sentence) is says


def test_the_backup_chains_middle_heads_are_the_branches_and_its_ends_are_necessary(shapes):
    """The chain's first link (L0H0) and last (MLP1) are each necessary; only the middle step is
    backed up."""
    from models.graph import MLP
    from probes.circuits.redundancy import redundancy

    p = shapes["backup-chain"]
    graph, _, single = measured(p)
    found = redundancy(p.model, p.batch, graph, p.edges, single.normalised())
    necessity = {g.sender: g.necessity for g in found.groups}
    assert necessity[Head(0, 0)] == pytest.approx(1.0, abs=0.01) and necessity[MLP(1)] == pytest.approx(1.0, abs=0.01)
    assert necessity[Head(1, 0)] == pytest.approx(0.0, abs=0.01) and necessity[Head(1, 1)] == pytest.approx(
        0.0, abs=0.01
    )
