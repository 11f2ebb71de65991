"""The dictionary spliced into the forward pass: the hook's activation replaced by the dictionary's
reconstruction plus an error node (what it did not rebuild, taken from the same forward), so
the model's output is reproduced exactly while everything downstream reads the features; without
the error node the logits show what the dictionary alone carries."""

from __future__ import annotations

import torch

from probes.features.dictionary import Dictionary


@torch.no_grad()
def spliced_logits(model, tokens: torch.Tensor, dictionary: Dictionary, error_node: bool = True) -> torch.Tensor:
    config = dictionary.config
    seen: dict = {}

    def keep_input(value, hook):
        seen["in"] = value
        return value

    def replace(value, hook):
        recon = dictionary.decode(dictionary.encode(seen.get("in", value).float())).to(value.dtype)
        return recon + (value - recon) if error_node else recon

    hooks = [(config.hook_out, replace)] if config.hook_in == config.hook_out else \
        [(config.hook_in, keep_input), (config.hook_out, replace)]
    return model.run_with_hooks(tokens, fwd_hooks=hooks)
