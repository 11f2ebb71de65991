"""Tracr ground truth from the stored fixtures (no jax): the converted models compute their
programs, the true edges read off the weights carry the whole model, and every method runs under
every ablation. With the `[tracr]` extra installed, a program is recompiled and compared."""

from __future__ import annotations

import re

import pytest
import torch

from probes.circuits.truth import tracr, zero_trace


@pytest.fixture(scope="module")
def programs():
    out = {}
    for name in ("reverse", "sort", "hist", "frac_prevs"):
        compiled = tracr.load(name)
        out[name] = (compiled, tracr.bridge(compiled))
    return out


def decoded(compiled, model, values):
    tokens = torch.tensor([[compiled.input_map["BOS"]] + [compiled.input_map[str(v)] for v in values]])
    labels = {index: value for value, index in compiled.output_map.items()}
    return [labels[i] for i in tracr.outputs(model, tokens, compiled)[0, 1:].tolist()]


def test_the_converted_models_compute_their_programs(programs):
    assert decoded(*programs["reverse"], "abcb") == ["b", "c", "b", "a"]
    assert decoded(*programs["sort"], [4, 1, 6, 2]) == ["1", "2", "4", "6"]
    assert decoded(*programs["hist"], "abba") == ["2", "2", "2", "2"]
    compiled, model = programs["frac_prevs"]
    tokens = torch.tensor([[compiled.input_map[v] for v in ("BOS", "x", "y", "x", "x")]])
    assert tracr.outputs(model, tokens, compiled)[0, 1:].tolist() == pytest.approx([1.0, 0.5, 2 / 3, 0.75], abs=1e-4)


@pytest.mark.parametrize("name", list(tracr.PROGRAMS))
def test_the_true_edges_alone_are_the_full_model_under_every_ablation(name):
    """Every edge left out of the true set carries nothing its receiver reads, and an inert edge
    nothing an output uses: keeping only the true edges, or only the used ones the fixture records,
    reproduces the full model whatever the others are given; the recorded read edges are the ones
    read off the weights; the true set is a strict, non-empty part of the graph."""
    from probes.circuits.ablations import EDGE_ABLATIONS, ablated_runs
    from probes.circuits.oracle import circuit_outcomes

    compiled = tracr.load(name)
    model, graph = tracr.bridge(compiled), tracr.shape_graph(compiled)
    truth, used = tracr.true_edges(model, compiled, graph), tracr.recorded_edges(compiled, graph, "used")
    assert tracr.recorded_edges(compiled, graph, "read") == truth
    assert 0 < len(used) <= len(truth) < len(graph.edges) and used <= truth
    batch = tracr.pairs(model, compiled, 16)
    assert len(batch.positions) > 0
    for ablation in EDGE_ABLATIONS:
        runs = ablated_runs(model, batch, graph, ablation)
        for kept in circuit_outcomes(model, batch, graph, [truth, used], runs):
            assert kept.metric == pytest.approx(runs.base.outcome.metric, abs=1e-3), ablation


def test_reverse_true_edges_follow_the_program(programs):
    from models.graph import Edge, Embed, Head, Input, Logits

    compiled, model = programs["reverse"]
    truth = tracr.true_edges(model, compiled, tracr.shape_graph(compiled))
    # the last layer's head copies the token at the opposite position to the output
    assert Edge(Head(3, 0), Input(Logits())) in truth and Edge(Embed(), Input(Head(3, 0), "v")) in truth
    assert not any(e.sender == Head(1, 0) for e in truth)  # an empty attention layer writes nothing


def test_reverse_used_edges_are_acdcs_reference_circuit(programs):
    """Three of reverse's 13 weight reads are inert (the selector-width head scores every key alike
    at a scored query; the last head's BOS default never fires); the other 10 are ACDC's reference
    circuit, two of them (the length) moving nothing at the full length but all of it on shorter
    inputs, which the inert test must try."""
    compiled, model = programs["reverse"]
    graph = tracr.shape_graph(compiled)
    truth = tracr.true_edges(model, compiled, graph)
    assert len(truth) == 13
    assert {str(e) for e in tracr.inert_edges(model, compiled, graph, truth)} == {
        "embed -> L0H0.q",
        "embed -> L0H0.k",
        "embed -> L3H0.q",
    }
    assert {str(e) for e in tracr.used_edges(model, compiled, graph)} == set(tracr.ACDC_REVERSE)


def test_the_trace_says_why_zero_ablation_misses_reverses_length(programs):
    compiled, model = programs["reverse"]
    traces = {str(t.edge): t for t in zero_trace.trace_zero_edges(model, compiled, tracr.shape_graph(compiled), 16)}
    assert set(traces) == {"embed -> L0H0.q", "embed -> L0H0.k", "embed -> L0H0.v", "L0H0 -> MLP0", "embed -> L3H0.q"}
    width = traces["L0H0 -> MLP0"]
    # the selector width 1/(length + 1): the same on every full-length input, 1/4 on 3 tokens
    assert width.write == pytest.approx((1 / 6, 0.0), abs=1e-6) and width.write_acdc[0] == pytest.approx(1 / 4)
    assert width.change == 0.0 and width.effect == pytest.approx(0.0, abs=1e-6) and width.effect_acdc > 0.5
    query = traces["embed -> L0H0.q"]
    assert query.observed == "attention pattern" and query.change == 0.0 and query.change_bos > 0.5 and query.inert


def test_every_method_runs_under_every_ablation_on_hist():
    from probes.circuits.ablations import EDGE_ABLATIONS

    (row_cf, row_mean, row_zero) = tracr.tracr_table(("hist",), n=8)
    assert row_zero.read_edges == row_zero.used_edges == 6 and row_zero.oracle_read == row_zero.auroc["oracle"]
    assert [r.ablation for r in (row_cf, row_mean, row_zero)] == list(EDGE_ABLATIONS)
    assert len(row_zero.auroc) == 6
    assert all(0.0 <= v <= 1.0 for v in row_zero.auroc.values())
    # zero ablation knocks out what every input shares (BOS, "one"), so the exact methods see all of hist
    assert row_zero.auroc["oracle"] == 1.0


def test_a_missing_fixture_is_a_usage_error(tmp_path):
    from common.cli import UsageError

    with pytest.raises(UsageError, match="make_tracr_fixtures"):
        tracr.load("reverse", tmp_path)
    (tmp_path / "reverse.json").write_text("{not json")
    (tmp_path / "reverse.safetensors").write_bytes(b"")
    with pytest.raises(UsageError):
        tracr.load("reverse", tmp_path)


def without_ids(labels) -> list[str]:
    """RASP numbers every expression from a process-wide counter (`frac_prevs_7` after other
    programs, `frac_prevs_1` in a fresh process): the labels are equal up to those numbers."""
    return [re.sub(r"_\d+(?=[:_]|$)", "", label) for label in labels]


def test_recompiling_gives_the_stored_fixture():
    pytest.importorskip("tracr", reason="the [tracr] extra (tracr-pypi, jax, dm-haiku) is not installed")
    fresh, stored = tracr.compile_program(tracr.PROGRAMS["frac_prevs"]), tracr.load("frac_prevs")
    assert fresh.config == stored.config
    assert without_ids(fresh.residual_labels) == without_ids(stored.residual_labels)
    assert fresh.input_map == stored.input_map and fresh.output_map == stored.output_map
    assert set(fresh.state) == set(stored.state)
    for name, value in fresh.state.items():
        assert torch.equal(value, stored.state[name]), name
