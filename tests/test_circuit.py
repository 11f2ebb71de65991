"""Faithfulness, circuit search and the `python -m probes.circuit report` command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from models import ModelSpec, build_model
from models.components import Head
from probes.circuits.search import (
    HeadCircuits,
    all_heads,
    circuit_edges,
    every_position,
    faithfulness,
    head_graph,
    search_circuit,
)
from probes.patching import activation_patching, scored_metric
from tasks.data import spread_subset
from tasks.data import task_dataset, to_batch
from test_patching import hand_batch, hand_built


def small_model(small_winograd, **spec):
    data = task_dataset(small_winograd, 0)
    pairs, train = spread_subset(to_batch(data["heldout"]), 16), to_batch(data["train"])
    spec = ModelSpec(
        **{
            **dict(
                n_layers=2,
                d_model=16,
                n_heads=2,
                mlp=False,
                norm=None,
                n_ctx=pairs.inputs.shape[1],
                d_vocab=len(small_winograd.vocabulary()),
            ),
            **spec,
        }
    )
    return build_model(spec, seed=4), pairs, train


def test_faithfulness_of_everything_and_of_nothing(small_winograd):
    model, pairs, train = small_model(small_winograd)
    every = every_position(all_heads(model))
    assert faithfulness(model, pairs, every, train).recovered == pytest.approx(1.0, abs=1e-5)

    # Nothing kept: an attention-only, norm-free model then computes embeddings + mean head writes,
    # which the weights give directly (TL's definition: (ablated - corrupt) / (clean - corrupt)).
    result = faithfulness(model, pairs, {}, train)
    _, cache = model.run_with_cache(train.inputs)
    width = pairs.inputs.shape[1]
    residual = model.W_E[pairs.inputs] + model.W_pos[:width]
    for layer in range(2):
        mean = cache[f"blocks.{layer}.attn.hook_z"][:, :width].mean(0)
        residual = residual + torch.einsum("phd,hdm->pm", mean, model.W_O[layer]) + model.b_O[layer]
    logits = residual @ model.W_U + model.b_U
    ablated = scored_metric(logits[pairs.example_index, pairs.positions], pairs).mean().item()
    assert result.metric == pytest.approx(ablated, abs=1e-4)
    assert result.recovered == pytest.approx((ablated - result.corrupt) / (result.clean - result.corrupt), abs=1e-4)
    assert result.normalised == pytest.approx(0.0, abs=1e-6)  # the empty circuit is the null


def node_ablated_metric(model, pairs, reference, kept) -> float:
    """The metric with every head output outside `kept` replaced by its per-position mean z over
    `reference` (TL hooks on hook_z), computed without the oracle."""
    width = pairs.inputs.shape[1]
    valid = reference.real_positions()[:, :width].float()
    assert bool((valid.sum(0) > 0).all())
    _, cache = model.run_with_cache(reference.inputs)

    def hook(layer):
        mean = (cache[f"blocks.{layer}.attn.hook_z"][:, :width] * valid[:, :, None, None]).sum(0) / valid.sum(0)[
            :, None, None
        ]

        def ablate(z, hook):
            z = z.clone()
            for head in range(model.cfg.n_heads):
                positions = kept.get(Head(layer, head), ())
                for p in range(width):
                    if positions is not None and p not in positions:
                        z[:, p, head] = mean[p, head]
            return z

        return ablate

    hooks = [(f"blocks.{layer}.attn.hook_z", hook(layer)) for layer in range(model.cfg.n_layers)]
    with torch.no_grad():
        logits = model.run_with_hooks(pairs.inputs, fwd_hooks=hooks)
    return scored_metric(logits[pairs.example_index, pairs.positions], pairs).mean().item()


HEAD_CIRCUIT_WAYS = {
    "pre-norm, the oracle": (dict(), None, False),
    "pre-norm, z replaced": (dict(), True, True),
    "post-norm": (dict(norm_place="post"), None, True),
    "attention replacing the stream": (dict(residual=False), None, True),
}


@pytest.mark.parametrize("way", HEAD_CIRCUIT_WAYS)
def test_a_head_circuit_is_its_edges(small_winograd, way):
    """The oracle run on the head circuit's edges (every out-edge of a dropped head, and a pinned
    head's out-edges off its positions, given the mean write) equals mean-ablating those heads' z;
    where the stream is no sum of writes for the oracle to decompose (post-norm, attention replacing
    it), the heads' z is replaced in the forward itself, which must give the same numbers."""
    spec, by_z, expected = HEAD_CIRCUIT_WAYS[way]
    model, pairs, train = small_model(small_winograd, mlp=True, norm="LN", **spec)
    last = int(pairs.positions.max())
    circuits = [
        {},
        every_position(all_heads(model)),
        {Head(0, 1): None, Head(1, 0): None},  # a layer-1 head: without a residual, layer 1 alone reaches the logits
        {Head(0, 0): (last - 2, last), Head(1, 1): None},
        {Head(0, 1): (3,), Head(1, 0): (last,)},
    ]
    measure = HeadCircuits(model, pairs, train, by_z=by_z)
    assert measure.by_z is expected
    measured = measure(circuits)
    for kept, result in zip(circuits, measured):
        assert result.metric == pytest.approx(node_ablated_metric(model, pairs, train, kept), abs=1e-4), kept
    assert len({round(r.metric, 3) for r in measured}) == len(circuits)  # the circuits do differ


def test_batched_knockouts_equal_one_at_a_time(small_winograd):
    model, pairs, train = small_model(small_winograd, mlp=True, norm="LN")
    heads = all_heads(model)
    knockouts = [every_position(g for g in heads if g != h) for h in heads]
    measure = HeadCircuits(model, pairs, train)
    together = measure(knockouts)
    for kept, result in zip(knockouts, together):
        alone = measure([kept])[0]
        assert result.metric == pytest.approx(alone.metric, abs=1e-5) and result.accuracy == alone.accuracy


def test_a_pinned_head_keeps_its_out_edges_at_its_positions_only():
    model = hand_built("q")
    graph = head_graph(model, 4)
    kept = {Head(0, 0): (2,), Head(1, 0): None}
    edges = circuit_edges(graph, kept)
    assert {e.position for e in edges if e.sender == Head(0, 0)} == {2}
    assert {e.position for e in edges if e.sender == Head(1, 0)} == {0, 1, 2, 3}
    assert all(e in edges for e in graph.edges if not isinstance(e.sender, Head))


def test_search_keeps_both_heads_of_a_two_hop_circuit():
    model, batch = hand_built("v"), hand_batch(48)
    circuit = search_circuit(model, batch, batch, activation_patching(model, batch))
    assert circuit.heads == (Head(0, 0), Head(1, 0))
    assert circuit.faithfulness.recovered >= 0.9
    assert all(r.recovered < 0.9 and r.normalised < 0.9 for r in circuit.knockout.values())


def test_report_command_writes_markdown_json_and_figures(tiny_runs, capsys):
    from toylens.report import main

    main(["report", str(tiny_runs), "--verbose"])
    stdout = capsys.readouterr().out
    assert "attn-only-2x1 seed 0:" in stdout and "bag-of-words seed 0:" in stdout
    report = json.loads((tiny_runs / "report" / "report.json").read_text())
    runs = {r["model_name"]: r for r in report["runs"]}
    assert runs["bag-of-words"]["circuit"] is None
    traced = runs["attn-only-2x1"]
    assert traced["patching"]["head_out_recovered"] and traced["ablations"]["mean"]
    # Traced exactly when the model tells its pairs apart by the stated margin (measured here anew).
    from probes.report.parts import RunContext
    from tasks.training.runs import find_runs

    context = RunContext(next(r for r in find_runs(tiny_runs) if r.model_name == "attn-only-2x1"), None)
    patching = activation_patching(context.model, context.pairs)
    if patching.clean.metric - patching.corrupt.metric >= context.settings.min_gap:
        assert traced["circuit"]["nodes"]
    else:
        assert traced["circuit"] is None and "barely tells the pairs apart" in traced["note"]
    assert traced["summary"] in stdout  # --verbose: the sentences above the tables
    assert traced["summary"] in (tiny_runs / "report" / "report.md").read_text()  # and in the run's section
    # The edge part: multi-block softmax runs only, its circuit reaching the target it states.
    edges = {(r["model_name"], r["seed"]): r for r in report["edge_circuits"]}
    assert set(edges) == {("attn-only-2x1", 0)}
    found = edges["attn-only-2x1", 0]
    assert (
        found["graph"]["edges"] == 12
    )  # embed -> L0H0 q/k/v, L1H0 q/k/v, logits; L0H0 -> L1H0 q/k/v, logits; L1H0 -> logits
    # Every outcome is stated: not traced (the pairs barely differ), no circuit smaller than the graph, or one that
    # reaches its target.
    line = next(
        line for line in report["summary"] if line.startswith("attn-only-2x1 seed 0: ") and "edge circuit" in line
    )
    if "edge circuit not traced" in line:
        assert found["clean_metric"] - found["counterfactual_metric"] < report["settings"]["min_gap"]
        assert found["figure"] is None and "barely tells the pairs apart" in line
    elif found["circuit"] is None:
        assert (
            "no edge circuit smaller than the whole graph (12 edges)" in line
            and found["faithfulness"] < found["target"]
        )
    else:
        assert found["faithfulness"] >= found["target"] and len(found["circuit"]) < found["graph"]["edges"]
        assert f"edge circuit of {len(found['circuit'])} of 12 edges keeps" in line and found["figure"]
        # The certificate: that circuit on every sentence of 8-noun Winograd (28 pairs x 2 orders x 8 adjectives).
        (certificate,) = report["certificates"]
        assert certificate["size"] == certificate["checked"] == 448 and certificate["exhaustive"]
        said = next(s for s in report["summary"] if s.startswith("attn-only-2x1 seed 0: the edge circuit"))
        assert ("certified on all 448 inputs" in said) == (certificate["failing"] == 0)
        assert certificate["certified"] or f"fails on {certificate['failing']} of 448 inputs" in said
    markdown = (tiny_runs / "report" / "report.md").read_text()
    assert "figures/attn-only-2x1-seed0.png" in markdown
    assert (tiny_runs / "report" / "figures" / "attn-only-2x1-seed0.png").stat().st_size > 1000


def test_training_with_the_report_writes_what_the_report_command_writes(tiny_runs, small_winograd, tmp_path, capsys):
    from toylens.report import publish_report, report_command
    from toylens.family import train_family
    from tests.conftest import TINY_SPECS, tiny_plans

    # The runs are already trained with these settings: kept, and analysed all the same.
    measured = train_family(
        tiny_plans(small_winograd, tiny_runs, TINY_SPECS), progress=False, report_out=tmp_path / "together"
    )
    assert "kept" in capsys.readouterr().out and all(m is not None for m in measured)
    publish_report(measured, tmp_path / "together", task=small_winograd.name)
    report_command(tiny_runs, tmp_path / "apart")
    assert (tmp_path / "together" / "report.md").read_text() == (tmp_path / "apart" / "report.md").read_text()
    assert (tmp_path / "together" / "figures" / "attn-only-2x1-seed0.png").is_file()


def test_report_command_usage_errors(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "probes.circuit", "report", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "does not exist" in done.stderr
