"""MIB and attribution-graph exports: each validator catches each rule it checks, the MIB file of
a planted model round-trips with the right sign, and the exports command writes valid files."""

from __future__ import annotations

import copy
import json

import pytest

from models.graph import graph_of
from probes.report.outputs.exports import attribution_problems, mib_graph, mib_json, mib_problems, mib_scores


def test_mib_graph_is_from_models_edge_set():
    nodes, edges = mib_graph(2, 4)
    assert len(edges) == 110 and len(set(edges)) == 110  # FIELD_NOTES: 2 layers x 4 heads
    assert nodes == ["input", *[f"a0.h{h}" for h in range(4)], "m0", *[f"a1.h{h}" for h in range(4)], "m1", "logits"]
    assert "a0.h1->a1.h0<q>" in edges and "a0.h1->m0" in edges and "m1->logits" in edges
    assert "a1.h0->m0" not in edges and "a0.h0->a0.h1<q>" not in edges
    # parallel attention and MLP: an MLP no longer reads its own layer's heads.
    assert len(mib_graph(2, 4, parallel_attn_mlp=True)[1]) == 110 - 8


@pytest.fixture(scope="module")
def planted():
    from probes.circuits.named import edge_circuit
    from probes.circuits.truth.planted import two_hop

    p = two_hop(n=8)
    return p, edge_circuit(p.model, p.batch, graph_of(p.spec), ig_steps=2, acdc_threshold=None)


def test_mib_export_passes_and_round_trips_with_the_sign_mib_uses(planted):
    p, result = planted
    oracle = result.methods[0].scores
    data = json.loads(json.dumps(mib_json(result, oracle, p.spec.d_model)))
    assert mib_problems(data) == []
    assert len(data["edges"]) == len(mib_graph(p.spec.n_layers, p.spec.n_heads)[1])
    from probes.report.outputs.exports import mib_edge

    read = mib_scores(data)
    for edge, effect in zip(oracle.edges, oracle.score.tolist()):
        assert read[mib_edge(edge)] == pytest.approx(-effect)  # every score back, sign flipped
    # The planted circuit's edges carry the signal: corrupting each lowers the metric, so MIB's
    # score is positive, and they are the ones marked in_graph.
    kept = {mib_edge(e) for e in result.circuit.edges}
    assert all(read[name] > 0 for name in kept if name.startswith("a"))
    assert {n for n, e in data["edges"].items() if e["in_graph"]} == kept


def broken(data, change):
    data = copy.deepcopy(data)
    change(data)
    return mib_problems(data)


def test_the_mib_validator_catches_each_rule(planted):
    p, result = planted
    data = json.loads(json.dumps(mib_json(result, result.methods[0].scores, p.spec.d_model)))
    edge = next(iter(data["edges"]))
    cases = {
        "top level": lambda d: d.update(extra=1),
        "cfg must hold": lambda d: d["cfg"].pop("d_model"),
        "cfg.n_heads": lambda d: d["cfg"].update(n_heads=True),
        "unknown node": lambda d: d["nodes"].update({"a9.h0": {"in_graph": False}}),
        "unknown edge": lambda d: d["edges"].update({"a0.h0->a1.h0": {"score": 0.0, "in_graph": False}}),
        "missing edge": lambda d: d["edges"].pop(edge),
        "bool in_graph": lambda d: d["edges"][edge].pop("in_graph"),
        "finite number score": lambda d: d["edges"][edge].update(score=float("nan")),
    }
    for fragment, change in cases.items():
        problems = broken(data, change)
        assert problems and any(fragment in problem for problem in problems), (fragment, problems)


def one_prompt(batch):
    """The batch's first example scored at its first position only: one attribution graph."""
    import dataclasses

    from tasks.data import select_rows

    prompt = select_rows(batch, [0])
    return dataclasses.replace(
        prompt,
        example_index=prompt.example_index[:1],
        positions=prompt.positions[:1],
        answers=prompt.answers[:1],
        foils=prompt.foils[:1],
        groups=prompt.groups[:1],
    )


def test_attribution_graph_of_one_prompt_passes_and_its_validator_catches_breaks(planted):
    from probes.report.outputs.exports import attribution_graph

    p, _ = planted
    words = [f"t{i}" for i in range(p.spec.d_vocab)]
    graph = attribution_graph(p.model, one_prompt(p.batch), p.spec, words, "planted", "toylens planted")
    data = json.loads(json.dumps(graph))
    assert attribution_problems(data) == []
    kinds = {n["feature_type"] for n in data["nodes"]}
    assert {"embedding", "logit"} <= kinds and data["links"]
    assert any("(q)" in n["clerp"] or "(k)" in n["clerp"] or "(v)" in n["clerp"] for n in data["nodes"])
    ids = [n["node_id"] for n in data["nodes"]]
    cases = {
        "metadata.prompt": lambda d: d["metadata"].pop("prompt"),
        "appears twice": lambda d: d["nodes"].append(dict(d["nodes"][0])),
        "feature_type": lambda d: d["nodes"][0].update(feature_type="neuron"),
        "join two known": lambda d: d["links"][0].update(target="nowhere"),
        "finite number": lambda d: d["links"][0].update(weight=float("inf")),
        "no logit node": lambda d: d.update(nodes=[n for n in d["nodes"] if n["feature_type"] != "logit"], links=[]),
        # Neuronpedia's schema types info.generator as an object (a string failed its Ajv check).
        "metadata.info.generator must be an object": lambda d: d["metadata"]["info"].update(generator="toylens"),
        "generator.name must be a string": lambda d: d["metadata"]["info"]["generator"].update(name=1),
        # circuit-tracer's graph Model requires these.
        "metadata.transcoder_list": lambda d: d["metadata"].pop("transcoder_list"),
        "qParams.clickedId": lambda d: d["qParams"].pop("clickedId"),
    }
    for fragment, change in cases.items():
        copied = copy.deepcopy(data)
        change(copied)
        problems = attribution_problems(copied)
        assert any(fragment in problem for problem in problems), (fragment, problems)
    assert len(set(ids)) == len(ids)


def test_attribution_graph_passes_neuronpedias_own_schema(planted):
    """tests/fixtures/neuronpedia/graph-schema.json is Neuronpedia's schema (its README says from
    where), checked as its upload route does (draft-07); the break shows the check can fail."""
    jsonschema = pytest.importorskip("jsonschema", reason="no jsonschema (the dev extra's nbformat brings it)")
    from pathlib import Path

    from probes.report.outputs.exports import attribution_graph

    p, _ = planted
    schema = json.loads((Path(__file__).parent / "fixtures" / "neuronpedia" / "graph-schema.json").read_text())
    validator = jsonschema.Draft7Validator(schema)
    words = [f"t{i}" for i in range(p.spec.d_vocab)]
    graph = attribution_graph(p.model, one_prompt(p.batch), p.spec, words, "planted", "toylens planted")
    data = json.loads(json.dumps(graph))
    assert [e.message for e in validator.iter_errors(data)] == []
    data["metadata"]["info"]["generator"] = "toylens"
    assert [list(e.absolute_path) for e in validator.iter_errors(data)] == [["metadata", "info", "generator"]]


def test_the_export_commands_write_valid_files(tiny_runs, tmp_path):
    from probes.settings import ReportSettings
    from toylens.export import export_command, main

    # A 150-step run barely tells its pairs apart: below the report's min_gap it is not exported.
    export_command("mib", tiny_runs, tmp_path, 2, ReportSettings(min_gap=0.0))
    files = sorted(f for f in (tmp_path / "mib").glob("*.json") if not f.name.startswith("."))
    assert [f.name for f in files] == [
        "attn-only-2x1_seed0_eap-ig--5-steps.json",
        "attn-only-2x1_seed0_eap.json",
        "attn-only-2x1_seed0_oracle.json",
    ]
    for f in files:
        data = json.loads(f.read_text())
        assert mib_problems(data) == [] and len(data["edges"]) == 23  # 2 layers x 1 head, MLP nodes included
    main(["attribution", str(tiny_runs), "--out", str(tmp_path), "--pairs", "1"])
    (graph,) = [f for f in (tmp_path / "attribution").glob("*.json") if not f.name.startswith(".")]
    assert attribution_problems(json.loads(graph.read_text())) == []


def test_an_invalid_file_is_refused_and_not_written(planted, tmp_path, monkeypatch):
    """The writers check what they write against the reader's rules first: an edge score of NaN
    (a MIB reader refuses it) or an attribution graph without its nodes is one UsageError naming
    the file, and nothing lands at the path, not even a temp file."""
    from common.cli import UsageError
    from probes.report.outputs import exports

    p, result = planted
    good = exports.mib_json(result, result.methods[0].scores, p.spec.d_model)

    def with_nan(*args):
        data = json.loads(json.dumps(good))
        data["edges"][next(iter(data["edges"]))]["score"] = float("nan")
        return data

    monkeypatch.setattr(exports, "mib_json", with_nan)
    path = tmp_path / "mib" / "run.json"
    with pytest.raises(UsageError, match="not a valid MIB edge-score file: .*finite number"):
        exports.write_mib(path, result, result.methods[0].scores, p.spec.d_model)
    with pytest.raises(UsageError, match="breaks the viewer's structure"):
        exports.write_attribution(tmp_path / "graph.json", {"metadata": {}, "links": []})
    assert [f for f in tmp_path.rglob("*") if f.is_file()] == []


SHAPES = {  # the traced shapes the tests train (vocabulary 4, 4 input positions)
    "block-2x4": dict(n_layers=2, n_heads=4, d_model=32),
    "block-1x4": dict(n_layers=1, n_heads=4, d_model=32),
    "attn-only-2x2": dict(n_layers=2, n_heads=2, d_model=32, mlp=False),
    "rotary-2x2": dict(n_layers=2, n_heads=2, d_model=32, positions="rotary"),
    "sinusoidal-no-norm": dict(n_layers=2, n_heads=2, d_model=32, positions="sinusoidal", norm=None),
    "unscaled-no-positions": dict(n_layers=2, n_heads=2, d_model=32, positions="none", scale_scores=False),
    "three-layers": dict(n_layers=3, n_heads=2, d_model=16),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_traced_shape_exports_files_its_readers_accept(shape):
    """MIB files (oracle, EAP) and the attribution graph of a model of each shape pass the readers'
    rules, so the check each writer runs never refuses a shape toylens traces (block-2 once did)."""
    from models import ModelSpec, build_model
    from probes.circuits.named import edge_circuit
    from probes.report.outputs.exports import attribution_graph
    from tests.conftest import hand_batch

    spec = ModelSpec(n_ctx=4, d_vocab=4, **SHAPES[shape])
    model = build_model(spec, seed=0)
    batch = hand_batch(8)
    result = edge_circuit(model, batch, graph_of(spec), ig_steps=2, acdc_threshold=None)
    for method in result.methods[:2]:
        data = json.loads(json.dumps(mib_json(result, method.scores, spec.d_model)))
        assert mib_problems(data) == [], (shape, method.scores.method)
    words = [f"t{i}" for i in range(spec.d_vocab)]
    graph = json.loads(json.dumps(attribution_graph(model, one_prompt(batch), spec, words, shape, "toylens")))
    assert attribution_problems(graph) == [], shape
