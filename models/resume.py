"""The model's own forward, resumed at a block from the residual stream entering it.

TL 4's `forward(..., start_at_layer=k)` swaps the residual in at block k but still runs blocks
0..k-1 and throws their output away, so it saves nothing. Probes that replay a cached run (an
intervention that leaves the first k blocks as they were) call the same block, final-norm and
unembedding modules here instead; hooks registered on the model fire inside them as usual. Tests
check every caller against the full forward.
"""

from __future__ import annotations

from models.bridge import attention_adds_residual


def forward_from(model, residual, start: int, at=None):
    """Logits of `model` ([batch, pos, vocab]) from `residual` ([batch, pos, d_model]) entering block
    `start`; `start` = n_layers unembeds `residual` directly. Positions must start at 0 (rotary
    tables are read from position 0), as they do in every cached run.

    With `at` = (rows, positions), index tensors of equal length k, only the logits there ([k,
    vocab]): after the last block's attention every module is position-wise, so that block's MLP,
    the final norm and the unembedding run on those k positions alone. The last block is then run
    by its parts (LayerNorms, attention, MLP), so its own block-level hooks (resid_mid, resid_post)
    do not fire; its parts' hooks do."""
    blocks = model.blocks[start:]
    if at is None or not len(blocks):
        for block in blocks:
            (residual,) = block(residual)
        logits = model.unembed(model.ln_final(residual))
        return logits if at is None else logits[at]
    for block in blocks[:-1]:
        (residual,) = block(residual)
    last = blocks[-1]
    attended, _pattern = last.attn(last.ln1(residual))
    residual = ((residual if attention_adds_residual(last) else 0) + attended)[at][:, None]
    if not model.cfg.attn_only:
        residual = residual + last.mlp(last.ln2(residual))
    return model.unembed(model.ln_final(residual))[:, 0]
