"""The exact edge oracle against TransformerLens's direct path patching, and against whole-node
patches it must add up to."""

from __future__ import annotations


import pytest
import torch

from models import ModelSpec, build_model
from models.graph import MLP, Embed, Head, Input, Logits, graph_of
from tests.conftest import hand_batch

TWIN = ModelSpec(n_layers=2, d_model=16, n_heads=2, n_ctx=4, d_vocab=4)


@pytest.fixture(scope="module")
def twins():
    from models.gpt2_twin import gpt2_twin

    reference, native = gpt2_twin(TWIN)
    batch = hand_batch()
    with torch.no_grad():
        assert torch.allclose(reference(batch.inputs), native(batch.inputs), atol=1e-5)
    return reference, native, batch


def direct_path_inputs(reference, batch):
    """What TL's get_act_patch_direct_path* take: the corrupt tokens, both runs' caches, and our
    metric (the mean answer - foil logit) on its logits."""
    from probes.patching import corrupt_inputs, outcome, replica_scored

    corrupt = corrupt_inputs(batch)
    _, clean_cache = reference.run_with_cache(batch.inputs)
    _, corrupt_cache = reference.run_with_cache(corrupt)

    def metric(logits):
        return torch.tensor(outcome(replica_scored(logits, batch), batch)[0].metric)

    return corrupt, clean_cache, corrupt_cache, metric


@pytest.mark.parametrize("component", ["q", "k", "v"])
def test_every_head_to_head_edge_equals_transformer_lens_direct_path(twins, component):
    from transformer_lens.patching import get_act_patch_direct_path_all_sources

    from probes.circuits.oracle import Direction, edge_effects

    reference, native, batch = twins
    corrupt, clean_cache, corrupt_cache, metric = direct_path_inputs(reference, batch)
    theirs = get_act_patch_direct_path_all_sources(
        reference, corrupt, clean_cache, corrupt_cache, metric, component=component, verbose=False
    )
    effects = edge_effects(native, batch, graph_of(TWIN), direction=Direction.DENOISE)
    compared = [
        (
            theirs[e.sender.layer, e.sender.head, e.receiver.node.layer, e.receiver.node.head],
            effects.base.metric + float(v),
        )
        for e, v in zip(effects.edges, effects.effect)
        if isinstance(e.sender, Head) and e.receiver.port == component
    ]
    assert len(compared) == TWIN.n_heads**2
    difference = max(abs(float(t) - o) for t, o in compared)
    print(f"oracle vs get_act_patch_direct_path, {component}: {len(compared)} edges, max |diff| {difference:.2e}")
    assert difference < 1e-4
    assert max(abs(float(t) - effects.base.metric) for t, _ in compared) > 1e-2  # the edges do something


@pytest.mark.parametrize(
    "spec",
    [
        ModelSpec(n_layers=2, d_model=16, n_heads=2, n_ctx=4, d_vocab=4),
        ModelSpec(n_layers=2, d_model=16, n_heads=2, n_ctx=4, d_vocab=4, norm=None, positions="rotary"),
        ModelSpec(n_layers=2, d_model=16, n_heads=2, n_ctx=4, d_vocab=4, mlp=False),
    ],
)
def test_all_edges_out_of_a_sender_equal_patching_its_whole_output(spec):
    """A sender patched on every edge it has is its output patched (every reader sees the other
    run's write): an independent check of the MLP, logits and embedding edges TL does not cover."""
    from probes.circuits.oracle import Direction, Runs, circuit_outcomes, patched_outcomes, record_runs
    from probes.patching import corrupt_inputs, run_outcome

    model = build_model(spec, seed=3)
    model.load_state_dict({name: 3 * value for name, value in model.state_dict().items()})
    batch, graph = hand_batch(), graph_of(spec)
    runs: Runs = record_runs(model, batch, graph, Direction.NOISE)
    senders = [Embed(), Head(0, 1), Head(1, 0)] + ([MLP(0)] if spec.mlp else [])
    sets = [frozenset(e for e in graph.edges if e.sender == s) for s in senders]
    ours = [o.metric for o in patched_outcomes(model, batch, graph, sets, runs)]
    _, corrupt_cache = model.run_with_cache(corrupt_inputs(batch))

    def swap(name, head=None):
        def hook(act, hook):
            act = act.clone()
            if head is None:
                act[:] = corrupt_cache[name]
            else:
                act[:, :, head] = corrupt_cache[name][:, :, head]
            return act

        return [(name, hook)]

    hooks = [swap("blocks.0.hook_resid_pre"), swap("blocks.0.attn.hook_z", 1), swap("blocks.1.attn.hook_z", 0)]
    hooks += [swap("blocks.0.hook_mlp_out")] if spec.mlp else []
    theirs = [run_outcome(model, batch, batch.inputs, h).metric for h in hooks]
    assert ours == pytest.approx(theirs, abs=1e-4)
    assert len(set(round(t, 3) for t in theirs)) == len(theirs)
    empty, full = circuit_outcomes(model, batch, graph, [[], graph.edges], runs)
    assert empty.metric == pytest.approx(runs.other.outcome.metric, abs=1e-4)
    assert full.metric == pytest.approx(runs.base.outcome.metric, abs=1e-4)


def test_a_position_edge_patches_only_its_position():
    """Per-position edges of one sender -> input sum, position by position, to the whole edge
    when the receiver is the logits of a no-norm model (the metric is then linear in its input)."""
    from probes.circuits.oracle import edge_effects

    spec = ModelSpec(n_layers=1, d_model=16, n_heads=2, n_ctx=4, d_vocab=4, mlp=False, norm=None)
    model = build_model(spec, seed=1)
    batch = hand_batch()
    whole = edge_effects(model, batch, graph_of(spec))
    per = edge_effects(model, batch, graph_of(spec, positions=(0, 1, 2, 3)))
    target = (Head(0, 1), Input(Logits()))
    total = sum(float(v) for e, v in zip(per.edges, per.effect) if (e.sender, e.receiver) == target)
    only = [float(v) for e, v in zip(per.edges, per.effect) if (e.sender, e.receiver) == target]
    assert total == pytest.approx(
        float(whole.effect[[(e.sender, e.receiver) for e in whole.edges].index(target)]), abs=1e-5
    )
    assert only[3] != 0 and only[:3] == [0.0, 0.0, 0.0]  # the logits are read at position 3 only


def test_the_comparison_with_transformer_lens_catches_a_dropped_norm_or_input(twins, monkeypatch):
    """Mutations of the oracle the test above must catch: the receiver's LayerNorm not recomputed
    (its projection applied to the raw patched residual), and the v input never patched."""
    from transformer_lens.patching import get_act_patch_direct_path

    import probes.circuits.edge_hooks as hooks
    import probes.circuits.oracle as edges
    from models.bridge import native

    reference, native_model, batch = twins
    corrupt, clean_cache, corrupt_cache, metric = direct_path_inputs(reference, batch)

    def gap(component):
        theirs = get_act_patch_direct_path(
            reference, corrupt, clean_cache, corrupt_cache, metric, 0, 1, component=component, verbose=False
        )
        ours = edges.edge_effects(native_model, batch, graph_of(TWIN), direction=edges.Direction.DENOISE)
        return max(
            abs(float(theirs[1, e.receiver.node.head]) - (ours.base.metric + float(v)))
            for e, v in zip(ours.edges, ours.effect)
            if e.sender == Head(0, 1) and e.receiver.port == component
        )

    def unnormed(model, layer, component, residual, heads):
        out = native(getattr(model.blocks[layer].attn, component))(residual)
        return out.view(*out.shape[:2], model.cfg.n_heads, model.cfg.d_head)[:, :, heads]

    assert gap("k") < 1e-4
    with monkeypatch.context() as patch:
        patch.setattr(hooks, "receiver_input", unnormed)
        assert gap("k") > 1e-3
    original = hooks.EdgeHooks.patches
    with monkeypatch.context() as patch:
        patch.setattr(hooks.EdgeHooks, "patches", lambda self, r: None if r.port == "v" else original(self, r))
        assert gap("v") > 1e-3
