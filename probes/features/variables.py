"""What the task planted, as binary labels over the positions a dictionary saw.

Read through the task interface only (nothing special-cases a task): at each scored position, the
answer (`answer=dog`), the foil (`foil=cat`, where the task has foils) and the example's group
(`group=crosser`); at every real position, whether it is a role's position (`role=binder_end`).
Tracr's compiled residual stream names every dimension `variable:value`: a categorical dimension
holds 1 where the variable has that value and 0 elsewhere, so `variable:value` is planted exactly
(numerical dimensions, named `variable` alone, are not binary and are left out).

A variable is kept when both of its classes occur at least MIN_COUNT times in the sample; per kind,
the MAX_VALUES most frequent values (induction has 64 possible answers; a table of 64 rows per
dictionary says less than the 12 most frequent).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from probes.features.activations import Activations
from tasks.base import NO_FOIL
from tasks.data import Batch

MIN_COUNT = 5
MAX_VALUES = 12
TRACR_ONE = 0.5  # a categorical Tracr dimension is exactly 0 or 1


@dataclass(frozen=True)
class Variable:
    """`labels[i]` says whether the variable holds at activation row i; only rows where `counted` is
    True are graded (scored positions for answers, foils and groups; every position for roles)."""

    name: str
    kind: str  # answer | foil | group | role | tracr
    labels: torch.Tensor = field(hash=False)  # [m] bool
    counted: torch.Tensor = field(hash=False)  # [m] bool

    @property
    def positives(self) -> int:
        return int((self.labels & self.counted).sum())


def scored_rows(batch: Batch, acts: Activations) -> torch.Tensor:
    """[k] the activation row of each scored position (batch order)."""
    width = int(acts.positions.max()) + 1
    lookup = torch.full((len(batch) * width,), -1, dtype=torch.long)
    lookup[acts.rows * width + acts.positions] = torch.arange(len(acts.rows))
    found = lookup[batch.example_index.cpu() * width + batch.positions.cpu()]
    return found


def task_variables(batch: Batch, acts: Activations, vocabulary: list[str]) -> list[Variable]:
    """Answers, foils and groups at the scored positions, and roles at every position."""
    rows = scored_rows(batch, acts)
    keep = rows >= 0
    rows = rows[keep]
    counted = torch.zeros(len(acts.rows), dtype=torch.bool)
    counted[rows] = True
    groups = [batch.groups[i] for i in batch.example_index.cpu()[keep].tolist()]
    per_kind = {
        "answer": [vocabulary[t] for t in batch.answers.cpu()[keep].tolist()],
        "foil": [vocabulary[t] if t != NO_FOIL else None for t in batch.foils.cpu()[keep].tolist()],
        "group": groups,
    }
    found = []
    for kind, values in per_kind.items():
        found += binary_variables(kind, values, rows, counted)
    for role, where in sorted(batch.roles.items()):
        at_role = where.cpu()[acts.rows] == acts.positions
        found += kept([Variable(f"role={role}", "role", at_role, torch.ones_like(at_role))])
    return found


def binary_variables(kind: str, values: list, rows: torch.Tensor, counted: torch.Tensor) -> list[Variable]:
    """One `kind=value` variable per frequent value (None: the position has no such value)."""
    common = [value for value, _ in Counter(v for v in values if v is not None).most_common(MAX_VALUES)]
    out = []
    for value in common:
        labels = torch.zeros_like(counted)
        labels[rows[torch.tensor([v == value for v in values], dtype=torch.bool)]] = True
        out.append(Variable(f"{kind}={value}", kind, labels, counted))
    return kept(out)


def kept(variables: list[Variable]) -> list[Variable]:
    def enough(v: Variable) -> bool:
        return min(v.positives, int(v.counted.sum()) - v.positives) >= MIN_COUNT

    return [v for v in variables if enough(v)]


def tracr_variables(residual: torch.Tensor, labels: tuple[str, ...]) -> list[Variable]:
    """Tracr's categorical `variable:value` dimensions of `residual` [m, d_model] as variables."""
    everywhere = torch.ones(residual.shape[0], dtype=torch.bool)
    return kept(
        [
            Variable(label, "tracr", residual[:, i] > TRACR_ONE, everywhere)
            for i, label in enumerate(labels)
            if ":" in label
        ]
    )
