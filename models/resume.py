"""The model's own forward, resumed at a block from the residual stream entering it.

TL 4's `forward(..., start_at_layer=k)` swaps the residual in at block k but still runs blocks
0..k-1 and throws their output away, so it saves nothing. Probes that replay a cached run (an
intervention that leaves the first k blocks as they were) call the same block, final-norm and
unembedding modules here instead; hooks registered on the model fire inside them as usual. Tests
check every caller against the full forward.
"""

from __future__ import annotations


def forward_from(model, residual, start: int):
    """Logits of `model` ([batch, pos, vocab]) from `residual` ([batch, pos, d_model]) entering block
    `start`; `start` = n_layers unembeds `residual` directly. Positions must start at 0 (rotary
    tables are read from position 0), as they do in every cached run."""
    for block in model.blocks[start:]:
        (residual,) = block(residual)
    return model.unembed(model.ln_final(residual))
