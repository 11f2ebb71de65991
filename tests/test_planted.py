"""Planted circuits: the oracle finds them (AUROC 1.0), they carry the whole answer, and their
distractors are loud (so finding them is not trivial)."""

from __future__ import annotations

import pytest
import torch

from models.graph import Head, graph_of


@pytest.fixture(scope="module")
def planted():
    from probes.circuits.truth.planted import planted_models

    return planted_models(n=32)


def test_each_planted_model_answers_and_its_counterfactual_flips(planted):
    from probes.circuits.oracle import record_runs

    for p in planted:
        runs = record_runs(p.model, p.batch, graph_of(p.spec))
        assert runs.base.outcome.restored == 1.0 and runs.other.outcome.restored == 0.0, p.name


def test_the_oracle_ranks_every_planted_edge_first_unless_branches_are_alternatives(planted):
    """Knocked out alone, an edge of one of two alternative branches costs nothing: the single-edge
    oracle cannot rank it (probes.circuits.methods.joint finds it)."""
    from probes.circuits.truth.planted import Structure
    from probes.circuits.methods.scores import auroc
    from probes.circuits.oracle import edge_effects

    for p in planted:
        effects = edge_effects(p.model, p.batch, graph_of(p.spec))
        truth = torch.tensor([e in p.edges for e in effects.edges])
        assert int(truth.sum()) == len(p.edges), p.name  # every planted edge is in the graph
        score = auroc(effects.effect.abs(), truth)
        assert score < 0.95 if p.structure is Structure.ALTERNATIVES else score == 1.0, p.name


def test_the_planted_circuit_alone_is_the_full_model_and_the_rest_alone_is_nothing(planted):
    from probes.circuits.oracle import circuit_outcomes, record_runs

    for p in planted:
        graph = graph_of(p.spec)
        runs = record_runs(p.model, p.batch, graph)
        circuit, rest = circuit_outcomes(p.model, p.batch, graph, [p.edges, set(graph.edges) - p.edges], runs)
        assert circuit.metric == pytest.approx(runs.base.outcome.metric, abs=1e-3), p.name
        assert rest.metric == pytest.approx(runs.other.outcome.metric, abs=1e-3), p.name


def test_distractor_heads_write_more_than_the_circuit_heads(planted):
    """Ranking heads by how much their output changes between the runs would pick distractors."""
    from probes.circuits.oracle import record_runs

    for p in planted:
        runs = record_runs(p.model, p.batch, graph_of(p.spec))
        moved = {
            s: float((runs.base.writes[s] - runs.other.writes[s]).norm())
            for s in runs.base.writes
            if isinstance(s, Head)
        }
        in_circuit = {e.sender for e in p.edges} | {e.receiver.node for e in p.edges}
        loudest = max(moved, key=moved.get)
        assert loudest not in in_circuit, p.name
