"""The complete state of an unfinished training run, in one safetensors file written atomically.

Tensors: the model's weights ("model.*"), AdamW's per-parameter state ("optimizer.<index>.<key>")
and the batch-sampling generator's state ("generator"). The step, the evaluation history and the
elapsed seconds ride along as JSON in the file's metadata. One file means one rename: a run killed
at any moment (SIGKILL included) leaves either the previous state or the new one, never a mix, and
resuming from it replays the remaining steps bit for bit. Nothing is pickled.
"""

from __future__ import annotations

from pathlib import Path

from models import UsageError
from models.checkpoint import load_tensors, save_tensors

STATE = "train_state.safetensors"
STATE_FORMAT = "toylens-train-state/1"
FRESH = {"step": 0, "history": [], "seconds": 0.0}


def save_train_state(path: Path, model, optimizer, generator, progress: dict) -> None:
    tensors = {f"model.{name}": tensor for name, tensor in model.state_dict().items()}
    for index, state in optimizer.state_dict()["state"].items():
        # AdamW keeps only tensors per parameter (step, exp_avg, exp_avg_sq).
        tensors.update({f"optimizer.{index}.{key}": value for key, value in state.items()})
    tensors["generator"] = generator.get_state()
    save_tensors(path, tensors, {"format": STATE_FORMAT, **progress})


def load_train_state(path: Path, model, optimizer, generator) -> dict:
    """Restore model, optimizer and generator in place from `path`; returns the saved progress."""
    fix = "pass --overwrite to start the run again"
    tensors, progress = load_tensors(path, fix)
    if progress.get("format") != STATE_FORMAT:
        raise UsageError(f"{path} has format {progress.get('format')!r}, not {STATE_FORMAT!r}; {fix}")
    weights = {name.removeprefix("model."): t for name, t in tensors.items() if name.startswith("model.")}
    expected = model.state_dict()
    if set(weights) != set(expected) or any(weights[n].shape != expected[n].shape for n in expected):
        raise UsageError(f"{path} holds weights of another model; {fix}")
    model.load_state_dict(weights)
    state: dict[int, dict] = {}
    for name, tensor in tensors.items():
        if name.startswith("optimizer."):
            _, index, key = name.split(".", 2)
            state.setdefault(int(index), {})[key] = tensor
    # Hyperparameters come from the run's settings, which the caller has matched against config.json.
    optimizer.load_state_dict({"state": state, "param_groups": optimizer.state_dict()["param_groups"]})
    generator.set_state(tensors["generator"])
    return {key: progress[key] for key in FRESH}
