"""Q-, K- and V-composition scores (Elhage et al. 2021) between heads of different blocks, from
TransformerLens's `all_composition_scores`, next to the same scores for randomly drawn weights of
the same shapes: a score means something only above that baseline.

The baseline redraws Q, K, V and O weights as i.i.d. Gaussians. The score is a ratio of Frobenius
norms, invariant to each matrix's scale, so any i.i.d. Gaussian initialisation gives the same
baseline distribution as a freshly initialised model. The draws are swapped into the model's own
weights and the trained ones put back: faster than booting or deep-copying a bridge. Draws are
made on the CPU, so a model on any device gets the same baseline; scores are returned on the CPU.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch

from common.cli import UsageError
from common.stages import timed
from models.bridge import native
from models import Model

KINDS = ("Q", "K", "V")


@dataclass(frozen=True)
class Composition:
    scores: dict[str, torch.Tensor]  # kind -> [layer, head, layer, head] (sender, receiver)
    baseline_mean: dict[str, float]
    baseline_std: dict[str, float]
    baseline_draws: int

    def score(self, kind: str, sender: tuple[int, int], receiver: tuple[int, int]) -> float:
        return float(self.scores[kind][sender[0], sender[1], receiver[0], receiver[1]])

    def ratio(self, kind: str, sender, receiver) -> float:
        """How many times the random baseline's mean the score is."""
        return self.score(kind, sender, receiver) / self.baseline_mean[kind]


def scores_of(model: Model) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return {
            kind: torch.as_tensor(model.all_composition_scores(kind), device="cpu").detach().clone() for kind in KINDS
        }


def pair_mask(n_layers: int, n_heads: int) -> torch.Tensor:
    """[layer, head, layer, head] True where the receiver's block comes after the sender's."""
    layer = torch.arange(n_layers, device="cpu")
    later = layer[:, None] < layer[None, :]
    return later[:, None, :, None].expand(n_layers, n_heads, n_layers, n_heads)


@contextmanager
def random_attention(model: Model, seed: int):
    """Inside the block, `model`'s attention weights are redrawn i.i.d. Gaussian."""
    generator = torch.Generator("cpu").manual_seed(seed)
    weights = [native(getattr(block.attn, name)).weight for block in model.blocks for name in ("q", "k", "v", "o")]
    saved = [w.detach().clone() for w in weights]
    try:
        with torch.no_grad():
            for weight in weights:
                weight.copy_(torch.randn(weight.shape, generator=generator, device="cpu"))
        yield model
    finally:
        with torch.no_grad():
            for weight, value in zip(weights, saved):
                weight.copy_(value)


@timed("composition")
def composition_scores(model: Model, baseline_draws: int = 4, seed: int = 0) -> Composition:
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    if n_layers < 2:
        raise UsageError("composition needs at least two blocks")
    mask = pair_mask(n_layers, n_heads)
    draws = {kind: [] for kind in KINDS}
    for draw in range(baseline_draws):
        with random_attention(model, seed + draw):
            for kind, scores in scores_of(model).items():
                draws[kind].append(scores[mask])
    baseline = {kind: torch.cat(values) for kind, values in draws.items()}
    return Composition(
        scores=scores_of(model),
        baseline_mean={k: float(v.mean()) for k, v in baseline.items()},
        baseline_std={k: float(v.std()) if len(v) > 1 else float("nan") for k, v in baseline.items()},
        baseline_draws=baseline_draws,
    )
