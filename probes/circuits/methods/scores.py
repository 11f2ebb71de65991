"""Judging an edge ranking: AUROC against a set of true edges, Spearman rank correlation with the
oracle, and the oracle's top edges as a reference set."""

from __future__ import annotations

import torch


FLOAT_NOISE = 1e-6  # |score| below this share of the largest counts as 0 (a tie), not as a ranking
REFERENCE_NOISE = 0.01  # an edge moving less than this share of the gap alone is not a reference edge


def auroc(scores: torch.Tensor, positive: torch.Tensor) -> float:
    """Chance that a random true edge outscores a random other one (ties count half): the
    Mann-Whitney U over n_pos * n_neg. 1 = every true edge ranked above every other, 0.5 = chance.
    Scores within float noise of 0 are set to 0, so a method whose gradient vanishes on an edge
    (1e-12 where the other edges have exact zeros) does not rank it by rounding error."""
    from scipy.stats import mannwhitneyu

    scores = without_float_noise(scores)
    positive = positive.bool()
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    u = mannwhitneyu(scores[positive].double().numpy(), scores[~positive].double().numpy()).statistic
    return float(u) / (n_pos * n_neg)


def without_float_noise(scores: torch.Tensor) -> torch.Tensor:
    return torch.where(scores.abs() < FLOAT_NOISE * scores.abs().max(), torch.zeros_like(scores), scores)


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a.double().numpy(), b.double().numpy()).statistic)


def top_edges(effect: torch.Tensor, share: float = 0.1, floor: float = 0.0) -> torch.Tensor:
    """[edges] bool: the ceil(share * edges) edges of largest |effect| (at least one), counting only
    edges with |effect| >= floor: padding the reference set with edges that do nothing would score a
    perfect ranking below 1 (0.786 on a plain chain whose 10% included zero-effect edges)."""
    k = max(1, int(-(-share * len(effect) // 1)))
    mask = torch.zeros(len(effect), dtype=torch.bool, device=effect.device)
    mask[effect.abs().argsort(descending=True, stable=True)[:k]] = True
    return mask & (effect.abs() >= floor)


def expected_recall(ranked: torch.Tensor, expected: torch.Tensor) -> tuple[int, int]:
    """(how many of the k expected edges are among a ranking's top k edges by |score|, k): AUROC
    ranks every edge, so a model whose circuit shares 2 of 4 expected edges and uses others can
    still score high; this says how many of the expected edges the ranking puts first."""
    expected = expected.bool()
    k = int(expected.sum())
    first = without_float_noise(ranked).abs().argsort(descending=True, stable=True)[:k]
    return int(expected[first].sum()), k


def circuit_recall(circuit, expected) -> tuple[int, int]:
    """(expected edges inside `circuit`, expected edges): e.g. 2 of 4."""
    return len(set(circuit) & set(expected)), len(expected)
