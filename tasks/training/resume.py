"""The complete state of an unfinished training run, in one safetensors file written atomically.

Tensors: the model's weights ("model.*"), AdamW's per-parameter state ("optimizer.<index>.<key>")
and the batch-sampling generator's state ("generator"). The step, the evaluation history and the
elapsed seconds ride along as JSON in the file's metadata. One file means one rename: a run killed
at any moment (SIGKILL included) leaves either the previous state or the new one, never a mix, and
resuming from it replays the remaining steps bit for bit. Nothing is pickled.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from models import UsageError
from common.jsonfiles import canonical_sha256, short
from common.store import load_tensors
from models.checkpoint import check_state, cpu_tensors, save_tensors
from models import Model
from tasks.validate import is_int

STATE = "train_state.safetensors"
STATE_FORMAT = "toylens-train-state/1"


class Progress(TypedDict):
    """How far a run got: its step, every evaluation so far, and the seconds it trained."""

    step: int
    history: list[dict]
    seconds: float


FRESH: Progress = {"step": 0, "history": [], "seconds": 0.0}
HISTORY_FIELDS = {"step", "train_loss", "val_loss", "val_scored_loss", "val_accuracy", "seconds"}
ADAM_KEYS = {"step", "exp_avg", "exp_avg_sq"}


def save_train_state(path: Path, model: Model, optimizer, generator, progress: dict) -> None:
    tensors = {f"model.{name}": tensor for name, tensor in model.state_dict().items()}
    for index, state in optimizer.state_dict()["state"].items():
        # AdamW keeps only tensors per parameter (step, exp_avg, exp_avg_sq).
        tensors.update({f"optimizer.{index}.{key}": value for key, value in state.items()})
    tensors["generator"] = generator.get_state()
    tensors = cpu_tensors(tensors)
    metadata = {"format": STATE_FORMAT, **progress}
    save_tensors(path, tensors, {**metadata, "sha256": state_sha256(tensors, metadata)})


def state_sha256(tensors: dict, metadata: dict) -> str:
    """One checksum over every tensor (name, dtype, shape, bytes) and the progress, so an edited
    state is refused like edited weights (~10 ms for a 2-block model's weights and moments)."""
    import hashlib

    import torch

    digest = hashlib.sha256(canonical_sha256({k: v for k, v in metadata.items() if k != "sha256"}).encode())
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def load_train_state(path: Path, model: Model, optimizer, generator, settings) -> Progress:
    """Restore model, optimizer and generator in place from `path`, after one schema check of the
    whole file; returns the saved progress."""
    fix = "pass --overwrite to start the run again"
    tensors, metadata = load_tensors(path, fix)
    if not isinstance(metadata, dict) or metadata.get("sha256") != state_sha256(tensors, metadata):
        raise UsageError(
            f"{path} was changed after toylens wrote it (or written by an older toylens): its checksum differs; {fix}"
        )
    progress = check_progress(metadata, settings, path, fix)
    weights = {name.removeprefix("model."): t for name, t in tensors.items() if name.startswith("model.")}
    check_state(path, weights, model.state_dict())
    optimizer_state = check_optimizer(tensors, model, progress["step"], path, fix)
    expected = generator.get_state()
    saved = tensors.get("generator")
    if saved is None or saved.dtype != expected.dtype or saved.shape != expected.shape:
        raise UsageError(f"{path} holds no usable batch-generator state; {fix}")
    model.load_state_dict(weights)
    # Hyperparameters come from the run's settings, which the caller has matched against config.json.
    optimizer.load_state_dict({"state": optimizer_state, "param_groups": optimizer.state_dict()["param_groups"]})
    generator.set_state(saved)
    return progress


def check_progress(progress, settings, path: Path, fix: str) -> Progress:
    """step, history and seconds of exactly their types, and consistent with each other and the
    run's settings: evaluations come every eval_every steps, so the history fixes the step."""
    if not isinstance(progress, dict) or progress.get("format") != STATE_FORMAT:
        found = progress.get("format") if isinstance(progress, dict) else progress
        raise UsageError(f"{path} has format {short(found)}, not {STATE_FORMAT!r}; {fix}")
    step, history, seconds = progress.get("step"), progress.get("history"), progress.get("seconds")
    if not (is_int(step) and 0 < step <= settings.max_steps):
        raise UsageError(f"{path}: step must be an integer from 1 to {settings.max_steps}, got {short(step)}; {fix}")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds < 1e9:
        raise UsageError(f"{path}: seconds must be a non-negative number, got {short(seconds)}; {fix}")
    steps = list(range(settings.eval_every, step + 1, settings.eval_every))
    if step == settings.max_steps and step % settings.eval_every:
        steps.append(step)  # the last step is always evaluated
    if not (
        isinstance(history, list)
        and [h.get("step") if isinstance(h, dict) else None for h in history] == steps
        and all(set(h) == HISTORY_FIELDS and all(type(h[k]) in (int, float) for k in HISTORY_FIELDS) for h in history)
    ):
        raise UsageError(
            f"{path}: history must hold one evaluation per {settings.eval_every} steps up to step "
            f"{step}, each with {sorted(HISTORY_FIELDS)}; {fix}"
        )
    return {"step": step, "history": history, "seconds": float(seconds)}


def check_optimizer(tensors: dict, model: Model, step: int, path: Path, fix: str) -> dict:
    """AdamW's state for every trainable parameter, shaped like it, having taken exactly `step` steps
    (which ties the recorded step to the weights the optimizer moved)."""
    import torch

    parameters = [p for p in model.parameters() if p.requires_grad]  # what tasks.training.loop.adamw steps
    state: dict[int, dict] = {}
    for name, tensor in tensors.items():
        if name.startswith("model.") or name == "generator":
            continue
        parts = name.split(".")
        if len(parts) != 3 or parts[0] != "optimizer" or not parts[1].isdigit() or parts[2] not in ADAM_KEYS:
            raise UsageError(f"{path} holds an unexpected tensor {name!r}; {fix}")
        state.setdefault(int(parts[1]), {})[parts[2]] = tensor
    if set(state) != set(range(len(parameters))) or any(set(s) != ADAM_KEYS for s in state.values()):
        raise UsageError(
            f"{path} does not hold AdamW's state for each of the model's {len(parameters)} trainable parameters; {fix}"
        )
    for index, parameter in enumerate(parameters):
        moments = state[index]
        if any(
            moments[key].shape != parameter.shape or moments[key].dtype != parameter.dtype
            for key in ("exp_avg", "exp_avg_sq")
        ):
            raise UsageError(f"{path}: AdamW state {index} does not fit the parameter's shape; {fix}")
        if (
            moments["step"].numel() != 1
            or float(moments["step"]) != step
            or not all(bool(torch.isfinite(moments[k]).all()) for k in ADAM_KEYS)
        ):
            raise UsageError(
                f"{path}: AdamW took {short(moments['step'].tolist())} steps but the state says "
                f"step {step} (or holds NaN); the file was altered; {fix}"
            )
    return state
