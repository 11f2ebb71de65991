"""A dictionary graded against planted variables: for each variable, the feature whose firing
(activation > 0) best matches it by MCC, that feature's AUROC, and the cosine of its decoder
direction to the variable's mean-difference direction (mean output activation where the variable
holds minus where it does not, in the space the decoder writes).

Scales: MCC 1 = the feature fires exactly where the variable holds, 0 = unrelated (chance), -1 =
exactly where it does not; AUROC 1 = every positive activation above every negative, 0.5 =
chance; cosine 1 = the decoder writes along the mean difference. `linear_mcc` says whether the
variable is linearly present at all: the held-out MCC of a logistic-regression probe on the same
activations (a variable no direction separates cannot be asked of a feature).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from probes.circuits.methods.scores import auroc
from probes.features.dictionary import Dictionary, DictionaryConfig
from probes.features.variables import Variable

RECOVERED = 0.9  # the MCC at which a feature recovers a variable (the bar)


@dataclass(frozen=True)
class Recovery:
    variable: str
    kind: str
    positives: int  # graded positions where the variable holds
    counted: int  # graded positions
    feature: int  # the best-matching feature's index
    mcc: float
    auroc: float
    cosine: float
    linear_mcc: float


@dataclass(frozen=True)
class DictionaryGrade:
    """Basis: the activations of `split` (`rows` positions), not those the dictionary trained on."""

    run: str
    config: DictionaryConfig
    fvu: float  # on `split`: 0 = rebuilt exactly, 1 = no better than the mean
    l0: float  # mean active features per position (at most k)
    dead: float  # share of features that never fire on `split`
    split: str
    rows: int
    recoveries: tuple[Recovery, ...]
    threshold: float = RECOVERED

    @property
    def uncaptured(self) -> tuple[Recovery, ...]:
        return tuple(r for r in self.recoveries if not r.mcc >= self.threshold)


def mcc_columns(active: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[features] MCC of each column of `active` [c, f] (bool) against `labels` [c] (bool); 0 where
    a column or the labels are constant (no correlation is defined)."""
    a, y = active.double(), labels.double()[:, None]
    tp, fp = (a * y).sum(0), (a * (1 - y)).sum(0)
    fn, tn = ((1 - a) * y).sum(0), ((1 - a) * (1 - y)).sum(0)
    denominator = ((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)).sqrt()
    return torch.where(denominator > 0, (tp * tn - fp * fn) / denominator.clamp_min(1e-300), torch.zeros_like(tp))


def recovery(
    variable: Variable, acts: torch.Tensor, x_out: torch.Tensor, w_dec: torch.Tensor, linear: float | None = None
) -> Recovery:
    """`acts` [m, d_sae] the dictionary's feature activations, `x_out` [m, d_out] what it rebuilds;
    `linear`: the variable's linear_mcc at this hook when the caller already has it."""
    rows = variable.counted
    acts, x_out, labels = acts[rows], x_out[rows], variable.labels[rows]
    scores = mcc_columns(acts > 0, labels)
    best = int(scores.argmax())
    difference = x_out[labels].mean(0) - x_out[~labels].mean(0)
    cosine = float(torch.nn.functional.cosine_similarity(w_dec[best], difference, dim=0))
    return Recovery(
        variable.name,
        variable.kind,
        int(labels.sum()),
        int(rows.sum()),
        best,
        float(scores[best]),
        auroc(acts[:, best], labels),
        cosine,
        linear_mcc(x_out, labels) if linear is None else linear,
    )


def linear_mcc(x: torch.Tensor, labels: torch.Tensor) -> float:
    """Held-out MCC of a logistic-regression probe (probes.sublayers.fit_probe) fit on a random half
    of the rows of `x` [c, d] and scored on the other half: is the variable linearly present here?
    Random, not alternating, halves: rows come in (example, position) order, so alternate rows
    would put some positions (and a role's whole class) in one half only."""
    from probes.sublayers import fit_probe

    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    fit, scored = order[0::2], order[1::2]
    mean, scale = x[fit].mean(0), x[fit].std(0).clamp(min=1e-6)
    probe = fit_probe((x[fit] - mean) / scale, labels[fit].long(), 2)
    with torch.no_grad():
        predicted = probe((x[scored] - mean) / scale).argmax(-1) == 1
    return float(mcc_columns(predicted[:, None], labels[scored])[0])


def linear_presence(variables: list[Variable], x_out: torch.Tensor) -> dict[str, float]:
    """Each variable's linear_mcc on the activations `x_out` [m, d] of its counted rows."""
    return {v.name: linear_mcc(x_out[v.counted], v.labels[v.counted]) for v in variables}


def feature_matches(acts: torch.Tensor, variables: list[Variable]) -> list[tuple[str, float]]:
    """Per feature of `acts` [m, d_sae], the planted variable its firing matches best (MCC) and that MCC."""
    scores = torch.stack([mcc_columns(acts[v.counted] > 0, v.labels[v.counted]) for v in variables])
    best = scores.argmax(0)
    return [(variables[int(i)].name, float(scores[i, j])) for j, i in enumerate(best)]


@torch.no_grad()
def grade(
    run: str,
    dictionary: Dictionary,
    x_in: torch.Tensor,
    x_out: torch.Tensor,
    variables: list[Variable],
    split: str,
    threshold: float = RECOVERED,
    linear: dict | None = None,
) -> DictionaryGrade:
    """`linear`: linear_presence(variables, x_out) when the caller already has it (one per hook)."""
    acts = dictionary.encode(x_in)
    residual = dictionary.decode(acts) - x_out
    fvu = float(residual.pow(2).sum() / (x_out - x_out.mean(0)).pow(2).sum().clamp_min(1e-12))
    w_dec = dictionary.weights["W_dec"]
    linear = linear_presence(variables, x_out) if linear is None else linear
    recoveries = tuple(recovery(v, acts, x_out, w_dec, linear[v.name]) for v in variables)
    return DictionaryGrade(
        run,
        dictionary.config,
        fvu,
        float((acts > 0).sum(-1).double().mean()),
        float(((acts > 0).sum(0) == 0).double().mean()),
        split,
        len(x_in),
        recoveries,
        threshold,
    )
