"""When a circuit forms: its edges replayed at weight snapshots (probes.circuits.timeline)."""

from __future__ import annotations

import pytest
import torch

from models.graph import graph_of
from probes.circuits.named import edge_circuit
from probes.circuits.truth.planted import two_hop
from probes.circuits.timeline import circuit_timeline


@pytest.fixture(scope="module")
def replay():
    p = two_hop(n=8)
    graph = graph_of(p.spec)
    final = edge_circuit(p.model, p.batch, graph, compare_methods=False)
    own = {name: value.clone() for name, value in p.model.state_dict().items()}
    scaled = lambda factor: lambda m: m.load_state_dict({k: v * factor for k, v in own.items()})  # noqa: E731
    snapshots = [(0, scaled(0.0)), (50, scaled(1.0)), (100, scaled(1.0))]
    timeline = circuit_timeline(p.model, p.batch, graph, final.circuit.edges, snapshots)
    p.model.load_state_dict(own)
    return final, timeline


def test_the_last_snapshot_is_the_final_models_oracle(replay):
    final, timeline = replay
    share = dict(zip(final.oracle.edges, final.oracle.normalised().tolist()))
    assert timeline.effect[-1].tolist() == pytest.approx([share[e] for e in timeline.edges], abs=1e-5)
    assert timeline.faithfulness[-1] == pytest.approx(final.circuit.faithfulness.normalised, abs=1e-5)


def test_an_edge_enters_and_stabilises_when_its_effect_arrives(replay):
    _, timeline = replay
    assert timeline.steps == (0, 50, 100)
    assert torch.all(timeline.effect[0].abs() < 1e-6)  # all-zero weights move nothing
    assert timeline.faithfulness[0] is None  # and have no gap to take shares of
    assert all(timeline.entered(e) == 50 and timeline.stable(e) == 50 for e in timeline.edges)
