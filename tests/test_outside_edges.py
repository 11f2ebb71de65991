"""Edges of outside models (probes.circuits.oracle on GPT-2, GPT-NeoX and Llama bridges): the exact
oracle's effect of one edge equals a patch written here with plain hooks on a whole forward; patching
every edge into an input equals giving that input its counterfactual value (so the graph has every
edge a block reads and none it does not: GPT-NeoX's parallel MLP reads no head of its own block,
Llama's key and value inputs are per group); EAP and EAP-IG rank the edges as the oracle does; the
joint search and position-aware edges run. Tiny random checkpoints built here (tests/hf_folders.py)."""

from __future__ import annotations

import pytest

from common.cli import UsageError
from tests.hf_folders import FAMILIES, build_folder


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    from models.hf_load import load_folder
    from tasks.ioi import IOITask
    from tasks.templates import heldout_batch

    root, out = tmp_path_factory.mktemp("hf"), {}
    for family in FAMILIES:
        model = load_folder(build_folder(root / family, family, seed=1))
        out[family] = (model, heldout_batch(IOITask(), 0, model.tokenizer, 6))
    return out


def hooked_edge_effect(model, batch, edge) -> float:
    """One edge patched by hand: the clean forward, with the receiver's input recomputed from the clean
    residual it reads plus (the sender's counterfactual write - its clean write)."""
    import torch

    from models.bridge import native
    from models.graph import MLP, Embed, Head, Logits
    from probes.patching import corrupt_inputs, outcome, replica_scored

    def write(cache, sender):
        if isinstance(sender, Embed):
            return cache["blocks.0.hook_resid_pre"]
        if isinstance(sender, Head):
            z = cache[f"blocks.{sender.layer}.attn.hook_z"][:, :, sender.head]
            return z @ model.W_O[sender.layer, sender.head]
        return cache[f"blocks.{sender.layer}.hook_mlp_out"]

    with torch.no_grad():
        clean_logits, clean = model.run_with_cache(batch.inputs)
        _, other = model.run_with_cache(corrupt_inputs(batch))
        delta = write(other, edge.sender) - write(clean, edge.sender)
        node, port = edge.receiver.node, edge.receiver.port
        if isinstance(node, Logits):
            hooks = [("unembed.hook_in", lambda act, hook: native(model.ln_final)(clean["ln_final.hook_in"] + delta))]
        elif isinstance(node, MLP):
            parallel = getattr(model.cfg, "parallel_attn_mlp", False)
            read = clean[f"blocks.{node.layer}.hook_resid_{'pre' if parallel else 'mid'}"]
            norm = native(model.blocks[node.layer].ln2)
            hooks = [(f"blocks.{node.layer}.mlp.hook_in", lambda act, hook: norm(read + delta))]
        else:
            block, d_head = model.blocks[node.layer], model.cfg.d_head
            value = native(getattr(block.attn, port))(
                native(block.ln1)(clean[f"blocks.{node.layer}.hook_resid_pre"] + delta)
            )
            value = value.view(*value.shape[:2], -1, d_head)[:, :, node.head]

            def head_input(act, hook):
                act = act.clone()
                act[:, :, node.head] = value
                return act

            hooks = [(f"blocks.{node.layer}.attn.hook_{port}", head_input)]
        patched = model.run_with_hooks(batch.inputs, fwd_hooks=hooks)
    metric = outcome(replica_scored(patched, batch), batch)[0].metric
    return metric - outcome(replica_scored(clean_logits, batch), batch)[0].metric


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_edge_oracle_equals_hooked_patching(loaded, family):
    from probes.circuits.oracle import edge_effects, model_graph

    model, batch = loaded[family][0].bridge, loaded[family][1]
    graph = model_graph(model)
    effects = edge_effects(model, batch, graph)
    picked = {}  # one edge per (sender kind, receiver port): every kind of patch the oracle makes
    for i, edge in enumerate(graph.edges):
        picked.setdefault((type(edge.sender).__name__, edge.receiver.port, type(edge.receiver.node).__name__), i)
    assert len(picked) >= 12
    scale = float(effects.effect.abs().max())
    for i in picked.values():
        by_hand = hooked_edge_effect(model, batch, graph.edges[i])
        assert abs(float(effects.effect[i]) - by_hand) <= 1e-4 * scale, graph.edges[i]


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_every_edge_into_an_input_is_that_input_patched(loaded, family):
    """The graph's edges into an input carry everything it reads: patched together they give it its
    counterfactual value (a missing edge, or an extra one such as a parallel block's head -> MLP,
    fails this)."""
    import torch

    from models.graph import MLP, Head
    from probes.circuits.oracle import model_graph, patched_outcomes, record_runs
    from probes.patching import corrupt_inputs, run_outcome

    model, batch = loaded[family][0].bridge, loaded[family][1]
    graph = model_graph(model)
    runs = record_runs(model, batch, graph)
    with torch.no_grad():
        _, other = model.run_with_cache(corrupt_inputs(batch))
    inputs = [i for i in graph.inputs if isinstance(i.node, (Head, MLP)) and i.node.layer == 1]
    together = patched_outcomes(model, batch, graph, [frozenset(graph.into(i)) for i in inputs], runs)
    for receiver, patched in zip(inputs, together):
        node = receiver.node
        if isinstance(node, Head):
            name, value = f"blocks.1.attn.hook_{receiver.port}", other[f"blocks.1.attn.hook_{receiver.port}"]

            def hook(act, hook, value=value, head=node.head):
                act = act.clone()
                act[:, :, head] = value[:, :, head]
                return act
        else:
            name, value = "blocks.1.mlp.hook_in", other["blocks.1.mlp.hook_in"]

            def hook(act, hook, value=value, head=None):
                return value

        node_patched = run_outcome(model, batch, batch.inputs, [(name, hook)])
        scale = max(1.0, abs(node_patched.metric))
        assert abs(patched.metric - node_patched.metric) <= 1e-4 * scale, receiver


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_eap_and_eap_ig_rank_edges_as_the_oracle_does(loaded, family):
    from probes.circuits.methods.attribution import eap, eap_ig
    from probes.circuits.methods.scores import spearman
    from probes.circuits.oracle import edge_effects, model_graph, record_runs

    model, batch = loaded[family][0].bridge, loaded[family][1]
    graph = model_graph(model)
    runs = record_runs(model, batch, graph)
    exact = edge_effects(model, batch, graph, runs=runs).effect
    for scores in (eap(model, batch, graph, runs=runs), eap_ig(model, batch, graph, 3, runs=runs)):
        agreement = spearman(scores.score, exact)
        print(f"{family} {scores.method}: Spearman vs the oracle {agreement:.3f} over {len(graph.edges)} edges")
        assert agreement > 0.8


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_trace_over_budget_verifies_and_searches(loaded, family):
    from probes.circuits.oracle import edge_effects, model_graph
    from probes.circuits.scaled import About, trace

    model, batch = loaded[family][0].bridge, loaded[family][1]
    exact = dict(
        zip(map(str, model_graph(model).edges), edge_effects(model, batch, model_graph(model)).effect.tolist())
    )
    result = trace(model, batch, About(family, family), edge_budget=10, verify=12, ranking="eap-ig", ig_steps=2)
    ranked = result.ranked
    assert ranked.method == "EAP-IG (2 steps) + oracle verification" and len(ranked.verified) == 12
    grouped = family == "llama"  # its key / value inputs are named by group
    assert any("KV" in name for name in ranked.names) == grouped
    for name, value in ranked.verified.items():
        if "KV" not in name:
            assert abs(value - exact[name]) <= 1e-5 * max(1.0, abs(value))
    searched = result.searched
    assert searched is not None and searched.allowed == 12 and set(searched.edges) <= set(ranked.names)
    assert searched.sets > 0 and result.curve[0] == (0, 0.0) and result.curve[-1][1] == pytest.approx(1.0)


@pytest.mark.slow
def test_position_aware_edges_need_one_layout(loaded):
    from probes.circuits.scaled import About, trace
    from tasks.ioi import IOIParams, IOITask
    from tasks.templates import heldout_batch

    model = loaded["llama"][0]
    with pytest.raises(UsageError, match="position-aware edges need prompts of one layout"):
        trace(model.bridge, heldout_batch(IOITask(), 0, model.tokenizer, 40), About("l", "llama"), positional=True)
    batch = heldout_batch(IOITask(IOIParams(templates=1)), 0, model.tokenizer, 4)
    result = trace(model.bridge, batch, About("l", "llama"), edge_budget=100, verify=8, positional=True)
    width = int(batch.positions[0]) + 1
    assert all(" @p" in name for name in result.ranked.names)
    assert len(result.ranked.names) == width * len(trace_graph_edges(model.bridge))


def trace_graph_edges(model):
    from probes.circuits.oracle import model_graph

    return model_graph(model).edges
