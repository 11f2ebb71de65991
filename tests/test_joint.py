"""The joint-effect search, learned masks and the redundancy analysis on the planted circuits:
set semantics (an OR pair found as a pair, a chain as a chain), exact gates, the verdicts."""

from __future__ import annotations

import pytest
import torch

from models.graph import Head, graph_of


@pytest.fixture(scope="module")
def planted():
    from probes.circuits.truth.planted import planted_models

    return {p.name: p for p in planted_models(n=16)}


def truth(p, graph):
    return torch.tensor([e in p.edges for e in graph.edges])


def test_joint_search_recovers_every_planted_circuit(planted):
    from probes.circuits.methods.joint import joint_search
    from probes.circuits.methods.scores import auroc

    for p in planted.values():
        graph = graph_of(p.spec)
        found = joint_search(p.model, p.batch, graph)
        assert found.circuit == p.edges, p.name
        assert found.faithfulness == pytest.approx(1.0, abs=1e-3), p.name
        assert auroc(found.scores.score.abs(), truth(p, graph)) >= 0.95, p.name


def test_an_or_pair_is_found_as_a_pair_not_by_single_edge_effects(planted):
    """Each branch edge of the backup pair costs nothing knocked out alone, so a ranking by single
    effects cannot find them: the search's first circuit keeps one branch because the SET suffices,
    and the alternative is the other branch."""
    from probes.circuits.methods.joint import joint_search
    from probes.circuits.oracle import edge_effects
    from probes.circuits.methods.scores import auroc

    p = planted["backup-pair"]
    graph = graph_of(p.spec)
    single = edge_effects(p.model, p.batch, graph)
    assert auroc(single.effect.abs(), truth(p, graph)) < 0.95
    found = joint_search(p.model, p.batch, graph)
    assert len(found.first.circuit) == 3 and found.first.faithfulness >= 0.9  # MLP0 -> logits and one branch
    (alternative,) = found.alternatives
    heads = {
        node
        for e in alternative.replaced | alternative.replacement
        for node in (e.sender, e.receiver.node)
        if isinstance(node, Head)
    }
    assert heads == set(p.branches)
    assert alternative.replaced | alternative.replacement | found.first.circuit == p.edges


def test_gates_at_zero_and_one_are_the_oracles_circuits(planted):
    from probes.circuits.methods.masks import GatedEdges
    from probes.circuits.oracle import circuit_outcomes, record_runs
    from probes.patching import replica_scored, scored_metric

    p = planted["three-hop"]
    graph = graph_of(p.spec)
    runs = record_runs(p.model, p.batch, graph)
    hooks = GatedEdges(p.model, graph, runs, len(p.batch), torch.ones(len(graph.edges)))
    some = frozenset(list(p.edges)[:2]) | frozenset(graph.edges[:5])
    for circuit in (graph.edges, (), some):
        gates = torch.tensor([float(e in circuit) for e in graph.edges])
        with torch.no_grad():
            metric = float(scored_metric(replica_scored(hooks.forward(graph, gates), p.batch), p.batch).mean())
        assert metric == pytest.approx(circuit_outcomes(p.model, p.batch, graph, [circuit], runs)[0].metric, abs=1e-4)


@pytest.mark.parametrize(
    "name", ["two-hop", "induction", "mlp-xor", "three-hop", "backup-pair", "partial-pair", "saturated-mlp"]
)
def test_learned_masks_recover_the_planted_circuit(planted, name):
    from probes.circuits.methods.masks import learned_masks
    from probes.circuits.methods.scores import auroc

    p = planted[name]
    graph = graph_of(p.spec)
    found = learned_masks(p.model, p.batch, graph)
    assert found.circuit == p.edges, name
    assert auroc(found.scores.score.abs(), truth(p, graph)) >= 0.95, name


def test_masks_stop_learning_once_the_circuit_settles(planted, monkeypatch):
    """On a chain the deterministic circuit settles by step 30 (every edge's gate starts open), so a
    learn stops at the first look after that where it is unchanged, not at the step limit."""
    from probes.circuits.methods import masks

    calls = []
    forward = masks.GatedEdges.forward
    monkeypatch.setattr(
        masks.GatedEdges, "forward", lambda self, graph, gates: calls.append(1) or forward(self, graph, gates)
    )
    p = planted["three-hop"]
    settings = masks.MaskSettings()
    found = masks.learned_masks(p.model, p.batch, graph_of(p.spec), settings=settings)
    assert found.circuit == p.edges and not found.alternatives
    assert len(calls) < settings.steps


def test_redundancy_reaches_each_planted_verdict(planted):
    from probes.circuits.oracle import edge_effects
    from probes.circuits.redundancy import Structure, redundancy

    for p in planted.values():
        graph = graph_of(p.spec)
        single = edge_effects(p.model, p.batch, graph).normalised()
        found = redundancy(p.model, p.batch, graph, p.edges, single)
        assert found.structure is p.structure, p.name
        if p.structure is Structure.ALTERNATIVES:
            (peers,) = found.alternative_sets
            assert tuple(g.sender for g in peers.alternatives) == p.branches
            assert peers.overlap == pytest.approx(0.0, abs=0.01)  # single knock-outs miss it all
        if p.structure is Structure.SHARED:
            (peers,) = found.shared_sets
            assert 0.3 < peers.overlap < 0.9
        if p.name == "three-hop":  # each of the 4 links alone removes the whole effect
            assert found.additivity == pytest.approx(4.0, abs=0.01)


def test_eap_misses_the_saturated_mlp_inputs_the_oracle_finds(planted):
    from probes.circuits.methods.attribution import eap
    from probes.circuits.oracle import edge_effects
    from probes.circuits.methods.scores import auroc

    p = planted["saturated-mlp"]
    graph = graph_of(p.spec)
    assert auroc(eap(p.model, p.batch, graph).score.abs(), truth(p, graph)) < 0.9
    assert auroc(edge_effects(p.model, p.batch, graph).effect.abs(), truth(p, graph)) == 1.0


def test_the_reference_set_leaves_out_edges_below_the_noise_threshold():
    from probes.circuits.methods.scores import REFERENCE_NOISE, auroc, top_edges

    effect = torch.zeros(30)
    effect[:2] = torch.tensor([1.0, 0.5])  # a chain-like model: two edges matter, 28 do nothing
    padded, floored = top_edges(effect, 0.1), top_edges(effect, 0.1, REFERENCE_NOISE)
    assert int(padded.sum()) == 3 and int(floored.sum()) == 2
    assert auroc(effect.abs(), floored) == 1.0 and auroc(effect.abs(), padded) < 1.0


def test_the_report_names_the_alternatives_in_one_sentence(planted):
    """The oracle-ranked circuit of the backup pair holds both branches among do-nothing edges; the
    report's sentence names the two heads as alternatives and runs the joint search, whose circuit
    is the planted one."""
    from probes.circuits.faithfulness import smallest_circuit
    from probes.circuits.oracle import edge_effects
    from probes.circuits.redundancy import circuit_structure
    from probes.report.edge_part import structure_sentence

    p = planted["backup-pair"]
    graph = graph_of(p.spec)
    single = edge_effects(p.model, p.batch, graph)
    named = smallest_circuit(p.model, p.batch, graph, "oracle", single.effect)
    assert len(named.edges) > len(p.edges)  # the single-edge ranking pads the circuit
    structure = circuit_structure(p.model, p.batch, graph, frozenset(named.edges), single.normalised())
    assert structure.joint is not None and structure.joint.circuit == p.edges
    sentence = structure_sentence(structure)
    assert f"{len(p.edges)} edges keep 100%" in sentence
    # at the oracle ranking's faithfulness the pair needs one branch only: MLP0 -> logits and one head's 2 edges
    tight = structure.joint.at_target
    assert len(tight.circuit) == 3 and tight.circuit < p.edges and tight.faithfulness >= 0.9
    assert (
        f"has 3 edges keeping {tight.faithfulness:.0%}, fewer than the oracle ranking's {len(named.edges)}" in sentence
    )


def test_learned_masks_learn_when_the_caller_turned_gradients_off(planted):
    """Catches: gates sampled outside enable_grad under a caller's set_grad_enabled(False): 0 edges,
    AUROC 0.5, no warning."""
    from probes.circuits.methods.masks import learned_masks

    p = planted["two-hop"]
    graph = graph_of(p.spec)
    with torch.no_grad():
        found = learned_masks(p.model, p.batch, graph)
    assert found.circuit == p.edges
