"""edge_circuit on a planted model: every method judged, the report lines, figure and MIB export."""

from __future__ import annotations

import json

import pytest

from models.graph import graph_of


@pytest.fixture(scope="module")
def planted_result():
    from probes.circuits.named import edge_circuit
    from probes.circuits.truth.planted import mlp_xor

    p = mlp_xor(n=16)
    return p, edge_circuit(p.model, p.batch, graph_of(p.spec), ig_steps=3, expected=p.edges)


def test_every_method_is_judged_and_the_oracle_finds_the_planted_circuit(planted_result):
    p, result = planted_result
    assert [m.scores.method for m in result.methods] == ["oracle", "EAP", "EAP-IG (3 steps)", "ACDC (threshold 0.01)"]
    oracle = result.methods[0]
    assert oracle.spearman == pytest.approx(1.0) and oracle.auroc_expected == 1.0
    assert set(result.circuit.edges) == p.edges and result.acdc_faithfulness == pytest.approx(1.0)
    assert all(
        m.curve.faithfulness[0] == 0.0 and m.curve.faithfulness[-1] == pytest.approx(1.0) for m in result.methods
    )


def test_report_lines_figure_and_mib_export(planted_result, tmp_path):
    from probes.report.edge_render import circuit_figure, markdown_lines
    from probes.report.outputs.exports import mib_graph, mib_json, mib_problems

    p, result = planted_result
    lines = markdown_lines(result, "mlp-xor", "figures/x.png")
    assert any(line.startswith("| EAP-IG (3 steps) |") for line in lines)
    assert "- MLP0 -> logits (+100%)" in lines and "![mlp-xor](figures/x.png)" in lines
    circuit_figure(result, "mlp-xor").savefig(tmp_path / "x.png")
    assert (tmp_path / "x.png").stat().st_size > 10_000
    exported = json.loads(json.dumps(mib_json(result, result.methods[1].scores, p.spec.d_model)))
    assert mib_problems(exported) == [] and len(exported["edges"]) == len(mib_graph(p.spec.n_layers, p.spec.n_heads)[1])
    assert exported["edges"]["m0->logits"]["in_graph"] and not exported["edges"]["a0.h2->m0"]["in_graph"]
    assert "input->a0.h0<v>" in exported["edges"] and exported["nodes"]["a0.h2"] == {"in_graph": False}


def test_acdc_can_be_skipped():
    from probes.circuits.named import edge_circuit
    from probes.report.edge_render import markdown_lines
    from probes.circuits.truth.planted import two_hop

    p = two_hop(n=8)
    result = edge_circuit(p.model, p.batch, graph_of(p.spec), ig_steps=2, acdc_threshold=None)
    assert [m.scores.method for m in result.methods] == ["oracle", "EAP", "EAP-IG (2 steps)"]
    assert result.acdc_faithfulness is None and not any("ACDC" in line for line in markdown_lines(result, "x"))


def test_the_edges_command_refuses_a_missing_folder(tmp_path, capsys):
    from toylens.edges import main

    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "nothing")])
    assert exit_.value.code == 2 and "is not a folder of runs" in capsys.readouterr().err


def test_the_edges_command_writes_report_figures_and_mib_files(tiny_runs, tmp_path):
    from probes.settings import ReportSettings
    from toylens.edges import edges_command

    # A 150-step run barely tells its pairs apart: below the report's min_gap it would not be traced.
    edges_command(tiny_runs, tmp_path, ReportSettings(min_gap=0.0))
    text = (tmp_path / "edges.md").read_text()
    assert "#### attn-only-2x1 seed 0" in text and "bag-of-words" not in text
    assert (tmp_path / "figures" / "edges-attn-only-2x1-seed0.png").is_file()  # the report's own name
    exported = json.loads((tmp_path / "mib_attn-only-2x1_seed0_eap.json").read_text())
    # MIB's graph of 2 layers x 1 head has MLP nodes though the model has none: 23 edges, not our 12.
    assert set(exported) == {"cfg", "nodes", "edges"} and len(exported["edges"]) == 23


def test_a_task_that_declares_its_circuit_gets_every_method_scored_against_it(tiny_runs, monkeypatch):
    from probes.circuits.named import run_edge_circuit
    from probes.circuits.methods.scores import without_float_noise
    from tasks.training.runs import find_runs

    run = next(r for r in find_runs(tiny_runs) if r.model_name == "attn-only-2x1")
    declared = frozenset(list(graph_of(run.task.default_models()["attn-only-2x1"]).edges)[:3])
    monkeypatch.setattr(type(run.task), "expected_circuit", lambda self, name, spec: declared)
    result = run_edge_circuit(run, acdc_threshold=None, ig_steps=2)
    assert result.expected == declared
    # Each method's AUROC against the declared edges, counted pair by pair: the chance that a declared
    # edge outscores an undeclared one by |score| (ties half).
    inside = [edge in declared for edge in result.graph.edges]
    for method in result.methods:
        score = without_float_noise(method.scores.score.abs()).tolist()
        wins = [(a > b) + 0.5 * (a == b) for a, i in zip(score, inside) if i for b, j in zip(score, inside) if not j]
        assert len(wins) == 3 * 9 and method.auroc_expected == pytest.approx(sum(wins) / len(wins)), (
            method.scores.method
        )


def test_the_metric_is_named_as_measured_when_a_task_gives_no_foils_or_only_some():
    import dataclasses

    import torch

    from models import ModelSpec, build_model
    from probes.circuits.named import edge_circuit
    from probes.report.edge_render import markdown_lines
    from tests.conftest import hand_batch

    spec = ModelSpec(n_layers=2, d_model=16, n_heads=1, mlp=False, n_ctx=4, d_vocab=4)
    torch.manual_seed(0)
    model, batch = build_model(spec), hand_batch(8)  # hand_batch gives no foils: answer log-prob
    result = edge_circuit(model, batch, graph_of(spec), compare_methods=False)
    assert "metric = answer log-prob, clean" in markdown_lines(result, "x")[2]
    some = dataclasses.replace(batch, foils=torch.where(torch.arange(8) % 2 == 0, batch.foils, (batch.answers + 1) % 4))
    assert (
        edge_circuit(model, some, graph_of(spec), compare_methods=False).metric
        == "answer - foil logit where a foil is given, else answer log-prob"
    )


# The edges command, like the report, traces no circuit where clean and counterfactual barely
# differ. Catches: "faithfulness 100.0%" and "+71%" edges shown for a collapsed run whose gap is 0.00.
def test_the_edges_command_shares_no_gap_too_small_to_mean_anything(tmp_path, monkeypatch):
    import dataclasses
    from types import SimpleNamespace

    from probes.circuits.named import edge_circuit
    from probes.circuits.truth.planted import two_hop
    from toylens.edges import edges_command

    p = two_hop(n=8)
    same = dataclasses.replace(p.batch, counterfactual=p.batch.tokens)  # counterfactual = clean: gap 0
    result = edge_circuit(p.model, same, graph_of(p.spec), compare_methods=False)
    run = SimpleNamespace(spec=p.spec, model_name="attn-only-1x1", seed=2)
    monkeypatch.setattr("tasks.training.runs.find_runs", lambda _: [run])
    monkeypatch.setattr("probes.circuits.named.run_edge_circuit", lambda _: result)
    edges_command(tmp_path, tmp_path / "edges")
    text = (tmp_path / "edges" / "edges.md").read_text()
    assert "attn-only-1x1 seed 2: edge circuit not traced (clean minus counterfactual metric only" in text
    assert "faithfulness" not in text and "%" not in text


@pytest.mark.parametrize("build", ["mlp_xor", "saturated_mlp", "induction"])
def test_patching_the_scored_positions_alone_equals_the_full_forward(build):
    """The oracle runs its last block's MLP and the unembedding at the scored positions alone; a
    caller observing an activation gets the full forward. Both give every set's metric, single
    edges and circuits (their inputs into the last MLP and the logits patched) alike."""
    import random

    from probes.circuits.oracle import Direction, patched_runs, record_runs
    from probes.circuits.edge_hooks import FINAL_RESIDUAL
    from probes.circuits.truth import planted

    p = getattr(planted, build)(n=16)
    graph = graph_of(p.spec)
    runs = record_runs(p.model, p.batch, graph, Direction.NOISE)
    rng = random.Random(0)
    sets = [frozenset([e]) for e in graph.edges]
    sets += [frozenset(graph.edges) - frozenset(rng.sample(graph.edges, 3)) for _ in range(8)]
    scored = patched_runs(p.model, p.batch, graph, sets, runs)
    full = patched_runs(p.model, p.batch, graph, sets, runs, observe=(FINAL_RESIDUAL,))
    differences = [abs(a.outcome.metric - b.outcome.metric) for a, b in zip(scored, full)]
    assert max(differences) < 1e-5 and len(differences) == len(sets)
