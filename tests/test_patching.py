"""Activation patching equals transformer_lens.patching; path patching finds a hand-built composition."""

from __future__ import annotations

import pytest
import torch

from models import ModelSpec, build_model
from probes.patching import activation_patching, corrupt_inputs, scored_metric
from tasks.data import spread_subset
from tasks.data import task_dataset, to_batch
from tasks.evaluate import logits_at_scored
from tests.conftest import hand_batch


@pytest.fixture(scope="module")
def pairs(small_winograd):
    return spread_subset(to_batch(task_dataset(small_winograd, 0)["heldout"]), 12)


# patch_many resumes each forward at its first patched block, the last block's MLP at the scored
# positions alone (run whole in a post-norm model): checked against TL's full forwards on each layout.
LAYOUTS = {
    "attention-only": dict(mlp=False),
    "MLP and LayerNorm": dict(),
    "post-norm": dict(norm_place="post"),
    "attention replacing the stream": dict(norm=None, positions="alibi", residual=False),
    "rotary, unscaled, 3 layers": dict(n_layers=3, positions="rotary", scale_scores=False),
}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_activation_patching_equals_transformer_lens(pairs, small_winograd, layout):
    from transformer_lens import patching

    fields = dict(n_layers=2, d_model=16, n_heads=2, n_ctx=pairs.inputs.shape[1])
    spec = ModelSpec(**{**fields, **LAYOUTS[layout]}, d_vocab=len(small_winograd.vocabulary()))
    model = build_model(spec, seed=3)
    ours = activation_patching(model, pairs)

    def metric(logits):
        return scored_metric(logits_at_scored(logits, pairs), pairs).mean()

    _, clean_cache = model.run_with_cache(pairs.inputs)
    corrupt = corrupt_inputs(pairs)
    theirs = {
        "head_out": patching.get_act_patch_attn_head_out_by_pos(model, corrupt, clean_cache, metric),
        "head_all": patching.get_act_patch_attn_head_out_all_pos(model, corrupt, clean_cache, metric),
        "resid_pre": patching.get_act_patch_resid_pre(model, corrupt, clean_cache, metric),
    }
    for name, expected in theirs.items():
        torch.testing.assert_close(getattr(ours, name), expected.float(), rtol=0, atol=1e-5)
    assert ours.clean.metric != pytest.approx(ours.corrupt.metric)


def hand_built(component: str, logits_read_sender: bool = False):
    """2 layers x 1 head, no norm, no positions. Tokens are one-hot in dims 0-3; the layer-0 head
    copies the prefix average into dims 4-7; the layer-1 head reads dims 4-7 ONLY through its
    `component` projection. With `logits_read_sender` False the unembedding ignores dims 4-7, so the
    sender reaches the answer only through the receiver."""
    spec = ModelSpec(n_layers=2, d_model=8, n_heads=1, mlp=False, norm=None, positions="none", n_ctx=4, d_vocab=4)
    model = build_model(spec, seed=0)
    generator = torch.Generator().manual_seed(0)
    state = {name: torch.zeros_like(value) for name, value in model.state_dict().items()}
    token, sender = slice(0, 4), slice(4, 8)
    state["embed.weight"][:, token] = torch.eye(4) * 2
    state["blocks.0.attn.q.weight"][:, token] = torch.randn(8, 4, generator=generator)
    state["blocks.0.attn.k.weight"][:, token] = torch.randn(8, 4, generator=generator)
    state["blocks.0.attn.v.weight"][:4, token] = torch.eye(4)
    state["blocks.0.attn.o.weight"][sender, :4] = torch.eye(4)
    for name in ("q", "k", "v"):
        reads = sender if name == component else token
        state[f"blocks.1.attn.{name}.weight"][:, reads] = torch.randn(8, 4, generator=generator)
    state["blocks.1.attn.o.weight"][token] = torch.randn(4, 8, generator=generator)
    state["unembed.weight"][:, token] = torch.randn(4, 4, generator=generator)
    if logits_read_sender:
        state["unembed.weight"][:, sender] = torch.randn(4, 4, generator=generator)
    model.load_state_dict(state)
    return model.eval()


@pytest.mark.parametrize("component", ["q", "k", "v"])
def test_path_patching_finds_the_hand_built_composition(component):
    from probes.circuits.edge_hooks import receiver_input
    from probes.circuits.path_patching import path_patch, path_sweep

    model, batch = hand_built(component), hand_batch()
    _, cache = model.run_with_cache(batch.inputs)
    for name in ("q", "k", "v"):  # the receiver's input is recomputed exactly as the model does
        torch.testing.assert_close(
            receiver_input(model, 1, name, cache["blocks.1.hook_resid_pre"], [0]),
            cache[f"blocks.1.attn.hook_{name}"],
            rtol=0,
            atol=1e-5,
        )
    results = {p.component: p for p in path_sweep(model, batch)}
    assert abs(results[component].recovered) > 0.05
    for other in set("qkv") - {component}:
        assert results[other].recovered == pytest.approx(0.0, abs=1e-5)
        assert results[other].attention_moved == pytest.approx(0.0, abs=1e-6)
    if component != "v":
        assert results[component].attention_moved > 1e-3
    # The sender reaches the logits only through the receiver's `component` input, so patching that
    # path alone must equal restoring the sender's whole output (both are exact interventions).
    from probes.patching import patch_many

    whole = patch_many(model, batch, "z", [(0, None, 0)])[0]
    assert path_patch(model, batch, "L0H0", "L1H0", component).metric == pytest.approx(whole.metric, abs=1e-5)
    # Position 0 is identical in clean and corrupt: patching there moves nothing.
    assert path_patch(model, batch, "L0H0", "L1H0", component, positions=[0]).recovered == pytest.approx(0, abs=1e-6)


@pytest.mark.parametrize("component", ["q", "k", "v"])
def test_composition_scores_name_the_hand_built_kind(component):
    from probes.composition import composition_scores

    result = composition_scores(hand_built(component), baseline_draws=2)
    scores = {kind: result.score(kind, (0, 0), (1, 0)) for kind in "QKV"}
    assert scores[component.upper()] > 0.1
    assert all(scores[k] == pytest.approx(0, abs=1e-6) for k in "QKV" if k != component.upper())
    assert all(0 < result.baseline_mean[k] < 1 for k in "QKV")
