"""The circuit resolved by position (probes.circuits.positional)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models.graph import Edge, graph_of
from probes.circuits.named import edge_circuit
from probes.circuits.oracle import edge_effects
from probes.circuits.truth.planted import two_hop
from probes.circuits.positional import fixed_layout, positional_circuit
from probes.patching import live_positions


@pytest.fixture(scope="module")
def planted():
    p = two_hop(n=8)
    whole = edge_circuit(p.model, p.batch, graph_of(p.spec), compare_methods=False)
    aggregated = whole.circuit.edges
    return p, aggregated, positional_circuit(p.model, p.batch, p.spec, whole.oracle, aggregated)


def test_edges_outside_the_live_positions_are_zero_by_construction(planted):
    """The claim that lets the positional graph leave those positions out."""
    p, _, result = planted
    every = tuple(range(p.batch.inputs.shape[1]))
    effects = edge_effects(p.model, p.batch, graph_of(p.spec, every))
    outside = torch.tensor([e.position not in result.positions for e in effects.edges])
    assert set(result.positions) == set(live_positions(p.batch)) and bool(outside.any())
    assert effects.effect[outside].abs().max() < 1e-5
    inside = {e: float(v) for e, v in zip(effects.edges, effects.effect) if e.position in result.positions}
    resolved = [(e, float(v)) for e, v in zip(result.graph.edges, result.effects.effect) if e.position is not None]
    assert resolved and [inside[e] for e, _ in resolved] == pytest.approx([v for _, v in resolved], abs=1e-5)


def test_the_positional_circuit_is_the_planted_chain_at_its_positions(planted):
    p, aggregated, result = planted
    assert result.edges is not None and result.faithfulness.normalised >= result.target
    assert set(result.parents) == set(aggregated) == set(p.edges)
    assert result.changed_share == 0.0
    assert all(e.position is not None for e in result.edges)


def test_edges_below_the_refine_share_stay_whole_and_are_still_patched(planted):
    from probes.circuits.positional import REFINE

    p, _, result = planted
    whole = [e for e in result.graph.edges if e.position is None]
    share = dict(zip(result.graph.edges, result.effects.normalised().abs().tolist()))
    assert whole and all(share[e] < REFINE for e in whole)
    # Every edge of the aggregated graph is in the positional graph, at its positions or whole.
    covered = {Edge(e.sender, e.receiver) for e in result.graph.edges}
    assert covered == set(graph_of(p.spec).edges)


def test_the_changed_share_counts_edges_only_one_circuit_holds(planted):
    _, aggregated, result = planted
    extra = next(e for e in result.graph.edges if Edge(e.sender, e.receiver) not in set(aggregated))
    fewer = dataclasses.replace(result, aggregated=aggregated[1:])
    more = dataclasses.replace(result, edges=(*result.edges, extra))
    union = len(aggregated) + 1
    assert fewer.changed_share == pytest.approx(1 / len(aggregated))
    assert more.changed_share == pytest.approx(1 / union)


def test_a_layout_that_varies_is_not_resolved_by_position(planted):
    p, _, _ = planted
    assert fixed_layout(p.batch)
    shifted = dataclasses.replace(p.batch, positions=p.batch.positions - (p.batch.example_index % 2))
    assert not fixed_layout(shifted)


def test_reused_effects_and_the_chunked_search_equal_measuring_everything():
    """Whole edges read their effect from the aggregated oracle and the search measures sizes in
    growing chunks: the same effects as running every edge of the positional graph, and the same
    circuit as measuring every size k and keeping the first that reaches the target. On the planted
    model with its weights moved, so that the edges kept whole move the metric too."""
    import copy

    from probes.circuits.faithfulness import normalised, ranked
    from probes.circuits.oracle import Direction, circuit_outcomes, record_runs

    p = two_hop(n=8)
    model = copy.deepcopy(p.model)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter += 0.3 * torch.randn(parameter.shape, generator=generator)
    whole = edge_circuit(model, p.batch, graph_of(p.spec), compare_methods=False)
    result = positional_circuit(model, p.batch, p.spec, whole.oracle, whole.circuit.edges)
    runs = record_runs(model, p.batch, result.graph, Direction.NOISE)
    fresh = edge_effects(model, p.batch, result.graph, runs=runs)
    kept_whole = [abs(v) for e, v in zip(fresh.edges, fresh.effect.tolist()) if e.position is None]
    assert result.effects.edges == fresh.edges and max(kept_whole) > 1e-3
    assert result.effects.effect.tolist() == pytest.approx(fresh.effect.tolist(), abs=1e-6)
    order = ranked(result.graph.edges, fresh.effect)
    outcomes = circuit_outcomes(model, p.batch, result.graph, [order[:k] for k in range(len(order) + 1)], runs)
    every = normalised([o.metric for o in outcomes], outcomes[0].metric, outcomes[-1].metric)
    first = next(k for k in range(1, len(order) + 1) if every[k] >= result.target)
    assert first > 1 and result.edges == tuple(order[:first])
    assert result.faithfulness.normalised == pytest.approx(every[first], abs=1e-6)
    # Every edge outside the circuit takes its counterfactual value: the empty circuit is the counterfactual run.
    assert result.faithfulness.recovered == pytest.approx(result.faithfulness.normalised, abs=1e-6)
