"""One training loop for every task: AdamW on next-token loss, evaluation at the scored positions of
a validation split, a stopping rule that never sees held-out data, and a hard step budget.

TransformerLens's `tools/training.py` trains on LM loss only, with no splits, no answer masks and no
stopping rule, which is why this loop is written here.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import torch

from common.stages import timed
from models.checkpoint import save_tensors
from common.atomic import atomic_write
from tasks.data import Batch, real_positions
from tasks.evaluate import logits_at_scored, score_logits
from models.fused import training_forward
from models import Model
from tasks.training.optimizer import FlatAdamW
from tasks.training.resume import FRESH, load_train_state, save_train_state
from tasks.settings import LossPositions, StopMetric, StopReason, TrainSettings

if TYPE_CHECKING:
    from tqdm import tqdm
    from transformer_lens import TransformerBridge

SNAPSHOTS = "snapshots"  # run_dir/snapshots/step{N}.safetensors
# The train state (weights and AdamW moments) is ~20 ms to write for a 2-block model: at every
# evaluation that was 1-3% of training; every 4th loses at most 100 steps (seconds) to a kill.
CHECKPOINT_EVALS = 4


@dataclass(frozen=True)
class TrainResult:
    steps: int
    stop_reason: StopReason
    seconds: float
    history: list[dict]


def lm_loss(logits: torch.Tensor, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over the real (unpadded) positions."""
    targets = tokens[:, 1:]
    real = real_positions(lengths, targets.shape[1])
    return torch.nn.functional.cross_entropy(logits[real], targets[real])


def scored_loss(logits: torch.Tensor, tokens: torch.Tensor, scored: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the answers at the scored positions; `scored` [n, length - 1] is True
    there (scored_mask)."""
    return torch.nn.functional.cross_entropy(logits[scored], tokens[:, 1:][scored])


def scored_mask(batch: Batch) -> torch.Tensor:
    """[n, length - 1] True at each example's scored positions."""
    mask = torch.zeros(batch.inputs.shape, dtype=torch.bool, device=batch.tokens.device)
    mask[batch.example_index, batch.positions] = True
    return mask


@torch.no_grad()
def evaluate(model: Model, batch: Batch) -> dict:
    logits = model(batch.inputs)
    scored = score_logits(logits_at_scored(logits, batch), batch)
    return {
        "val_loss": lm_loss(logits, batch.tokens, batch.lengths).item(),
        "val_accuracy": scored.accuracy,
        "val_scored_loss": scored.loss.item(),
    }


WATCHED = {StopMetric.SCORED_LOSS: "val_scored_loss", StopMetric.ACCURACY: "val_accuracy", StopMetric.LOSS: "val_loss"}


def stop_reason(history: list[dict], settings: TrainSettings) -> StopReason | None:
    """Why training should stop after the last evaluation, or None. Validation only, never held-out."""
    recent = history[-settings.stop_evals :]
    if len(recent) == settings.stop_evals and all(h["val_accuracy"] >= settings.stop_accuracy for h in recent):
        return StopReason.SOLVED
    key, tolerance = WATCHED[settings.stop_metric], settings.plateau_tolerance
    # A loss must fall by a share of itself; accuracy rise by points (a share of ~0 would be nothing).
    better = (
        (lambda value, best: value > best + tolerance)
        if settings.stop_metric is StopMetric.ACCURACY
        else (lambda value, best: value < best * (1 - tolerance))
    )
    best, best_step = None, 0
    for entry in history:
        if best is None or better(entry[key], best):
            best, best_step = entry[key], entry["step"]
    if history and history[-1]["step"] - best_step >= settings.plateau_steps:
        return StopReason.STALLED
    return None


@timed("steps")
def train(
    model: Model,
    train_batch: Batch,
    validation_batch: Batch,
    settings: TrainSettings,
    seed: int,
    log_path: Path | None = None,
    progress: bool = True,
    label: str = "",
    snapshot_dir: Path | None = None,
    state_path: Path | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
) -> TrainResult:
    """Train `model` in place. With `state_path`, the complete train state is saved there every
    `checkpoint_every` steps (default: every CHECKPOINT_EVALS evaluations); with `resume`, training
    continues from it and ends with exactly the weights and history of an uninterrupted run."""
    device = training_device()
    if device != "cpu":
        model.to(device, print_details=False)
    run = start_training(
        model,
        train_batch.to(device),
        validation_batch.to(device),
        settings,
        seed,
        state_path if resume else None,
        log_path,
        progress,
        label,
    )
    try:
        stop = take_steps(run, snapshot_dir, state_path, checkpoint_every or CHECKPOINT_EVALS * settings.eval_every)
    finally:
        finish(run, device)
    return TrainResult(
        steps=run.history[-1]["step"] if run.history else 0,
        stop_reason=stop or StopReason.BUDGET,
        seconds=run.seconds(),
        history=run.history,
    )


@dataclass(frozen=True)
class Training:
    """One run in progress: what each step uses, and where its evaluations are recorded."""

    model: TransformerBridge
    forward: torch.nn.Module  # models.fused.training_forward(model): the same weights, fewer hooks
    optimizer: FlatAdamW
    generator: torch.Generator  # draws each step's rows; in the train state, so a resumed run draws the same
    train_batch: Batch
    train_scored: torch.Tensor | None  # [n, length - 1] the positions the loss is on, when only scored ones are
    validation_batch: Batch
    settings: TrainSettings
    steps_done: int  # before this call: the resumed state's step, else 0
    history: list[dict]  # every evaluation so far, the resumed ones included
    start: float  # perf_counter at step 0 (a resumed run's seconds earlier)
    log: TextIO | None
    bar: tqdm

    def seconds(self) -> float:
        return time.perf_counter() - self.start


def start_training(
    model: Model,
    train_batch: Batch,
    validation_batch: Batch,
    settings: TrainSettings,
    seed: int,
    resume_from: Path | None,
    log_path: Path | None,
    progress: bool,
    label: str,
) -> Training:
    """A fresh run, or the one saved at `resume_from` when that file exists."""
    from tqdm.auto import tqdm

    train_scored = scored_mask(train_batch) if settings.loss_positions is LossPositions.SCORED else None
    forward = training_forward(model)
    generator, optimizer = torch.Generator().manual_seed(seed), adamw(model, settings)
    done = FRESH
    if resume_from is not None and Path(resume_from).is_file():
        done = load_train_state(resume_from, model, optimizer, generator, settings)
    history: list[dict] = list(done["history"])
    start = time.perf_counter() - done["seconds"]
    log = open_log(log_path, history) if log_path else None
    bar = tqdm(
        range(done["step"] + 1, settings.max_steps + 1),
        desc=label,
        disable=not progress,
        leave=False,
        dynamic_ncols=True,
        initial=done["step"],
        total=settings.max_steps,
    )
    return Training(
        model,
        forward,
        optimizer,
        generator,
        train_batch,
        train_scored,
        validation_batch,
        settings,
        done["step"],
        history,
        start,
        log,
        bar,
    )


def take_steps(
    run: Training, snapshot_dir: Path | None, state_path: Path | None, checkpoint_every: int
) -> StopReason | None:
    """Steps up to the budget; why validation stopped them early, or None."""
    settings = run.settings
    snapshots = snapshot_dir if settings.snapshot_every else None  # the folder snapshots go to, if any
    if snapshots is not None and run.steps_done == 0:
        save_snapshot(run.model, snapshots, 0)
    # Mode switches only around evaluations: the bridge's train() walks every wrapper twice and
    # cost ~5 ms, a tenth of a one-block step, when called every step (measured).
    run.forward.train()
    for step in run.bar:
        loss = update(run, step)
        if snapshots is not None and step % settings.snapshot_every == 0:
            save_snapshot(run.model, snapshots, step)
        if step % settings.eval_every == 0 or step == settings.max_steps:
            stop = evaluate_and_stop(run, step, loss)
            if stop:
                return stop
        if state_path is not None and step % checkpoint_every == 0:
            save_train_state(
                state_path,
                run.model,
                run.optimizer,
                run.generator,
                {"step": step, "history": run.history, "seconds": run.seconds()},
            )
    return None


def update(run: Training, step: int) -> torch.Tensor:
    """One AdamW step on `batch_size` rows drawn from the training split; the loss it descended."""
    rows = torch.randint(len(run.train_batch), (run.settings.batch_size,), generator=run.generator)
    tokens, lengths = run.train_batch.tokens[rows], run.train_batch.lengths[rows]
    logits = run.forward(tokens[:, :-1])
    loss = (
        scored_loss(logits, tokens, run.train_scored[rows])
        if run.train_scored is not None
        else lm_loss(logits, tokens, lengths)
    )
    run.optimizer.zero_grad()
    loss.backward()
    for group in run.optimizer.param_groups:  # a function of the step alone, so a resumed run matches
        group["lr"] = run.settings.lr_at(step)
    run.optimizer.step()
    return loss


def evaluate_and_stop(run: Training, step: int, loss: torch.Tensor) -> StopReason | None:
    """Evaluate on the validation split, record it, and say whether training stops here."""
    run.forward.eval()
    entry = {
        "step": step,
        "train_loss": loss.item(),
        **evaluate(run.forward, run.validation_batch),
        "seconds": round(run.seconds(), 3),
    }
    record(entry, run.history, run.log, run.bar, bar_loss(run.settings))
    stop = stop_reason(run.history, run.settings)
    if not stop:
        run.forward.train()
    return stop


def finish(run: Training, device: str) -> None:
    """The model back in eval mode on the CPU, its parameters in storage of their own, whether
    training ended or was interrupted."""
    run.bar.close()
    if run.log:
        run.log.close()
    run.optimizer.release()
    run.model.eval()
    if device != "cpu":
        run.model.to("cpu", print_details=False)


def adamw(model: Model, settings: TrainSettings) -> FlatAdamW:
    return FlatAdamW([p for p in model.parameters() if p.requires_grad], settings.lr, settings.weight_decay)


def bar_loss(settings: TrainSettings) -> str:
    """The validation loss the bar shows: the one the stopping rule watches, else the one on the
    positions training descends. The all-position loss rose from 3.3 to 4.4 while validation
    accuracy went 0.50 -> 1.00 on Winograd, which stops on the scored loss (issue #37)."""
    if settings.stop_metric is not StopMetric.ACCURACY:
        return WATCHED[settings.stop_metric]
    return "val_scored_loss" if settings.loss_positions is LossPositions.SCORED else "val_loss"


def record(entry: dict, history: list[dict], log, bar, loss_key: str = "val_scored_loss") -> None:
    """One evaluation: into the history, the log (flushed, so an interrupted run keeps it) and the bar."""
    history.append(entry)
    if log:
        log.write(json.dumps(entry) + "\n")
        log.flush()
    bar.set_postfix({loss_key: f"{entry[loss_key]:.3f}", "val_acc": f"{entry['val_accuracy']:.3f}"})


def training_device() -> str:
    """A GPU when one is present; tiny models still train, just without waiting on 2 CPU cores."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def open_log(log_path: Path, history: list[dict]):
    """The JSON-lines log, rewritten to hold exactly `history` (a resumed run drops lines logged
    after its last saved state), opened for appending."""
    atomic_write(
        log_path, lambda temp: Path(temp).write_text("".join(json.dumps(h) + "\n" for h in history)), grows=True
    )
    return open(log_path, "a")


def snapshot_path(snapshot_dir: Path, step: int) -> Path:
    return Path(snapshot_dir) / f"step{step}.safetensors"


def save_snapshot(model: Model, snapshot_dir: Path, step: int) -> None:
    """Weights only (no optimizer state): enough to replay what the model computed at `step`."""
    save_tensors(snapshot_path(snapshot_dir, step), model.state_dict(), {"step": step})
