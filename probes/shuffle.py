"""The shuffle test: permute the prefix before the first scored position and measure how much the
scored logits move. A bag of words gives float noise; anything that reads order gives a difference.
Where no example's prefix holds two different tokens (a task scored at position 0 or 1) there is no
order to permute, and the change is NaN (not measured) rather than a 0 that reads as order-blind."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from models.bridge import device_of
from models import Model
from tasks.data import Batch
from tasks.evaluate import logits_at_scored, run_logits


@dataclass(frozen=True)
class ShuffleResult:
    max_abs_logit_change: float
    mean_abs_logit_change: float
    permutations: int
    examples: int


def largest_change(changes) -> float:
    """The largest of several runs' shuffle changes, ignoring the runs with no order to permute
    (NaN); NaN when none had one."""
    return max((change for change in changes if not math.isnan(change)), default=math.nan)


def first_scored(batch: Batch) -> list[int]:
    """Each row's first scored position: the length of the prefix the test permutes."""
    start = torch.full((len(batch),), batch.tokens.shape[1], dtype=torch.long, device="cpu")
    return start.scatter_reduce(0, batch.example_index.cpu(), batch.positions.cpu(), reduce="amin").tolist()


def shuffled_prefixes(batch: Batch, generator: torch.Generator) -> torch.Tensor:
    """Drawn on the CPU (with `batch` there): the same permutations whichever device the model is on."""
    tokens = batch.tokens.clone()
    for row, end in enumerate(first_scored(batch)):
        order = torch.randperm(end, generator=generator, device="cpu")
        tokens[row, :end] = tokens[row, order]
    return tokens


@torch.no_grad()
def shuffle_test(model: Model, batch: Batch, permutations: int = 4, seed: int = 0) -> ShuffleResult:
    on_cpu, batch = batch.to("cpu"), batch.to(device_of(model))
    if not any(len(set(on_cpu.tokens[row, :end].tolist())) > 1 for row, end in enumerate(first_scored(on_cpu))):
        return ShuffleResult(float("nan"), float("nan"), permutations, len(batch))
    generator = torch.Generator("cpu").manual_seed(seed)
    reference = logits_at_scored(run_logits(model, batch.inputs), batch)
    changes = []
    for _ in range(permutations):
        shuffled = shuffled_prefixes(on_cpu, generator).to(batch.tokens.device)
        changes.append((logits_at_scored(run_logits(model, shuffled[:, :-1]), batch) - reference).abs())
    change = torch.stack(changes)
    return ShuffleResult(change.max().item(), change.mean().item(), permutations, len(batch))
