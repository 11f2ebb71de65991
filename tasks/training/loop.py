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

import torch

from models.checkpoint import save_tensors
from common.atomic import atomic_write
from tasks.data import Batch, real_positions
from tasks.evaluate import logits_at_scored, score_logits
from models.fused import training_forward
from tasks.training.optimizer import FlatAdamW
from tasks.training.resume import FRESH, load_train_state, save_train_state
from tasks.settings import LossPositions, StopMetric, StopReason, TrainSettings

SNAPSHOTS = "snapshots"   # run_dir/snapshots/step{N}.safetensors
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
def evaluate(model, batch: Batch) -> dict:
    logits = model(batch.inputs)
    scored = score_logits(logits_at_scored(logits, batch), batch)
    return {"val_loss": lm_loss(logits, batch.tokens, batch.lengths).item(), "val_accuracy": scored.accuracy,
            "val_scored_loss": scored.loss.item()}


WATCHED = {StopMetric.SCORED_LOSS: "val_scored_loss", StopMetric.ACCURACY: "val_accuracy", StopMetric.LOSS: "val_loss"}


def stop_reason(history: list[dict], settings: TrainSettings) -> StopReason | None:
    """Why training should stop after the last evaluation, or None. Validation only, never held-out."""
    recent = history[-settings.stop_evals:]
    if len(recent) == settings.stop_evals and all(h["val_accuracy"] >= settings.stop_accuracy for h in recent):
        return StopReason.SOLVED
    key, tolerance = WATCHED[settings.stop_metric], settings.plateau_tolerance
    # A loss must fall by a share of itself; accuracy rise by points (a share of ~0 would be nothing).
    better = ((lambda value, best: value > best + tolerance) if settings.stop_metric is StopMetric.ACCURACY
              else (lambda value, best: value < best * (1 - tolerance)))
    best, best_step = None, 0
    for entry in history:
        if best is None or better(entry[key], best):
            best, best_step = entry[key], entry["step"]
    if history and history[-1]["step"] - best_step >= settings.plateau_steps:
        return StopReason.STALLED
    return None


def train(model, train_batch: Batch, validation_batch: Batch, settings: TrainSettings, seed: int,
          log_path: Path | None = None, progress: bool = True, label: str = "",
          snapshot_dir: Path | None = None, state_path: Path | None = None,
          checkpoint_every: int | None = None, resume: bool = False) -> TrainResult:
    """Train `model` in place. With `state_path`, the complete train state is saved there every
    `checkpoint_every` steps (default: every CHECKPOINT_EVALS evaluations); with `resume`, training
    continues from it and ends with exactly the weights and history of an uninterrupted run."""
    from tqdm.auto import tqdm

    device = training_device()
    if device != "cpu":
        model.to(device, print_details=False)
    train_batch, validation_batch = train_batch.to(device), validation_batch.to(device)
    scored_only = settings.loss_positions is LossPositions.SCORED
    train_scored = scored_mask(train_batch) if scored_only else None
    forward = training_forward(model)
    generator, optimizer = torch.Generator().manual_seed(seed), adamw(model, settings)
    resuming = resume and state_path is not None and Path(state_path).is_file()
    done = load_train_state(state_path, model, optimizer, generator, settings) if resuming else FRESH
    history: list[dict] = list(done["history"])
    start = time.perf_counter() - done["seconds"]
    log = open_log(log_path, history) if log_path else None
    checkpoint_every = checkpoint_every or CHECKPOINT_EVALS * settings.eval_every
    stop = None
    bar = tqdm(range(done["step"] + 1, settings.max_steps + 1), desc=label, disable=not progress,
               leave=False, dynamic_ncols=True, initial=done["step"], total=settings.max_steps)
    if snapshot_dir and settings.snapshot_every and done["step"] == 0:
        save_snapshot(model, snapshot_dir, 0)
    # Mode switches only around evaluations: the bridge's train() walks every wrapper twice and
    # cost ~5 ms, a tenth of a one-block step, when called every step (measured).
    forward.train()
    try:
        for step in bar:
            rows = torch.randint(len(train_batch), (settings.batch_size,), generator=generator)
            tokens, lengths = train_batch.tokens[rows], train_batch.lengths[rows]
            logits = forward(tokens[:, :-1])
            loss = scored_loss(logits, tokens, train_scored[rows]) if scored_only else lm_loss(logits, tokens, lengths)
            optimizer.zero_grad()
            loss.backward()
            for group in optimizer.param_groups:   # a function of the step alone, so a resumed run matches
                group["lr"] = settings.lr_at(step)
            optimizer.step()
            if snapshot_dir and settings.snapshot_every and step % settings.snapshot_every == 0:
                save_snapshot(model, snapshot_dir, step)
            if step % settings.eval_every == 0 or step == settings.max_steps:
                forward.eval()
                entry = {"step": step, "train_loss": loss.item(), **evaluate(forward, validation_batch),
                         "seconds": round(time.perf_counter() - start, 3)}
                record(entry, history, log, bar)
                stop = stop_reason(history, settings)
                if stop:
                    break
                forward.train()
            if state_path is not None and step % checkpoint_every == 0:
                save_train_state(state_path, model, optimizer, generator,
                                 {"step": step, "history": history, "seconds": time.perf_counter() - start})
    finally:
        bar.close()
        if log:
            log.close()
        optimizer.release()
        model.eval()
        if device != "cpu":
            model.to("cpu", print_details=False)
    return TrainResult(steps=history[-1]["step"] if history else 0, stop_reason=stop or StopReason.BUDGET,
                       seconds=time.perf_counter() - start, history=history)


def adamw(model, settings: TrainSettings) -> FlatAdamW:
    return FlatAdamW([p for p in model.parameters() if p.requires_grad], settings.lr, settings.weight_decay)


def record(entry: dict, history: list[dict], log, bar) -> None:
    """One evaluation: into the history, the log (flushed, so an interrupted run keeps it) and the bar."""
    history.append(entry)
    if log:
        log.write(json.dumps(entry) + "\n")
        log.flush()
    bar.set_postfix(loss=f"{entry['val_loss']:.3f}", val_acc=f"{entry['val_accuracy']:.3f}")


def training_device() -> str:
    """A GPU when one is present; tiny models still train, just without waiting on 2 CPU cores."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def open_log(log_path: Path, history: list[dict]):
    """The JSON-lines log, rewritten to hold exactly `history` (a resumed run drops lines logged
    after its last saved state), opened for appending."""
    atomic_write(log_path, lambda temp: Path(temp).write_text("".join(json.dumps(h) + "\n" for h in history)),
                 grows=True)
    return open(log_path, "a")


def snapshot_path(snapshot_dir: Path, step: int) -> Path:
    return Path(snapshot_dir) / f"step{step}.safetensors"


def save_snapshot(model, snapshot_dir: Path, step: int) -> None:
    """Weights only (no optimizer state): enough to replay what the model computed at `step`."""
    save_tensors(snapshot_path(snapshot_dir, step), model.state_dict(), {"step": step})
