"""The variants the bridge cannot express (no attention, no residual, sinusoidal and ALiBi
positions, post-norm): each does what its name says on a known answer, trains through the hook-free forward
as it runs through the bridge, and comes back identical from a checkpoint."""

import json

import pytest
import torch

from models import ModelSpec, UsageError, build_model
from models.checkpoint import load_checkpoint, save_checkpoint
from models.spec import NormPlace
from models.variants import alibi_slopes, sinusoid_table

VOCAB = 13


def spec(**fields) -> ModelSpec:
    return ModelSpec(**{"d_model": 16, "n_heads": 2, "n_ctx": 12, "d_vocab": VOCAB, **fields})


NEW_VARIANTS = {
    "no attention": dict(attention="none", positions="none", mlp=False, norm=None),
    "uniform average replacing the token": dict(attention="uniform", residual=False, mlp=False, norm=None),
    "sinusoidal": dict(positions="sinusoidal"),
    "alibi, 2 layers, unscaled": dict(positions="alibi", n_layers=2, scale_scores=False),
    "alibi, no residual, MLP": dict(positions="alibi", residual=False),
    "post-norm, 2 layers": dict(norm_place="post", n_layers=2),
    "post-norm, attention only": dict(norm_place="post", mlp=False),
}


def tokens(n=4, length=10, seed=0):
    return torch.randint(VOCAB, (n, length), generator=torch.Generator().manual_seed(seed))


def test_no_attention_logits_at_t_depend_only_on_token_t():
    model = build_model(spec(attention="none", positions="none"), seed=2)
    x = tokens()
    changed = tokens(seed=1)
    changed[:, 6] = x[:, 6]  # same token at position 6, every other token resampled
    assert (changed != x).any()
    torch.testing.assert_close(model(changed)[:, 6], model(x)[:, 6], rtol=0, atol=0)
    assert all(not p.requires_grad for p in model.blocks[0].attn.parameters())


def test_no_attention_writes_exactly_zero():
    _, cache = build_model(spec(attention="none"), seed=2).run_with_cache(tokens())
    assert cache["blocks.0.hook_attn_out"].abs().max() == 0


def test_residual_off_replaces_the_stream_with_the_attention_output():
    model = build_model(spec(attention="uniform", residual=False, mlp=False, norm=None), seed=2)
    _, cache = model.run_with_cache(tokens())
    torch.testing.assert_close(cache["blocks.0.hook_resid_post"], cache["blocks.0.hook_attn_out"], rtol=0, atol=0)
    # With the residual the token is added back: the two differ by exactly the block's input.
    _, kept = build_model(spec(attention="uniform", mlp=False, norm=None), seed=2).run_with_cache(tokens())
    torch.testing.assert_close(
        kept["blocks.0.hook_resid_post"],
        kept["blocks.0.hook_resid_pre"] + kept["blocks.0.hook_attn_out"],
        rtol=0,
        atol=1e-6,
    )


def test_post_norm_normalises_after_each_residual_add():
    model = build_model(spec(norm_place="post"), seed=2)
    _, cache = model.run_with_cache(tokens())
    block = model.blocks[0]

    def layer_norm(x, norm):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],), norm.weight, norm.bias, eps=1e-5)

    resid_pre = cache["blocks.0.hook_resid_pre"]
    torch.testing.assert_close(
        cache["blocks.0.attn.hook_in"], resid_pre, rtol=0, atol=0
    )  # attention reads the raw stream
    after_attention = layer_norm(resid_pre + cache["blocks.0.hook_attn_out"], block.ln1)
    torch.testing.assert_close(cache["blocks.0.mlp.hook_in"], after_attention, rtol=0, atol=1e-5)
    out = cache["blocks.0.hook_resid_post"]
    torch.testing.assert_close(
        out, layer_norm(after_attention + cache["blocks.0.hook_mlp_out"], block.ln2), rtol=0, atol=1e-5
    )
    # At initialisation (LayerNorm weight 1, bias 0) every position leaves the block normalised.
    torch.testing.assert_close(out.mean(-1), torch.zeros(out.shape[:-1]), rtol=0, atol=1e-5)
    torch.testing.assert_close(out.var(-1, unbiased=False), torch.ones(out.shape[:-1]), rtol=0, atol=1e-3)


def test_sinusoidal_positions_are_the_fixed_table():
    model = build_model(spec(positions="sinusoidal"))
    assert torch.equal(model.W_pos, sinusoid_table(12, 16))
    assert not model.pos_embed.weight.requires_grad
    table = sinusoid_table(12, 16)
    assert torch.equal(table[0], torch.tensor([0.0, 1.0] * 8))
    torch.testing.assert_close(table[:, 0], torch.sin(torch.arange(12.0)))
    torch.testing.assert_close(table[5, 15], torch.cos(torch.tensor(5 * 10000 ** (-14 / 16))))


@pytest.mark.parametrize("scale_scores", [True, False])
def test_alibi_scores_get_minus_slope_times_distance(scale_scores):
    model = build_model(spec(positions="alibi", n_heads=4, scale_scores=scale_scores), seed=1)
    with torch.no_grad():  # q = 0: the content scores vanish and only ALiBi's bias is left
        model.blocks[0].attn.q.weight.zero_()
        model.blocks[0].attn.q.bias.zero_()
    _, cache = model.run_with_cache(tokens(length=9))
    pattern = cache["blocks.0.attn.hook_pattern"][0]  # [head, query, key]
    distance = (torch.arange(9)[:, None] - torch.arange(9)[None, :]).float()
    slopes = torch.tensor([2**-2, 2**-4, 2**-6, 2**-8])
    scores = (-slopes[:, None, None] * distance).masked_fill(distance < 0, float("-inf"))
    torch.testing.assert_close(pattern, scores.softmax(-1), rtol=0, atol=1e-6)
    assert torch.equal(alibi_slopes(4), slopes)
    assert model.W_pos.abs().max() == 0 and not model.pos_embed.weight.requires_grad


@pytest.mark.parametrize("variant", NEW_VARIANTS)
def test_new_variants_train_identically_without_the_bridge(variant):
    from models.bridge import hook_free_forward

    model = build_model(spec(**NEW_VARIANTS[variant]), seed=3)
    forward = hook_free_forward(model)
    assert forward is not model
    x = tokens()
    assert torch.equal(forward(x), model(x))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    forward(x).logsumexp(-1).mean().backward()
    optimizer.step()
    assert torch.equal(forward(x), model(x))


@pytest.mark.parametrize("variant", NEW_VARIANTS)
def test_new_variants_come_back_identical_from_a_checkpoint(variant, tmp_path):
    model = build_model(spec(**NEW_VARIANTS[variant]), seed=3)
    with torch.no_grad():  # moved weights, as after training (frozen ones stay as built)
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.1 * torch.randn_like(p))
    save_checkpoint(
        tmp_path,
        model,
        {"spec": spec(**NEW_VARIANTS[variant]).to_dict(), "vocabulary": [str(i) for i in range(VOCAB)], "seed": 3},
    )
    loaded, _ = load_checkpoint(tmp_path)
    x = tokens(length=12)
    assert torch.equal(loaded(x), model(x))
    assert [p.requires_grad for p in loaded.parameters()] == [p.requires_grad for p in model.parameters()]


def test_a_config_written_before_the_new_fields_loads_with_the_old_behaviour(tmp_path):
    model = build_model(spec(), seed=3)
    old_spec = spec().to_dict()
    del old_spec["residual"], old_spec["norm_place"]
    save_checkpoint(tmp_path, model, {"spec": old_spec, "vocabulary": [str(i) for i in range(VOCAB)], "seed": 3})
    assert "residual" not in json.loads((tmp_path / "config.json").read_text())["spec"]
    loaded, _ = load_checkpoint(tmp_path)
    assert torch.equal(loaded(tokens()), model(tokens()))
    assert ModelSpec.from_dict(old_spec).residual is True
    assert ModelSpec.from_dict(old_spec).norm_place is NormPlace.PRE


@pytest.mark.parametrize(
    "bad",
    [
        dict(positions="alibi", attention="uniform"),
        dict(attention="none", residual=False),
        dict(positions="absolute"),
        dict(attention="linear"),
        dict(residual="no"),
        dict(norm_place="post", norm=None),
        dict(norm_place="post", residual=False),
        dict(norm_place="middle"),
    ],
)
def test_bad_variant_combinations_are_refused(bad):
    with pytest.raises(UsageError):
        spec(**bad).validate()
