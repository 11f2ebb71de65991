"""The trained fixtures (tests/fixtures/trained, made by benchmarks/make_trained_fixtures.py): on every
one, the recorded true edges alone reproduce the full model by the rule the fixture states, the
numbers it records are what the check measures again now, and the leaderboard loads it."""

from __future__ import annotations

import pytest

from probes.circuits.truth import trained

NAMES = trained.names()


def test_there_are_at_least_five_trained_fixtures():
    assert len(NAMES) >= 5, NAMES


@pytest.mark.parametrize("name", NAMES)
def test_the_true_edges_alone_reproduce_the_full_model(name):
    fixture = trained.load(name)
    measured = trained.check(fixture.model, fixture.batch, fixture.graph, fixture.edges)
    assert measured.passes, (measured.faithfulness, min(measured.costs.values()))
    recorded = fixture.meta["truth"]["check"]
    assert (recorded["keep_within"], recorded["min_cost"]) == (trained.KEEP_WITHIN, trained.MIN_COST)
    assert measured.faithfulness == pytest.approx(recorded["faithfulness"], abs=1e-4)
    assert measured.costs == pytest.approx(recorded["costs"], abs=1e-4)
    assert measured.pairs == recorded["pairs"] == len(fixture.batch)


@pytest.mark.parametrize("name", NAMES)
def test_the_rule_fails_without_the_edge_that_carries_most(name):
    """The rule is not met by any edge set: the truth less its most costly edge misses it."""
    fixture = trained.load(name)
    costs = fixture.meta["truth"]["check"]["costs"]
    top = max(costs, key=costs.__getitem__)
    fewer = frozenset(e for e in fixture.edges if str(e) != top)
    assert not trained.check(fixture.model, fixture.batch, fixture.graph, fewer).passes


def test_the_leaderboard_loads_them_as_the_trained_kind():
    from probes.circuits.leaderboard import truth_models

    registered = {name: entry for name, entry in truth_models().items() if entry.family == "trained"}
    assert sorted(registered) == [f"trained-{name}" for name in NAMES]
    truth = registered[f"trained-{NAMES[0]}"].build(8, 0)
    fixture = trained.load(NAMES[0])
    assert len(truth.batch) == 8 and truth.edges == fixture.edges and truth.family == "trained"
    assert truth.batch.tokens.tolist() != fixture.batch.tokens[:8].tolist()  # drawn by the seed, not the first 8


def test_a_trained_model_gets_a_scored_cell():
    from probes.ablation import Ablation
    from probes.circuits.leaderboard import METHODS, score_cell, truth_models

    name = min(NAMES, key=lambda n: len(trained.load(n).graph.edges))  # the smallest graph: the cheapest cell
    truth = truth_models()[f"trained-{name}"].build(16, 0)
    cell = score_cell(truth, METHODS["eap"], Ablation.COUNTERFACTUAL, 0)
    assert (cell.family, cell.model, cell.true_edges) == ("trained", f"trained-{name}", len(truth.edges))
    assert 0.0 <= cell.auroc <= 1.0 and cell.pairs == 16
    # 16 of the pairs the truth was established on: its faithfulness there is near, not exactly, the rule's
    assert cell.truth_faithfulness == pytest.approx(1.0, abs=0.15)
