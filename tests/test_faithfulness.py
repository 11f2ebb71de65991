"""Faithfulness curves, CPR and CMD on the null-normalised scale, and the smallest 90% circuit."""

from __future__ import annotations

import math

import pytest

from models.graph import graph_of


def test_area_arithmetic():
    from probes.circuits.faithfulness import Curve

    perfect = Curve("x", 10, (0, 1, 10), (0.0, 1.0, 1.0))
    assert perfect.cpr == pytest.approx(0.05 + 0.9) and perfect.cmd == pytest.approx(0.05)
    diagonal = Curve("x", 4, (0, 2, 4), (0.0, 0.5, 1.0))
    assert diagonal.cpr == pytest.approx(0.5) and diagonal.cmd == pytest.approx(0.5)


def test_the_oracle_ranking_of_a_planted_model_reaches_full_faithfulness_with_the_planted_edges():
    from probes.circuits.oracle import edge_effects
    from probes.circuits.faithfulness import curve, smallest_circuit
    from probes.circuits.truth.planted import two_hop

    p = two_hop(n=16)
    graph = graph_of(p.spec)
    effects = edge_effects(p.model, p.batch, graph)
    found = smallest_circuit(p.model, p.batch, graph, "oracle", effects.effect)
    assert set(found.edges) == set(p.edges) and found.faithfulness.normalised == pytest.approx(1.0)
    assert found.every_k[0] == 0.0 and found.every_k[-1] == 1.0
    assert all(f < 0.9 for f in found.every_k[: len(p.edges)])
    ladder = curve(p.model, p.batch, graph, "oracle", effects.effect)
    assert ladder.sizes[0] == 0 and ladder.sizes[-1] == len(graph.edges)
    assert ladder.faithfulness[0] == 0.0 and ladder.faithfulness[-1] == pytest.approx(1.0)
    worst = curve(p.model, p.batch, graph, "reversed", -effects.effect.abs() + effects.effect.abs().max() + 1)
    assert ladder.cpr > worst.cpr and ladder.cmd < worst.cmd
    assert not math.isnan(worst.cpr)


# The edge circuit reads the oracle's curve off smallest_circuit's every top-k circuit instead of
# measuring the ladder's sizes again. Catches: a curve read at the wrong k, or on another scale.
def test_the_curve_read_off_the_smallest_circuit_is_the_measured_curve():
    import torch

    from models import ModelSpec, build_model
    from probes.circuits.faithfulness import curve, curve_of, smallest_circuit
    from probes.circuits.oracle import edge_effects
    from tests.conftest import hand_batch

    spec = ModelSpec(n_layers=2, d_model=16, n_heads=2, mlp=True, n_ctx=4, d_vocab=4)
    torch.manual_seed(0)
    model, batch, graph = build_model(spec), hand_batch(8), graph_of(spec)
    effects = edge_effects(model, batch, graph)
    measured = curve(model, batch, graph, "oracle", effects.effect)
    read = curve_of(smallest_circuit(model, batch, graph, "oracle", effects.effect))
    assert (read.method, read.total, read.sizes) == (measured.method, measured.total, measured.sizes)
    assert len({round(f, 3) for f in measured.faithfulness}) > 3  # a curve with steps, not just 0 and 1
    # Two batched float32 computations of one curve, normalised by the gap: their reduction orders
    # differ, so points agree to a few float32 steps of the gap (2e-6 seen), not bitwise.
    assert read.faithfulness == pytest.approx(measured.faithfulness, abs=1e-5)
