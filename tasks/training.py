"""One training loop for every task: AdamW on next-token loss, evaluation at the scored positions of
a validation split, a stopping rule that never sees held-out data, and a hard step budget.

TransformerLens's `tools/training.py` trains on LM loss only, with no splits, no answer masks and no
stopping rule, which is why this loop is written here.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch

from models import UsageError
from tasks.data import Batch
from tasks.evaluate import logits_at_scored, score_logits


@dataclass(frozen=True)
class TrainSettings:
    max_steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    eval_every: int = 25
    # Stop once validation accuracy has been >= stop_accuracy for stop_evals evaluations in a row
    # and validation loss improved by less than plateau_tolerance (relative) over plateau_steps.
    stop_accuracy: float = 0.99
    stop_evals: int = 3
    plateau_steps: int = 250
    plateau_tolerance: float = 0.01

    def validate(self) -> "TrainSettings":
        for name in ("max_steps", "batch_size", "eval_every", "stop_evals", "plateau_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise UsageError(f"{name} must be a positive integer, got {value!r}")
        if self.max_steps > 1_000_000:
            raise UsageError(f"max_steps={self.max_steps} is absurd for a toy model; use at most 1000000")
        if self.batch_size > 65_536:
            raise UsageError(f"batch_size={self.batch_size} is absurd; use at most 65536")
        if not 0 < self.lr < 1:
            raise UsageError(f"lr must lie in (0, 1), got {self.lr}")
        if self.weight_decay < 0:
            raise UsageError(f"weight_decay must be >= 0, got {self.weight_decay}")
        return self

    @classmethod
    def from_dict(cls, values: dict) -> "TrainSettings":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(f"unknown training setting(s) {unknown}; known: {sorted(known)}")
        return cls(**values).validate()


@dataclass(frozen=True)
class TrainResult:
    steps: int
    stop_reason: str
    seconds: float
    history: list[dict]


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the real (unpadded) positions."""
    targets = tokens[:, 1:]
    real = torch.arange(targets.shape[1])[None, :] < (lengths[:, None] - 1)
    return torch.nn.functional.cross_entropy(logits[real], targets[real])


@torch.no_grad()
def evaluate(model, batch: Batch) -> dict:
    logits = model(batch.inputs)
    scored = score_logits(logits_at_scored(logits, batch), batch)
    return {"val_loss": lm_loss(logits, batch.tokens, batch.lengths).item(), "val_accuracy": scored.accuracy}


def should_stop(history: list[dict], settings: TrainSettings) -> bool:
    recent = history[-settings.stop_evals:]
    if len(recent) < settings.stop_evals or any(h["val_accuracy"] < settings.stop_accuracy for h in recent):
        return False
    now = history[-1]
    earlier = [h for h in history if h["step"] <= now["step"] - settings.plateau_steps]
    if not earlier:
        return False
    improvement = (earlier[-1]["val_loss"] - now["val_loss"]) / max(earlier[-1]["val_loss"], 1e-12)
    return improvement < settings.plateau_tolerance


def train(model, train_batch: Batch, validation_batch: Batch, settings: TrainSettings, seed: int,
          log_path: Path | None = None, progress: bool = True, label: str = "") -> TrainResult:
    from tqdm.auto import tqdm

    generator = torch.Generator().manual_seed(seed)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=settings.lr, weight_decay=settings.weight_decay)
    history: list[dict] = []
    start = time.perf_counter()
    log = open(log_path, "w") if log_path else None
    stop_reason = "step budget"
    bar = tqdm(range(1, settings.max_steps + 1), desc=label, disable=not progress, leave=False,
               dynamic_ncols=True)
    try:
        for step in bar:
            model.train()
            rows = torch.randint(len(train_batch), (settings.batch_size,), generator=generator)
            tokens, lengths = train_batch.tokens[rows], train_batch.lengths[rows]
            loss = lm_loss(model(tokens[:, :-1]), tokens, lengths)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if step % settings.eval_every and step != settings.max_steps:
                continue
            model.eval()
            entry = {"step": step, "train_loss": loss.item(), **evaluate(model, validation_batch),
                     "seconds": round(time.perf_counter() - start, 3)}
            history.append(entry)
            if log:
                log.write(json.dumps(entry) + "\n")
                log.flush()
            bar.set_postfix(loss=f"{entry['val_loss']:.3f}", val_acc=f"{entry['val_accuracy']:.3f}")
            if should_stop(history, settings):
                stop_reason = "validation converged"
                break
    finally:
        bar.close()
        if log:
            log.close()
        model.eval()
    return TrainResult(steps=history[-1]["step"] if history else 0, stop_reason=stop_reason,
                       seconds=time.perf_counter() - start, history=history)


def settings_dict(settings: TrainSettings) -> dict:
    return asdict(settings)
