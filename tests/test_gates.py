"""Planted gate models (probes.circuits.truth.gates): each answers its pairs, its true edges alone
reproduce the full model, the rest alone is the counterfactual run, and every relation's stated
shares (each component alone, each knocked out; mean-ablated for the MLPs) are what the exact oracle
measures."""

from __future__ import annotations

import pytest

from models.graph import graph_of

PAIRS = 16


@pytest.fixture(scope="module")
def gates():
    from probes.circuits.truth.gates import gate_models

    return {g.name: g for g in gate_models(PAIRS)}


def measured(g, ablation=None):
    from probes.ablation import Ablation
    from probes.circuits.ablations import ablated_runs

    graph = graph_of(g.spec)
    return graph, ablated_runs(g.model, g.batch, graph, ablation or Ablation.COUNTERFACTUAL)


def shares(g, graph, runs, circuits):
    from probes.circuits.faithfulness import normalised
    from probes.circuits.oracle import patched_outcomes

    everything = frozenset(graph.edges)
    outcomes = patched_outcomes(g.model, g.batch, graph, [everything - frozenset(c) for c in circuits], runs)
    return normalised([o.metric for o in outcomes], runs.other.outcome.metric, runs.base.outcome.metric), outcomes


def sent(g, components):
    return {e for e in g.edges if e.sender in components}


NAMES = [
    "or-across",
    "or-within-l1",
    "or-three-layers",
    "partial-or-across",
    "partial-or-three",
    "and-across",
    "soft-and-across",
    "and-within-l1",
    "and-three",
    "adder",
    "adder-across",
    "chain-2",
    "chain-3",
    "chain-4",
    "mlp-chain",
    "mlp-computes",
    "mlp-carries",
]


def test_there_are_at_least_fifteen_gates_with_distinct_names(gates):
    assert sorted(gates) == sorted(NAMES) and len(NAMES) >= 15


@pytest.mark.parametrize("name", NAMES)
def test_true_edges_alone_are_the_full_model_and_the_relation_shares_hold(gates, name):
    g = gates[name]
    graph, runs = measured(g)
    assert runs.base.outcome.restored == 1.0 and runs.other.outcome.restored == 0.0
    assert g.edges <= set(graph.edges)
    (full, rest), _ = shares(g, graph, runs, [g.edges, set(graph.edges) - g.edges])
    assert full == pytest.approx(1.0, abs=1e-3) and rest == pytest.approx(0.0, abs=1e-3)
    for relation in g.relations:
        parts = relation.components
        alone = [g.edges - sent(g, [o for o in parts if o != c]) for c in parts]
        knocked = [g.edges - sent(g, [c]) for c in parts]
        measured_shares, _ = shares(g, graph, runs, alone + knocked)
        assert measured_shares == pytest.approx([*relation.alone, *relation.knocked], abs=0.01)


@pytest.mark.parametrize("name, keeps", [("mlp-computes", False), ("mlp-carries", True)])
def test_mean_ablating_a_computing_mlp_destroys_the_answer_and_a_carrying_one_keeps_it(gates, name, keeps):
    from probes.ablation import Ablation

    g = gates[name]
    graph, runs = measured(g, Ablation.MEAN)
    (relation,) = g.relations
    found, outcomes = shares(g, graph, runs, [g.edges - sent(g, relation.components)])
    assert found == pytest.approx(list(relation.mean_knocked), abs=0.01)
    assert (outcomes[0].restored == 1.0) is keeps


def test_the_gate_curve_is_the_points_it_is_drawn_through():
    from probes.circuits.truth.gates import curve

    points = ((0.0, 0.0), (0.5, 0.0), (1.0, 0.75), (1.5, 1.0))
    assert [curve(points, x) for x, _ in points] == pytest.approx([y for _, y in points])
    assert curve(points, 3.0) == pytest.approx(1.0)  # flat after the last point


@pytest.mark.parametrize("name", NAMES)
def test_a_distractor_writes_more_change_than_any_circuit_head(gates, name):
    """Ranking heads by how much their write changes between the runs would pick a distractor."""
    from models.graph import Head

    g = gates[name]
    _, runs = measured(g)
    moved = {
        s: float((runs.base.writes[s] - runs.other.writes[s]).norm()) for s in runs.base.writes if isinstance(s, Head)
    }
    circuit = {e.sender for e in g.edges if isinstance(e.sender, Head)}
    assert max(v for s, v in moved.items() if s not in circuit) > max(moved[s] for s in circuit)


@pytest.mark.parametrize("name", NAMES)
def test_the_joint_search_and_the_masks_rank_every_true_edge_of_every_gate_first(gates, name):
    """AUROC 1.000 against the planted edges for both set methods, the partial OR across layers
    included: its layer-1 head keeps 50% alone, below the target, so only a search that aims at
    what is left without the layer-0 head finds it."""
    import torch

    from probes.circuits.methods.joint import joint_search
    from probes.circuits.methods.masks import learned_masks
    from probes.circuits.methods.scores import auroc

    g = gates[name]
    graph = graph_of(g.spec)
    truth = torch.tensor([e in g.edges for e in graph.edges])
    for method in (joint_search, learned_masks):
        found = method(g.model, g.batch, graph)
        assert auroc(found.scores.score.abs(), truth) == 1.0, method.__name__
