"""A closed-form ridge probe for the answer token: least squares onto the one-hot answers with an L2
penalty, W = (X'X + lambda I)^-1 X'Y on centred, scaled features, the answer read as the argmax.
No optimiser, so whether the answer is readable at a stage cannot depend on one (the logistic probe
of probes.sublayers runs LBFGS for a fixed number of steps).

lambda is chosen on held-out TRAINING rows: every VALIDATE-th training row is held out, each lambda of
LAMBDAS (times the number of fit rows) is fit on the others and scored there, the best (the smaller on
a tie) is refit on every training row. The caller scores it on its own held-out rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LAMBDAS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)  # times the fit rows: the penalty scales with the data term
VALIDATE = 5  # every 5th training row chooses lambda


@dataclass(frozen=True)
class Ridge:
    weight: torch.Tensor  # [features + 1, classes], the last row the bias
    penalty: float  # the lambda chosen (absolute)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return (with_bias(x) @ self.weight).argmax(-1)


def with_bias(x: torch.Tensor) -> torch.Tensor:
    return torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype, device=x.device)], 1)


def solve(x: torch.Tensor, y: torch.Tensor, classes: int, penalty: float) -> torch.Tensor:
    a = with_bias(x.double())
    target = torch.nn.functional.one_hot(y, classes).double()
    eye = torch.eye(a.shape[1], dtype=a.dtype, device=a.device)
    eye[-1, -1] = 0.0  # the bias is not penalised
    return torch.linalg.solve(a.T @ a + penalty * eye, a.T @ target).to(x.dtype)


def fit_ridge(x: torch.Tensor, y: torch.Tensor, classes: int) -> Ridge:
    held = torch.arange(len(x), device=x.device) % VALIDATE == VALIDATE - 1
    fit = ~held
    best, best_score = None, -1.0
    for scale in LAMBDAS:
        penalty = scale * int(fit.sum())
        weight = solve(x[fit], y[fit], classes, penalty)
        score = (Ridge(weight, penalty).predict(x[held]) == y[held]).float().mean().item() if held.any() else 0.0
        if score > best_score:
            best, best_score = penalty, score
    assert best is not None
    chosen = best / int(fit.sum()) * len(x)  # the same lambda per row, on every training row
    return Ridge(solve(x, y, classes, chosen), chosen)
