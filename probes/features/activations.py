"""The activations a dictionary reads and writes: one row per real input position of a batch.

Hooks: an SAE reads the residual stream at `blocks.L.hook_resid_post` (or any hook the bridge
caches); a transcoder reads an MLP's own input (`blocks.L.mlp.hook_in`, after its LayerNorm: what
the MLP computes from) and rebuilds its output (`blocks.L.hook_mlp_out`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from common.cli import UsageError
from models import Model


@dataclass(frozen=True)
class Site:
    """Where one dictionary sits: an SAE at one hook, or a transcoder from hook_in to hook_out."""

    kind: str
    hook_in: str
    hook_out: str
    layer: int


def resid_site(layer: int) -> Site:
    name = f"blocks.{layer}.hook_resid_post"
    return Site("sae", name, name, layer)


def mlp_site(layer: int) -> Site:
    return Site("transcoder", f"blocks.{layer}.mlp.hook_in", f"blocks.{layer}.hook_mlp_out", layer)


def default_sites(n_layers: int, has_mlp: bool) -> list[Site]:
    """The last layer's residual stream (what the unembedding reads), and every MLP."""
    return [resid_site(n_layers - 1)] + ([mlp_site(layer) for layer in range(n_layers)] if has_mlp else [])


@dataclass(frozen=True)
class Activations:
    """hook name -> [m, d] at the m real positions of the batch, in (row, position) order."""

    values: dict = field(hash=False)
    rows: torch.Tensor  # [m] the batch row of each activation
    positions: torch.Tensor  # [m] its position in that row


@torch.no_grad()
def collect(model: Model, tokens: torch.Tensor, real: torch.Tensor, names: list[str]) -> Activations:
    """Run `model` on `tokens` [n, width] and keep `names`' activations where `real` [n, width] is True."""
    from probes.ablation import chunked_cache

    names = sorted(set(names))
    try:
        _, cache = chunked_cache(model, tokens, names)
    except KeyError as error:
        raise UsageError(
            f"the model caches no hook {error}; choose a hook it has (e.g. "
            "blocks.0.hook_resid_post, or an MLP's blocks.0.mlp.hook_in)"
        ) from None
    rows, positions = torch.nonzero(real, as_tuple=True)
    return Activations(
        {name: cache[name][rows, positions].float().cpu() for name in names}, rows.cpu(), positions.cpu()
    )
