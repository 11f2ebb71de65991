"""Training settings: a frozen dataclass validated before torch is imported, so bad numbers on the
command line fail at once with one line."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from enum import Enum, StrEnum

from models import UsageError


class LossPositions(str, Enum):
    """Where the training loss is taken (a str, so config.json stores its value)."""

    ALL = "all"  # next-token loss at every position: the model also learns the sequences' structure
    SCORED = "scored"  # only at the scored positions: the task's answers and nothing else


class StopMetric(str, Enum):
    """What the "stalled" rule watches on the validation split."""

    SCORED_LOSS = "scored_loss"  # cross-entropy of the answers at the scored positions
    ACCURACY = "accuracy"  # accuracy at the scored positions (improvement in absolute points)
    LOSS = "loss"  # next-token loss at every position: keeps falling while a model that
    # cannot do the task learns the rest of the sequence


class StopReason(StrEnum):
    """Why training stopped, as metrics.json records it (a StrEnum: stored files and sentences
    show its value). Decided by tasks.training.loop.stop_reason, or the budget running out."""

    SOLVED = "validation solved"  # validation accuracy >= stop_accuracy for stop_evals evaluations
    STALLED = "validation stalled"  # the watched stop_metric did not improve for plateau_steps steps
    BUDGET = "step budget"  # max_steps reached first


# What a run recorded before a setting existed was trained with; a stored config that lacks the
# field is read as this, so it matches a run asked for with the same behaviour and no other.
LEGACY = {"loss_positions": LossPositions.ALL.value, "stop_metric": StopMetric.LOSS.value}


@dataclass(frozen=True)
class TrainSettings:
    max_steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-3
    weight_decay: float = 0.01
    eval_every: int = 25
    # Stop "solved" once validation accuracy has been >= stop_accuracy for stop_evals evaluations in
    # a row, or "stalled" once the best validation `stop_metric` has not improved by plateau_tolerance
    # (relative for a loss, absolute for accuracy) for plateau_steps steps: a model that cannot learn
    # the task stops wasting steps.
    stop_accuracy: float = 0.99
    stop_evals: int = 2
    plateau_steps: int = 250
    plateau_tolerance: float = 0.01
    stop_metric: StopMetric = StopMetric.SCORED_LOSS
    loss_positions: LossPositions = LossPositions.ALL
    # Save weights every snapshot_every steps (and at step 0) for probes that replay training; 0 = never.
    snapshot_every: int = 0
    # Learning rate rises linearly to lr over the first warmup_steps steps (step s: lr * s / warmup_steps),
    # then stays at lr; 0 = no warmup, the constant lr from the first step.
    warmup_steps: int = 0

    def validate(self) -> "TrainSettings":
        if type(self.warmup_steps) is not int or self.warmup_steps < 0:
            raise UsageError(f"warmup_steps must be a non-negative integer (0 = no warmup), got {self.warmup_steps!r}")
        for name, kind in (("stop_metric", StopMetric), ("loss_positions", LossPositions)):
            if not isinstance(getattr(self, name), kind):
                raise UsageError(
                    f"{name} must be one of {', '.join(k.value for k in kind)}, got {getattr(self, name)!r}"
                )
        if type(self.snapshot_every) is not int or self.snapshot_every < 0:
            raise UsageError(
                f"snapshot_every must be a non-negative integer (0 = no snapshots), got {self.snapshot_every!r}"
            )
        for name in ("max_steps", "batch_size", "eval_every", "stop_evals", "plateau_steps"):
            value = getattr(self, name)
            if type(value) is not int or value <= 0:
                raise UsageError(f"{name} must be a positive integer, got {value!r}")
        for name in ("lr", "weight_decay", "stop_accuracy", "plateau_tolerance"):
            value = getattr(self, name)
            if type(value) not in (int, float) or not math.isfinite(value):
                raise UsageError(
                    f"{name} must be a finite number, got {value!r}; the default is {getattr(TrainSettings, name)}"
                )
        if self.max_steps > 1_000_000:
            raise UsageError(f"max_steps={self.max_steps} is absurd for a toy model; use at most 1000000")
        if self.batch_size > 65_536:
            raise UsageError(f"batch_size={self.batch_size} is absurd; use at most 65536")
        if not 0 < self.lr < 1:
            raise UsageError(f"lr must lie in (0, 1), got {self.lr}; try 1e-3")
        if self.weight_decay < 0:
            raise UsageError(f"weight_decay must be >= 0, got {self.weight_decay}")
        # At or below 0 every evaluation counts as solved: a run would stop "solved" at any accuracy.
        if self.stop_accuracy <= 0:
            raise UsageError(
                f"stop_accuracy must be > 0 (a validation accuracy; above 1 it never stops "
                f"training as solved), got {self.stop_accuracy}; the default is 0.99"
            )
        # Below 0 a worse evaluation counts as an improvement, and the stall rule never fires.
        if self.plateau_tolerance < 0:
            raise UsageError(
                f"plateau_tolerance must be >= 0 (how much the watched metric must improve), "
                f"got {self.plateau_tolerance}; the default is 0.01"
            )
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
        return cls(
            **{**values, **{name: choice(kind, values[name], name) for name, kind in CHOICES.items() if name in values}}
        ).validate()

    def describe_stop(self) -> str:
        """The stopping rule in words, as the run states it."""
        watched = {
            StopMetric.SCORED_LOSS: "the scored positions' validation loss",
            StopMetric.ACCURACY: "the scored positions' validation accuracy",
            StopMetric.LOSS: "the validation loss at every position",
        }[self.stop_metric]
        by = (
            f"{self.plateau_tolerance:g} (absolute)"
            if self.stop_metric is StopMetric.ACCURACY
            else f"{self.plateau_tolerance:.0%} (relative)"
        )
        return (
            f"solved at validation accuracy >= {self.stop_accuracy:g} for {self.stop_evals} evaluations; "
            f"stalled when {watched} has not improved by {by} for {self.plateau_steps} steps; "
            f"loss on {'every position' if self.loss_positions is LossPositions.ALL else 'the scored positions'}"
        )


CHOICES: dict[str, type[Enum]] = {"stop_metric": StopMetric, "loss_positions": LossPositions}


def choice(kind: type[Enum], value, name: str):
    """An Enum member from its value (the command line and JSON give strings)."""
    try:
        return kind(value)
    except ValueError:
        raise UsageError(f"{name} must be one of {', '.join(k.value for k in kind)}, got {value!r}") from None


def recorded_training(values: dict) -> dict:
    """A stored run's training settings, with what a field added since means for it (LEGACY)."""
    return {**LEGACY, **values} if isinstance(values, dict) else values


def settings_dict(settings: TrainSettings) -> dict:
    """JSON-ready: every field's plain value (the choices as their strings)."""
    return {name: value.value if isinstance(value, Enum) else value for name, value in asdict(settings).items()}


def model_settings(task, model_name: str | None, overrides: dict) -> TrainSettings:
    """The settings one model of `task` trains with: toylens's defaults, the task's
    default_training(), its model_training(model_name), then `overrides` (the command line)."""
    per_model = task.model_training(model_name) if model_name is not None else {}
    return TrainSettings.from_dict({**task.default_training(), **per_model, **overrides})
