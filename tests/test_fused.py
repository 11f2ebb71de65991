"""Training's fused attention (`models.fused`): per variant, the same function as the bridge within
float tolerance (logits and gradients; the differences are printed, `pytest -s` shows them); the
bridge itself untouched; anything the whitelist does not know trains through the native attention,
with the reason."""

from __future__ import annotations

import pytest
import torch
from transformer_lens.model_bridge.sources.native.model import NativeAttention, NativeBlock

from models import ModelSpec, build_model
from models.bridge import hook_free_forward, native, native_attention
from models.fused import FusedAttention, attention_at, model_refusal, training_forward
from models.resume import forward_from

# float32 rounding of a fused kernel that sums in another order: logits of these tiny models differ
# by ~1e-6 (printed); a wrong scale, mask or bias moves them by ~1e-1.
ATOL = 2e-5
VARIANTS = {
    "softmax, learned positions": dict(),
    "uniform attention": dict(attention="uniform"),
    "no score scaling": dict(scale_scores=False),
    "ALiBi": dict(positions="alibi"),
    "rotary": dict(positions="rotary"),
    "no attention": dict(attention="none"),
    "attention-only, no norm, no residual": dict(mlp=False, norm=None, residual=False),
}
VOCAB, CONTEXT = 13, 11


def model_of(**fields):
    """A model with moved weights, as after training (at initialisation scores are near 0, where a
    wrong scale would hardly show); frozen ones stay as built."""
    model = build_model(ModelSpec(n_layers=2, d_model=16, n_heads=2, n_ctx=CONTEXT, d_vocab=VOCAB, **fields), seed=3)
    generator = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.3 * torch.randn(p.shape, generator=generator))
    return model


def tokens(batch: int = 6) -> torch.Tensor:
    return torch.randint(VOCAB, (batch, CONTEXT), generator=torch.Generator().manual_seed(0))


def gradients(forward, model, x) -> dict:
    model.zero_grad(set_to_none=True)
    forward(x).log_softmax(-1)[..., 0].mean().backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.requires_grad}


@pytest.mark.parametrize("variant", VARIANTS)
def test_fused_attention_computes_the_bridge_s_function(variant):
    model = model_of(**VARIANTS[variant])
    forward = training_forward(model)
    assert all(type(block.attn) is FusedAttention for block in forward.layers)
    assert all(type(native_attention(block)) is NativeAttention for block in model.blocks)  # the bridge's own
    assert {id(p) for p in forward.parameters()} == {id(p) for p in model.parameters()}
    x = tokens()
    with torch.no_grad():
        logits_diff = (forward(x) - model(x)).abs().max().item()
    fused, exact = gradients(forward, model, x), gradients(hook_free_forward(model), model, x)
    grad_diff = max((fused[name] - exact[name]).abs().max().item() for name in exact)
    grad_scale = max(exact[name].abs().max().item() for name in exact)
    print(
        f"{variant}: max |logit difference| {logits_diff:.1e}, max |gradient difference| {grad_diff:.1e} "
        f"(largest gradient {grad_scale:.1e})"
    )
    assert logits_diff <= ATOL
    assert grad_diff <= ATOL * max(1.0, grad_scale)


@pytest.mark.parametrize("variant", VARIANTS)
def test_attention_at_a_few_positions_is_the_full_attention_there(variant):
    # What a resumed forward that scores a few positions runs (models.resume): queries there alone.
    model = model_of(**VARIANTS[variant])
    block = hook_free_forward(model).layers[1]
    hidden = block.ln1(torch.randn(6, CONTEXT, 16, generator=torch.Generator().manual_seed(1)))
    at = (torch.tensor([0, 2, 2, 5]), torch.tensor([0, 3, CONTEXT - 1, 7]))
    with torch.no_grad():
        full = block.attn(hidden)[0][at]
        difference = (attention_at(block.attn, hidden, at) - full).abs().max().item()
        _, cache = model.run_with_cache(tokens())
        resumed = forward_from(model, cache["blocks.1.hook_resid_pre"], 1, at=at)
        logits_difference = (resumed - model(tokens())[at]).abs().max().item()
    print(
        f"{variant}: max |attention difference| {difference:.1e} (largest {full.abs().max().item():.1e}), "
        f"max |resumed logit difference| {logits_difference:.1e}"
    )
    assert difference <= ATOL * max(1.0, full.abs().max().item())
    assert logits_difference <= ATOL


def test_the_path_does_not_depend_on_whether_the_bridge_ran_before():
    """A bridge forward wires the blocks' own capture pre-hooks; they are not a user's hooks."""
    model = model_of()
    model(tokens())
    assert model_refusal(model) is None
    assert type(training_forward(model).layers[0].attn) is FusedAttention


class UncheckedBlock(NativeBlock):
    """Stands for a block class added after the whitelist (e.g. another norm placement)."""


def test_an_unknown_block_trains_through_the_native_attention_with_the_reason():
    model = model_of()
    native(model.blocks[1]).__class__ = UncheckedBlock
    assert model_refusal(model) == "block 1: block class UncheckedBlock is not one fused attention was checked against"
    with pytest.warns(UserWarning, match="training without fused attention: block 1: block class UncheckedBlock"):
        forward = training_forward(model)
    assert not any(type(block.attn) is FusedAttention for block in forward.layers)
    x = tokens()
    assert torch.equal(forward(x), model(x))


def test_a_soft_capped_attention_and_a_hooked_model_fall_back():
    model = model_of()
    native_attention(model.blocks[0]).attn_scores_soft_cap = 50.0
    assert model_refusal(model) == "block 0: attention scores are soft-capped"
    hooked = model_of()
    hooked.add_hook("blocks.0.attn.hook_pattern", lambda pattern, hook: pattern, is_permanent=True)
    assert model_refusal(hooked) == "the model has hooks attached, so it trains through the bridge"
    with pytest.warns(UserWarning, match="hooks attached"):
        assert training_forward(hooked) is hooked


def test_a_padding_mask_or_pattern_edit_takes_the_native_path_exactly():
    model = model_of()
    attention = training_forward(model).layers[0].attn
    x = torch.randn(3, CONTEXT, 16, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, CONTEXT, dtype=torch.long)
    mask[0, :4] = 0
    halve = lambda pattern: pattern / 2  # noqa: E731
    native_module = hook_free_forward(model).layers[0].attn
    for options in (dict(attention_mask=mask), dict(pattern_fn=halve)):
        ours, _ = attention(x, **options)
        theirs, _ = native_module(x, **options)
        assert torch.equal(ours, theirs)


def test_training_runs_fused_and_a_resumed_run_ends_bitwise_where_a_straight_one_does(
    small_winograd, tmp_path, monkeypatch
):
    import tasks.training.loop as training
    from tasks.data import task_dataset, to_batch
    from tasks.training.resume import STATE
    from tasks.settings import TrainSettings

    batches = {name: to_batch(split) for name, split in task_dataset(small_winograd, 0).items()}
    spec = ModelSpec(
        n_layers=2,
        d_model=16,
        n_heads=2,
        n_ctx=batches["train"].inputs.shape[1],
        d_vocab=len(small_winograd.vocabulary()),
        positions="rotary",
    )
    calls, real_forward = [], FusedAttention.forward
    monkeypatch.setattr(FusedAttention, "forward", lambda self, *a, **k: calls.append(1) or real_forward(self, *a, **k))

    def run(folder, max_steps, resume=False):
        model = build_model(spec, seed=0)
        training.train(
            model,
            batches["train"],
            batches["validation"],
            TrainSettings(max_steps=max_steps, batch_size=16, eval_every=10),
            seed=0,
            progress=False,
            state_path=tmp_path / folder / STATE,
            checkpoint_every=10,
            resume=resume,
        )
        return model

    straight = run("a", 20)
    assert calls, "training did not run FusedAttention"
    run("b", 10)
    resumed = run("b", 20, resume=True)
    for name, tensor in straight.state_dict().items():
        assert torch.equal(tensor, resumed.state_dict()[name]), name
