"""Dictionaries spliced into the forward pass: each hook's activation replaced by its dictionary's
reconstruction plus an error node (what it did not rebuild, taken from the same forward), so the
model's output is reproduced exactly while everything downstream reads the features; without the
error nodes the logits show what the dictionaries alone carry."""

from __future__ import annotations

import torch

from probes.features.dictionary import Dictionary
from models import Model


def splice_hooks(dictionary: Dictionary, error_node: bool = True) -> list:
    """Forward hooks replacing `dictionary.config.hook_out` by the dictionary's rebuild of what
    `hook_in` held in the same forward (+ the error node)."""
    config = dictionary.config
    seen: dict = {}

    def keep_input(value, hook):
        seen["in"] = value
        return value

    def replace(value, hook):
        recon = dictionary.decode(dictionary.encode(seen.get("in", value).float())).to(value.dtype)
        return recon + (value - recon) if error_node else recon

    return (
        [(config.hook_out, replace)]
        if config.hook_in == config.hook_out
        else [(config.hook_in, keep_input), (config.hook_out, replace)]
    )


@torch.no_grad()
def spliced_logits(
    model: Model, tokens: torch.Tensor, *dictionaries: Dictionary, error_node: bool = True
) -> torch.Tensor:
    hooks = [hook for dictionary in dictionaries for hook in splice_hooks(dictionary, error_node)]
    return model.run_with_hooks(tokens, fwd_hooks=hooks)
