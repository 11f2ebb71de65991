"""edge_circuit on a planted model: every method judged, the report lines, figure and MIB export."""

from __future__ import annotations

import json

import pytest

from models.graph import graph_of


@pytest.fixture(scope="module")
def planted_result():
    from probes.edge_circuit import edge_circuit
    from probes.planted import mlp_xor

    p = mlp_xor(n=16)
    return p, edge_circuit(p.model, p.batch, graph_of(p.spec), ig_steps=3, expected=p.edges)


def test_every_method_is_judged_and_the_oracle_finds_the_planted_circuit(planted_result):
    p, result = planted_result
    assert [m.scores.method for m in result.methods] == ["oracle", "EAP", "EAP-IG (3 steps)", "ACDC (threshold 0.01)"]
    oracle = result.methods[0]
    assert oracle.spearman == pytest.approx(1.0) and oracle.auroc_expected == 1.0
    assert set(result.circuit.edges) == p.edges and result.acdc_faithfulness == pytest.approx(1.0)
    assert all(m.curve.faithfulness[0] == 0.0 and m.curve.faithfulness[-1] == pytest.approx(1.0) for m in result.methods)


def test_report_lines_figure_and_mib_export(planted_result, tmp_path):
    from probes.edge_render import circuit_figure, markdown_lines, mib_json

    p, result = planted_result
    lines = markdown_lines(result, "mlp-xor", "figures/x.png")
    assert any(line.startswith("| EAP-IG (3 steps) |") for line in lines)
    assert "- MLP0 -> logits (+100%)" in lines and "![mlp-xor](figures/x.png)" in lines
    circuit_figure(result, "mlp-xor").savefig(tmp_path / "x.png")
    assert (tmp_path / "x.png").stat().st_size > 10_000
    exported = json.loads(json.dumps(mib_json(result, result.methods[1].scores)))
    assert len(exported["edges"]) == len(result.graph.edges)
    assert exported["edges"]["m0->logits"]["in_graph"] and not exported["edges"]["a0.h2->m0"]["in_graph"]
    assert "input->a0.h0<v>" in exported["edges"] and exported["nodes"]["a0.h2"] == {"in_graph": False}
