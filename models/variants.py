"""The pieces `build_model` needs for variants that the bridge config cannot express and that frozen
weights alone cannot realise: ALiBi's score bias, a block whose attention output replaces the
residual stream instead of being added to it, a post-norm block, and the fixed sinusoid table.

Each lives in the TransformerLens native modules themselves (never in a hook), so the bridge and
the hook-free training forward (`models.fused.training_forward`, which runs these same module
objects with the wrappers peeled off) compute the same thing, and a checkpoint rebuilt by
`build_model` behaves exactly like the trained model. None of them adds a parameter or a
persistent buffer: the state dict, and so a checkpoint, is that of the plain model.
"""

from __future__ import annotations

import torch
from transformer_lens.model_bridge.sources.native.model import NativeBlock


def sinusoid_table(n_ctx: int, d_model: int) -> torch.Tensor:
    """[n_ctx, d_model]: sin(p / 10000^(2i/d)) in column 2i and cos(...) in column 2i+1
    (Vaswani et al. 2017, section 3.5)."""
    position = torch.arange(n_ctx, dtype=torch.float64)[:, None]
    frequency = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    table = torch.zeros(n_ctx, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency[: d_model // 2])
    return table.float()


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Head h (from 1) gets slope 2^(-8h/n): the geometric sequence of Press et al. 2022 (for a
    power of two; other head counts follow the same formula rather than the paper's interleave)."""
    return torch.tensor([2.0 ** (-8.0 * h / n_heads) for h in range(1, n_heads + 1)])


class AlibiBias(torch.nn.Module):
    """ALiBi realised through the native attention's rotary slot: TL 4.3's `NativeAttention` hands
    its per-head q and k (and the position ids) to `self.rotary.apply_rope` just before
    `q @ k^T / scale`, and `boot_native` refuses positional_embedding_type "alibi". Two columns are
    appended to every head's q and k:

        q' = [q, scale * m, -scale * m * i],   k' = [k, j, 1]
        q' . k' / scale = q . k / scale + m * j - m * i = q . k / scale - m * (i - j)

    which is ALiBi's score bias -m * distance, exactly, before the causal mask and the softmax.
    Values are untouched (they are projected separately), so only the scores change. Hand-written
    because TL's own ALiBi code (`alibi_utils`) belongs to the HF Bloom/MPT bridges, whose attention
    modules the native model does not use."""

    slopes: torch.Tensor  # a buffer: torch's Module.__getattr__ alone would type it Tensor | Module

    def __init__(self, n_heads: int, scale: float):
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads) * scale, persistent=False)

    def apply_rope(self, q: torch.Tensor, k: torch.Tensor, position_ids: torch.Tensor | None = None):
        batch, _, seq, _ = q.shape
        if position_ids is None:
            position_ids = torch.arange(seq, device=q.device).expand(batch, seq)
        position = position_ids.to(q.dtype)[:, None, :, None]  # [batch, 1, seq, 1]
        slope = self.slopes.to(q.dtype)[None, :, None, None]  # [1, heads, 1, 1]
        q_extra = torch.cat([slope.expand(batch, -1, seq, 1), -slope * position], dim=-1)
        k_extra = torch.cat([position, torch.ones_like(position)], dim=-1).expand(batch, k.shape[1], seq, 2)
        return torch.cat([q, q_extra.expand(batch, q.shape[1], seq, 2)], dim=-1), torch.cat([k, k_extra], dim=-1)


class ReplacingBlock(NativeBlock):
    """A native block without the residual connection around attention: the attention output
    REPLACES the stream (x <- attn(ln1(x))) instead of being added to it (x <- x + attn(ln1(x))).
    The MLP, when present, keeps its residual. Installed by swapping the class of the native block
    (same parameters, same submodules and wrappers), because the residual add sits in
    `NativeBlock.forward` and no weight setting removes it. The body mirrors that forward."""

    def forward(self, hidden_states, attention_mask=None, position_ids=None, **kwargs):
        hidden_states, _pattern = self.attn(
            self.ln1(hidden_states), attention_mask=attention_mask, position_ids=position_ids
        )
        if not self.cfg.attn_only:
            hidden_states = hidden_states + self.mlp(self.ln2(hidden_states))
        return (hidden_states,)


class PostNormBlock(NativeBlock):
    """A post-norm block (Vaswani et al. 2017): x <- ln1(x + attn(x)), then x <- ln2(x + mlp(x)),
    instead of the native pre-norm x <- x + attn(ln1(x)), x <- x + mlp(ln2(x)). The same ln1 and
    ln2 modules move from each sublayer's input to after its residual add, so the parameters (and
    the state dict) are those of the pre-norm block. The model's final LayerNorm stays: it acts on
    a stream the last block has already normalised. Installed by swapping the class of the native
    block, because the order sits in `NativeBlock.forward`. The body mirrors that forward."""

    def forward(self, hidden_states, attention_mask=None, position_ids=None, **kwargs):
        attention, _pattern = self.attn(hidden_states, attention_mask=attention_mask, position_ids=position_ids)
        hidden_states = self.ln1(hidden_states + attention)
        if not self.cfg.attn_only:
            hidden_states = self.ln2(hidden_states + self.mlp(hidden_states))
        return (hidden_states,)
