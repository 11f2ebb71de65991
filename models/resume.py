"""The model's own forward, resumed at a block from the residual stream entering it.

TL 4's `forward(..., start_at_layer=k)` swaps the residual in at block k but still runs blocks
0..k-1 and throws their output away, so it saves nothing. Probes that replay a cached run (an
intervention that leaves the first k blocks as they were) call the same block, final-norm and
unembedding modules here instead: the bridge's own when any hook is attached (so hooks registered
on the model fire inside them as usual), else the native modules they wrap
(`models.bridge.hook_free_forward`: bitwise the same, without the wrappers' per-call hook dispatch,
which was a sixth of the ablation sweep's replay; benchmarks/sweeps.py). Tests check every caller
against the full forward.

A Hugging Face rotary block (GPT-NeoX, Llama) takes its rotary tables and mask from the model's own
forward, so it cannot run on the residual alone: for those, `forward_from` runs the bridge's whole
forward on placeholder tokens with the stream entering block `start` replaced by `residual` (its
hooks from block `start` on see exactly what a resumed forward shows them; the blocks before it are
computed and discarded, the cost of a full forward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from models.bridge import attention_adds_residual, hook_free_forward

if TYPE_CHECKING:
    from models.bridge import Model


@dataclass(frozen=True)
class Resumable:
    """The modules a resumed forward runs, under the bridge's names."""

    blocks: tuple[torch.nn.Module, ...]
    adds_residual: tuple[bool, ...]  # per block: False where attention replaces the stream
    ln_final: torch.nn.Module
    unembed: torch.nn.Module
    attn_only: bool


def resumable(model: Model) -> Resumable:
    """`model`'s bridge modules when a hook is attached, else the native modules they wrap."""
    forward = hook_free_forward(model)
    adds = tuple(attention_adds_residual(block) for block in model.blocks)
    if forward is model:
        return Resumable(tuple(model.blocks), adds, model.ln_final, model.unembed, model.cfg.attn_only)
    return Resumable(tuple(forward.layers), adds, forward.ln_out, forward.head, model.cfg.attn_only)


def runs_by_blocks(model: Model) -> bool:
    """Whether a block runs on the residual alone: toylens's own blocks and non-rotary Hugging Face
    blocks (GPT-2) do; a Hugging Face rotary block reads tables the model's forward computes."""
    from transformer_lens.model_bridge.sources.native.model import NativeModel

    wrapped = getattr(model, "original_model", None)
    return wrapped is None or isinstance(wrapped, NativeModel) or model.cfg.positional_embedding_type != "rotary"


def forward_from(model: Model, residual, start: int, at=None):
    """Logits of `model` ([batch, pos, vocab]) from `residual` ([batch, pos, d_model]) entering block
    `start`; `start` = n_layers unembeds `residual` directly. Positions must start at 0 (rotary
    tables are read from position 0), as they do in every cached run.

    With `at` = (rows, positions), index tensors of equal length k, only the logits there ([k,
    vocab]): after the last block's attention every module is position-wise, so that block's MLP,
    the final norm and the unembedding run on those k positions alone. The last block is then run
    by its parts (LayerNorms, attention, MLP): its hook_resid_pre and its parts' hooks fire (those
    after its attention with [k, 1, ...] tensors), its hook_resid_post does not."""
    if not runs_by_blocks(model):
        logits = whole_forward(model, residual, start)
        return logits if at is None else logits[at]
    return resume(resumable(model), residual, start, at)


def whole_forward(model: Model, residual, start: int):
    """The bridge's whole forward with the stream entering block `start` (the final norm at
    n_layers) replaced by `residual`, ahead of any hook there (so keepers see the replacement)."""
    import torch

    point = model.ln_final.hook_in if start == model.cfg.n_layers else model.blocks[start].hook_in
    handle = point.register_forward_hook(lambda module, args, output: residual, prepend=True)
    try:
        return model(torch.zeros(residual.shape[:2], dtype=torch.long, device=residual.device))
    finally:
        handle.remove()


def resume(modules: Resumable, residual, start: int, at=None):
    """`forward_from` over modules already chosen (`resumable`), for callers that resume many times."""
    blocks = modules.blocks[start:]
    if at is None or not len(blocks):
        for block in blocks:
            (residual,) = block(residual)
        logits = modules.unembed(modules.ln_final(residual))
        return logits if at is None else logits[at]
    for block in blocks[:-1]:
        (residual,) = block(residual)
    # Imported here, not at the top: models.fused imports TransformerLens's model bridge (about 2 s
    # of CPU), which a process that only reads measured results (the report's driver, rendering what
    # its workers measured, whose classes import this module) never needs; the workers preload it.
    from models.fused import attention_at, refusal

    last: Any = blocks[-1]  # its parts (ln1, attn, mlp) are submodules torch types as Tensor | Module
    if refusal(last) is None:  # native modules (no hook attached): queries at `at` alone
        attended = attention_at(last.attn, last.ln1(residual), at)
    else:
        if hasattr(last, "hook_in"):  # a bridge block: its hook_resid_pre, as its own forward fires it
            residual = last.hook_in(residual)
        attended = last.attn(last.ln1(residual))[0][at]
    residual = ((residual[at] if modules.adds_residual[-1] else 0) + attended)[:, None]
    if not modules.attn_only:
        residual = residual + last.mlp(last.ln2(residual))
    return modules.unembed(modules.ln_final(residual))[:, 0]
