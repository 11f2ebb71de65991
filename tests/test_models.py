import pytest
import torch

from models import ModelSpec, UsageError, build_model
from models.checkpoint import load_checkpoint, save_checkpoint


def spec(**fields) -> ModelSpec:
    return ModelSpec(**{"d_model": 32, "n_heads": 2, "n_ctx": 12, "d_vocab": 20, **fields})


def test_uniform_attention_is_the_prefix_average():
    model = build_model(spec(attention="uniform", positions="none"))
    _, cache = model.run_with_cache(torch.randint(20, (3, 10)))
    pattern = cache["blocks.0.attn.hook_pattern"]
    expected = torch.tril(torch.ones(10, 10)) / torch.arange(1, 11)[:, None]
    assert torch.allclose(pattern, expected.expand_as(pattern), atol=1e-7)


def test_no_positions_zeroes_and_freezes_w_pos():
    model = build_model(spec(positions="none"))
    assert model.W_pos.abs().max() == 0
    assert not model.pos_embed.weight.requires_grad


def test_rotary_has_no_position_table():
    assert "pos_embed.weight" not in build_model(spec(positions="rotary")).state_dict()


@pytest.mark.parametrize("positions", ["learned", "rotary", "none"])
def test_a_long_context_run_loads_whatever_its_positions(tmp_path, positions):
    # The weights check compares the spec's parameter estimate with the file; counting a position
    # table for rotary (which has none) refused a plugin's own 2001-token rotary run as "another model".
    long = spec(d_model=16, n_heads=1, mlp=False, norm=None, positions=positions, n_ctx=2048)
    save_checkpoint(
        tmp_path, build_model(long), {"spec": long.to_dict(), "vocabulary": [str(i) for i in range(20)], "seed": 0}
    )
    loaded, _ = load_checkpoint(tmp_path)
    assert loaded.cfg.n_ctx == 2048


def test_unscaled_scores_divide_by_one():
    # The bridge's hook_attn_scores holds the softmax pattern, so compare log-pattern gaps:
    # without the division they are sqrt(d_head) times larger.
    scaled, unscaled = build_model(spec()), build_model(spec(scale_scores=False))
    tokens = torch.randint(20, (2, 8))
    _, a = scaled.run_with_cache(tokens)
    _, b = unscaled.run_with_cache(tokens)
    gaps = [cache["blocks.0.attn.hook_pattern"][0, 0, 5, :6].double().log().diff() for cache in (a, b)]
    assert torch.allclose(gaps[1], gaps[0] * (32 // 2) ** 0.5, rtol=1e-3)


@pytest.mark.parametrize(
    "bad", [dict(n_heads=3), dict(n_layers=0), dict(attention="linear"), dict(positions="absolute"), dict(d_vocab=0)]
)
def test_bad_specs_are_refused(bad):
    with pytest.raises(UsageError):
        spec(**bad).validate()


def test_checkpoint_round_trip_gives_identical_logits(tmp_path):
    model = build_model(spec(attention="uniform", positions="none", scale_scores=False), seed=3)
    save_checkpoint(
        tmp_path, model, {"spec": model_spec_dict(model), "vocabulary": [str(i) for i in range(20)], "seed": 3}
    )
    loaded, config = load_checkpoint(tmp_path)
    tokens = torch.randint(20, (4, 12))
    assert torch.equal(model(tokens), loaded(tokens))
    assert not loaded.pos_embed.weight.requires_grad
    assert config["seed"] == 3


def model_spec_dict(model) -> dict:
    return spec(attention="uniform", positions="none", scale_scores=False).to_dict()


def test_loading_refuses_mismatched_vocabulary(tmp_path):
    model = build_model(spec())
    save_checkpoint(tmp_path, model, {"spec": spec().to_dict(), "vocabulary": ["a", "b"]})
    with pytest.raises(UsageError, match="vocabulary has 2 tokens"):
        load_checkpoint(tmp_path)


def test_loading_refuses_truncated_weights(tmp_path):
    model = build_model(spec())
    save_checkpoint(tmp_path, model, {"spec": spec().to_dict(), "vocabulary": [str(i) for i in range(20)]})
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    with pytest.raises(UsageError, match="corrupt or truncated"):
        load_checkpoint(tmp_path)


def test_loading_refuses_pickles(tmp_path):
    (tmp_path / "model.pt").write_bytes(b"\x80\x04not really")
    with pytest.raises(UsageError, match="never unpickles"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize("fields", [dict(), dict(mlp=False, norm=None), dict(positions="rotary", scale_scores=False)])
def test_forward_resumed_at_any_block_equals_the_full_forward(fields):
    from models.resume import forward_from

    model = build_model(ModelSpec(n_layers=3, d_model=16, n_heads=2, n_ctx=7, d_vocab=9, **fields), seed=1)
    tokens = torch.randint(9, (4, 7), generator=torch.Generator().manual_seed(0))
    logits, cache = model.run_with_cache(tokens)
    for start in range(3):
        torch.testing.assert_close(
            forward_from(model, cache[f"blocks.{start}.hook_resid_pre"], start), logits, rtol=0, atol=1e-5
        )
    torch.testing.assert_close(forward_from(model, cache["blocks.2.hook_resid_post"], 3), logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("place", ["pre", "post"])
def test_a_hooked_forward_skips_only_the_norm_statistics_no_hook_reads(place):
    """models.bridge.lean_norm: with no hook on hook_scale / hook_normalized the bridge's norm returns
    the wrapped norm's output directly, bitwise what TL's own path returns; a hook on either still
    sees its value, and an edit there still changes the output."""
    from transformer_lens.model_bridge.generalized_components.normalization import NormalizationBridge

    model = build_model(spec(norm_place=place, n_layers=2), seed=1)
    tokens = torch.randint(20, (4, 10), generator=torch.Generator().manual_seed(0))
    observe = [("blocks.0.hook_resid_pre", lambda value, hook: None)]  # any hook: the bridge path runs
    lean = model.run_with_hooks(tokens, fwd_hooks=observe)
    norms = [m for m in model.modules() if isinstance(m, NormalizationBridge)]
    assert norms and all("_hf_autograd_forward_with_hooks" in vars(m) for m in norms)
    saved = {m: vars(m).pop("_hf_autograd_forward_with_hooks") for m in norms}  # TL's own method
    try:
        assert torch.equal(lean, model.run_with_hooks(tokens, fwd_hooks=observe))
    finally:
        for module, method in saved.items():
            vars(module)["_hf_autograd_forward_with_hooks"] = method
    _, cache = model.run_with_cache(tokens, names_filter=["blocks.1.ln1.hook_scale"])
    assert cache["blocks.1.ln1.hook_scale"].shape == (4, 10, 1)
    with pytest.warns(UserWarning):
        edited = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.ln1.hook_normalized", lambda v, hook: 2 * v)])
    assert not torch.allclose(edited, lean)
