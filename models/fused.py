"""Training's forward: the model's own TransformerLens modules without the bridge's wrappers
(`models.bridge.hook_free_forward`), with each attention's scores, causal mask, softmax and value
sum done by torch's fused `scaled_dot_product_attention`.

TL 4.3's `NativeAttention` materialises the scores, masks them, runs a separate softmax and masks
again; on CPU a training step ran at 0.86 of plain PyTorch's rate at 61 tokens and 0.32 at 256,
and 0.95-0.99 fused (benchmarks/train_speed.py, docs/performance.md). TL has no fused path, so `FusedAttention` is written here: a subclass
of `NativeAttention` whose forward is the native one with those four steps replaced by the fused
call, installed (by swapping the class) on the shallow copies `hook_free_forward` makes, so the
bridge, its module tree and the parameter objects are untouched and every probe still runs the
bridge. The projections, the rotary slot (rotary tables, or `models.variants.AlibiBias`), the
spec's score divisor (`scale`) and the frozen weights of the uniform and "none" variants are the
native module's own, so the fused forward computes the same function; it differs from the bridge
only by float rounding (tests/test_fused.py states the tolerance and prints the differences).
`attention_at`, the same fused call with queries at a few positions only, serves resumed forwards
that score only those (`models.resume`).

The swap is a whitelist: a block is fused only when every part of it is one this module was
checked against (`refusal` says which part is not); anything else, such as a block class added
later, trains through the native attention, and `training_forward` warns once with the reason.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import warnings

import torch
import torch.nn.functional as F
from transformer_lens.model_bridge.sources.native.model import NativeAttention, NativeBlock, NativeModel, NativeRotary

from models.bridge import hook_free_forward
from models.variants import AlibiBias, ReplacingBlock

if TYPE_CHECKING:
    from models.bridge import Model

# Blocks whose forward calls `attn(ln1(x), attention_mask=, position_ids=)` and ignores the
# pattern it returns (FusedAttention returns none: the fused kernel never forms one).
CHECKED_BLOCKS = (NativeBlock, ReplacingBlock)
# What may sit in the attention's rotary slot: apply_rope edits q and k only, before the scores.
CHECKED_ROTARY = (type(None), NativeRotary, AlibiBias)


class FusedAttention(NativeAttention):
    """`NativeAttention` whose scores / mask / softmax / value sum run fused. Only ever installed
    by `training_forward`, on a module `refusal` accepted."""

    def forward(self, hidden_states, attention_mask=None, position_ids=None, pattern_fn=None, **kwargs):
        if attention_mask is not None or pattern_fn is not None:
            # A padding mask or an edited pattern: the native path computes those exactly.
            return super().forward(hidden_states, attention_mask, position_ids, pattern_fn, **kwargs)
        batch, seq, _ = hidden_states.shape
        q = self.q(hidden_states).view(batch, seq, self.n_heads, self.d_head).transpose(1, 2)
        k = self.k(hidden_states).view(batch, seq, self.n_heads, self.d_head).transpose(1, 2)
        v = self.v(hidden_states).view(batch, seq, self.n_heads, self.d_head).transpose(1, 2)
        if self.rotary is not None:
            q, k = self.rotary.apply_rope(q, k, position_ids=position_ids)
        # scale multiplies q.k; the native module divides by self.scale (sqrt(d_head), or 1 unscaled).
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / self.scale)
        return self.o(attended.transpose(1, 2).reshape(batch, seq, -1)), None


def attention_at(attention, hidden_states, at):
    """The output of `attention` (a native module whose block `refusal` accepted) at `at` = (rows,
    positions), index tensors of equal length n, alone ([n, d_model]): keys and values at every
    position, queries only at those n, each attending its row up to its position, fused. A resumed
    forward that scores a few positions (`models.resume`) pays the query and output projections
    and the scores there only; equal to the full attention at those positions within float
    rounding (tests/test_fused.py)."""
    rows, positions = at
    batch, seq, _ = hidden_states.shape

    def heads(x, n):
        return x.view(n, -1, attention.n_heads, attention.d_head).transpose(1, 2)

    q = heads(attention.q(hidden_states[rows, positions]), len(rows))  # [n, heads, 1, d_head]
    k, v = heads(attention.k(hidden_states), batch), heads(attention.v(hidden_states), batch)
    if attention.rotary is not None:
        # The rotary slot edits q and k each by its own positions; the other output is discarded.
        q, _ = attention.rotary.apply_rope(q, q, position_ids=positions[:, None])
        _, k = attention.rotary.apply_rope(k, k)
    visible = torch.arange(seq, device=positions.device)[None, :] <= positions[:, None]  # causal, per query
    attended = F.scaled_dot_product_attention(
        q, k[rows], v[rows], attn_mask=visible[:, None, None, :], scale=1.0 / attention.scale
    )
    return attention.o(attended.reshape(len(rows), -1))


def refusal(block) -> str | None:
    """Why `block` (a native block with its wrappers peeled off) cannot run FusedAttention, or None."""
    attention = block.attn
    if type(block) not in CHECKED_BLOCKS:
        return f"block class {type(block).__name__} is not one fused attention was checked against"
    if type(attention) is not NativeAttention:
        return f"attention class {type(attention).__name__} is not TransformerLens's NativeAttention"
    if type(attention.rotary) not in CHECKED_ROTARY:
        return f"rotary slot {type(attention.rotary).__name__} is not one fused attention was checked against"
    if not attention.causal:
        return "attention is not causal"
    if attention.attn_scores_soft_cap > 0:
        return "attention scores are soft-capped"
    if attention.kv_repeats != 1:
        return "attention shares keys and values across heads (GQA)"
    return None


def model_refusal(model: Model) -> str | None:
    """Why training runs `model` without fused attention, or None when every block fuses."""
    return forward_refusal(model, hook_free_forward(model))


def forward_refusal(model: Model, forward) -> str | None:
    if forward is model:
        return "the model has hooks attached, so it trains through the bridge"
    if type(forward) is not NativeModel:
        return f"model class {type(forward).__name__} is not TransformerLens's NativeModel"
    reasons = {f"block {i}: {reason}" for i, block in enumerate(forward.layers) if (reason := refusal(block))}
    return "; ".join(sorted(reasons)) or None


def training_forward(model: Model):
    """What `tasks.training.loop.train` runs: `hook_free_forward(model)` with fused attention in every
    block when `model_refusal` finds nothing against it, else that forward unchanged (with a
    warning naming the reason). The choice depends only on the model's modules, so a resumed run
    takes the same path as the run it continues."""
    forward = hook_free_forward(model)
    reason = forward_refusal(model, forward)
    if reason:
        warnings.warn(f"training without fused attention: {reason}", stacklevel=2)
        return forward
    for block in forward.layers:
        block.attn.__class__ = FusedAttention  # a shallow copy (hook_free_forward): the bridge's own stays native
    return forward
