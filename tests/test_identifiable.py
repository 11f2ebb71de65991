"""Identifiable truths (probes.circuits.identifiable): a true edge no ablation run can see is scored
apart, and the exact oracle ranks every identifiable true edge first (the board's calibration)."""

from __future__ import annotations

import pytest
import torch

from probes.ablation import Ablation


@pytest.fixture(scope="module")
def reverse():
    from probes.circuits.leaderboard import truth_models

    return truth_models()["tracr-reverse"].build(16, 0)


def test_a_length_edge_is_unidentifiable_under_same_length_pairs(reverse):
    from probes.circuits.ablations import ablated_runs
    from probes.circuits.identifiable import unidentifiable
    from models.graph import Edge, Head, Input, MLP

    length = Edge(Head(0, 0), Input(MLP(0), "in"))  # the selector width 1/(length + 1): equal in every pair
    assert length in reverse.edges
    runs = ablated_runs(reverse.model, reverse.batch, reverse.graph, Ablation.COUNTERFACTUAL)
    hidden = unidentifiable(reverse.model, reverse.batch, runs, reverse.edges)
    assert length in hidden and len(hidden) < len(reverse.edges)
    zero = ablated_runs(reverse.model, reverse.batch, reverse.graph, Ablation.ZERO)
    assert length not in unidentifiable(reverse.model, reverse.batch, zero, reverse.edges)  # zero sees it


def test_an_unidentifiable_edge_is_scored_apart(reverse):
    from probes.circuits.leaderboard import METHODS, score_cell

    torch.set_num_threads(1)
    cell = score_cell(reverse, METHODS["oracle"], Ablation.COUNTERFACTUAL, 0)
    assert cell.unidentifiable == 8 and cell.auroc == 1.0 and cell.recall == 1.0 and cell.weakest == ""
    assert cell.certified == 1.0 and cell.certified_inputs == 243  # the true circuit's own, on the whole domain


CALIBRATED = [
    (name, ablation)
    for name in ("tracr-frac_prevs", "tracr-sort", "tracr-hist")
    for ablation in (Ablation.COUNTERFACTUAL, Ablation.MEAN)
] + [("two-hop", Ablation.COUNTERFACTUAL)]  # a planted truth is stated for counterfactual ablation


@pytest.mark.parametrize("name,ablation", CALIBRATED)
def test_the_exact_oracle_ranks_the_identifiable_truth_first(name, ablation):
    """The calibration: on models without redundancy the oracle's AUROC on the identifiable truth is
    1 (the page lists each exception with its reason, e.g. zero ablation's saturated reads)."""
    from probes.circuits.ablations import ablated_runs
    from probes.circuits.identifiable import unidentifiable
    from probes.circuits.leaderboard import both_runs, truth_models
    from probes.circuits.methods.scores import auroc
    from probes.circuits.oracle import edge_effects

    truth = truth_models()[name].build(16, 0)
    reference = both_runs(truth.batch) if ablation is Ablation.MEAN else None
    with torch.no_grad():
        runs = ablated_runs(truth.model, truth.batch, truth.graph, ablation, reference)
    hidden = unidentifiable(truth.model, truth.batch, runs, truth.edges)
    effect = edge_effects(truth.model, truth.batch, truth.graph, runs=runs).effect.abs()
    seen = torch.tensor([e not in hidden for e in truth.graph.edges])
    positive = torch.tensor([e in truth.edges for e in truth.graph.edges])
    assert auroc(effect[seen], positive[seen]) == 1.0
