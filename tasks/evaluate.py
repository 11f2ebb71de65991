"""The model's predictions at a task's scored positions: the one measurement training and every
probe share."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models import UsageError
from models.bridge import device_of
from models import Model
from tasks.base import NO_FOIL
from tasks.data import Batch, select_rows, spread_subset

# Splits larger than this (induction trains on 20,000 sequences) are scored on an evenly spread
# sample of this many examples; the sample size travels with every accuracy reported.
SCORE_ROWS = 2048
# Tokens per forward when scoring or patching. Past ~8k tokens the [rows, heads, pos, pos] attention
# tensors fall out of cache: 8192 rows of 17 tokens ran at half the rows/s of 256 rows, on both
# tasks' shapes (measured, one thread).
TOKENS_PER_FORWARD = 8192
# Scored logits held at once when scoring a split (2^24 float32 values = 64 MiB); the tasks that score
# a few positions per sequence never reach it.
SCORED_LOGITS = 2**24


@dataclass(frozen=True)
class Scored:
    """One row per scored position."""

    predicted: torch.Tensor  # [k] argmax token
    answers: torch.Tensor  # [k]
    foils: torch.Tensor  # [k], NO_FOIL where none
    logit_diff: torch.Tensor  # [k] answer logit - foil logit (nan without a foil)
    loss: torch.Tensor  # [] mean cross-entropy of the answers
    example_index: torch.Tensor

    @property
    def correct(self) -> torch.Tensor:
        return self.predicted == self.answers

    @property
    def chose_foil(self) -> torch.Tensor:
        return (self.predicted == self.foils) & (self.foils != NO_FOIL)

    @property
    def foil_rate(self) -> float:
        return foil_rate(self.chose_foil, self.foils)

    @property
    def accuracy(self) -> float:
        return self.correct.float().mean().item()

    @property
    def top_prediction(self) -> tuple[int, float]:
        """The most often predicted token and its share of the scored positions: near 1 is a
        constant output, whatever the accuracy says (-1, 0.0 when nothing is scored)."""
        if not len(self.predicted):
            return -1, 0.0
        token = int(self.predicted.mode().values)
        return token, (self.predicted == token).float().mean().item()


def foil_rate(chose_foil: torch.Tensor, foils: torch.Tensor) -> float:
    """Share of the scored positions that have a foil where the model predicted it; nan where none
    has one (the task names no wrong answer there, so 0% would claim what was not measured)."""
    has_foil = foils != NO_FOIL
    return chose_foil[has_foil].float().mean().item() if bool(has_foil.any()) else float("nan")


def logits_at_scored(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """[k, vocab] logits at each scored position, from full-sequence logits [n, length, vocab]."""
    return logits[batch.example_index, batch.positions]


def score_logits(scored_logits: torch.Tensor, batch: Batch) -> Scored:
    finite = torch.isfinite(scored_logits).all(-1)
    if not bool(finite.all()):
        raise UsageError(
            f"the model's logits are NaN or infinite at {int((~finite).sum())} of {len(finite)} "
            "scored positions: its weights diverged or were altered; retrain (a lower --lr "
            "if training diverged)"
        )
    answers, foils = batch.answers, batch.foils
    has_foil = foils != NO_FOIL
    answer_logit = scored_logits.gather(1, answers[:, None])[:, 0]
    foil_logit = scored_logits.gather(1, foils.clamp(min=0)[:, None])[:, 0]
    return Scored(
        predicted=scored_logits.argmax(-1),
        answers=answers,
        foils=foils,
        logit_diff=torch.where(has_foil, answer_logit - foil_logit, torch.nan),
        loss=torch.nn.functional.cross_entropy(scored_logits, answers),
        example_index=batch.example_index,
    )


@torch.no_grad()
def run_logits(model: Model, tokens: torch.Tensor) -> torch.Tensor:
    chunk = max(1, TOKENS_PER_FORWARD // max(tokens.shape[1], 1))
    return torch.cat([model(tokens[i : i + chunk]) for i in range(0, len(tokens), chunk)])


def score_model(model: Model, batch: Batch) -> Scored:
    """Scores at every scored position of `batch`. A task that scores every position (text) makes
    the scored logits as large as the full ones (2048 rows x 128 positions x 1024 tokens = 1 GiB),
    so past SCORED_LOGITS values the rows are scored in chunks and the scores joined."""
    batch = batch.to(device_of(model))
    per_row = max(1, int(torch.bincount(batch.example_index, minlength=len(batch)).max()) * model.cfg.d_vocab)
    rows = max(1, SCORED_LOGITS // per_row)
    if rows >= len(batch):
        return score_logits(logits_at_scored(run_logits(model, batch.inputs), batch), batch)
    parts = []
    for start in range(0, len(batch), rows):
        chunk = select_rows(batch, torch.arange(start, min(start + rows, len(batch)), device=batch.tokens.device))
        parts.append((start, score_logits(logits_at_scored(run_logits(model, chunk.inputs), chunk), chunk)))
    return joined(parts)


def joined(parts: list[tuple[int, Scored]]) -> Scored:
    """One Scored from those of consecutive row chunks (each with the index of its first row); the
    loss is the mean over all their positions."""
    scores = [scored for _, scored in parts]
    counts = torch.tensor([len(s.answers) for s in scores], dtype=torch.float64)
    losses = torch.stack([s.loss.double() for s in scores])
    return Scored(
        predicted=torch.cat([s.predicted for s in scores]),
        answers=torch.cat([s.answers for s in scores]),
        foils=torch.cat([s.foils for s in scores]),
        logit_diff=torch.cat([s.logit_diff for s in scores]),
        loss=((losses * counts.to(losses.device)).sum() / counts.sum()).float(),
        example_index=torch.cat([s.example_index + start for start, s in parts]),
    )


def score_split(model: Model, batch: Batch) -> tuple[Scored, Batch]:
    """Score a whole split, or an evenly spread SCORE_ROWS-example sample of a larger one; returns
    the scores and the examples they are for."""
    sample = spread_subset(batch, SCORE_ROWS)
    return score_model(model, sample), sample
