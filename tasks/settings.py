"""Training settings: a frozen dataclass validated before torch is imported, so bad numbers on the
command line fail at once with one line."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

from models import UsageError


@dataclass(frozen=True)
class TrainSettings:
    max_steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    eval_every: int = 25
    # Stop "solved" once validation accuracy has been >= stop_accuracy for stop_evals evaluations in
    # a row, or "stalled" once the best validation loss has not improved by plateau_tolerance
    # (relative) for plateau_steps steps: a model that cannot learn the task stops wasting steps.
    stop_accuracy: float = 0.99
    stop_evals: int = 2
    plateau_steps: int = 250
    plateau_tolerance: float = 0.01
    # Save weights every snapshot_every steps (and at step 0) for probes that replay training; 0 = never.
    snapshot_every: int = 0
    # Learning rate rises linearly to lr over the first warmup_steps steps (step s: lr * s / warmup_steps),
    # then stays at lr; 0 = no warmup, the constant lr from the first step.
    warmup_steps: int = 0

    def validate(self) -> "TrainSettings":
        if type(self.warmup_steps) is not int or self.warmup_steps < 0:
            raise UsageError(f"warmup_steps must be a non-negative integer (0 = no warmup), got {self.warmup_steps!r}")
        if type(self.snapshot_every) is not int or self.snapshot_every < 0:
            raise UsageError(f"snapshot_every must be a non-negative integer (0 = no snapshots), "
                             f"got {self.snapshot_every!r}")
        for name in ("max_steps", "batch_size", "eval_every", "stop_evals", "plateau_steps"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise UsageError(f"{name} must be a positive integer, got {value!r}")
        for name in ("lr", "weight_decay", "stop_accuracy", "plateau_tolerance"):
            value = getattr(self, name)
            if type(value) not in (int, float) or not math.isfinite(value):
                raise UsageError(f"{name} must be a finite number, got {value!r}; the default is "
                                 f"{getattr(TrainSettings, name)}")
        if self.max_steps > 1_000_000:
            raise UsageError(f"max_steps={self.max_steps} is absurd for a toy model; use at most 1000000")
        if self.batch_size > 65_536:
            raise UsageError(f"batch_size={self.batch_size} is absurd; use at most 65536")
        if not 0 < self.lr < 1:
            raise UsageError(f"lr must lie in (0, 1), got {self.lr}; try 1e-3")
        if self.weight_decay < 0:
            raise UsageError(f"weight_decay must be >= 0, got {self.weight_decay}")
        return self

    def lr_at(self, step: int) -> float:
        """The learning rate of training step `step` (counted from 1)."""
        return self.lr * min(1.0, step / self.warmup_steps) if self.warmup_steps else self.lr

    @classmethod
    def from_dict(cls, values: dict) -> "TrainSettings":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UsageError(f"unknown training setting(s) {unknown}; known: {sorted(known)}")
        return cls(**values).validate()


def settings_dict(settings: TrainSettings) -> dict:
    return asdict(settings)
