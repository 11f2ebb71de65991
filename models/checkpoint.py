"""Checkpoints are `model.safetensors` + `config.json`, written atomically; nothing is unpickled.

`config.json` holds the model spec, the SHA-256 of the weights file and whatever the caller records
beside it (task, vocabulary, training settings, seed, versions). Loading checks everything it can
before importing torch (`inspect_checkpoint`), then rebuilds the variant with `build_model`, so
frozen weights and constants come back exactly as trained.

Compatibility: `format` names the layout. A run written by any toylens version with the same
format loads (unknown spec fields are refused by name; a spec field added after the run was written
takes its default, which is the behaviour the run was trained with); another format is refused
with the version that wrote it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import json
from pathlib import Path

from common.cli import UsageError
from common.atomic import atomic_write, write_json
from common.jsonfiles import sha256_file
from common.stages import timed
from common.store import damage, load_tensors, read_json, read_tensors, stored_values
from models.spec import ModelSpec, build_model, stored_spec

if TYPE_CHECKING:
    from models.bridge import Model

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
REQUIRED_CONFIG_FIELDS = ("format", "spec", "vocabulary")
FORMAT = "toylens-run/2"  # /2: config.json carries run_sha256 (runs of /1 predate it)
PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".pkl", ".ckpt")


def save_tensors(path: Path, tensors: dict, metadata: dict) -> None:
    """Tensors and a JSON-able `metadata` dict in one safetensors file, written atomically."""
    from safetensors.torch import save_file

    tensors = cpu_tensors(tensors)
    atomic_write(path, lambda temp: save_file(tensors, temp, metadata={"toylens": json.dumps(metadata)}))


def cpu_tensors(tensors: dict) -> dict:
    """What safetensors can write, wherever training ran (CPU or GPU): copies, because safetensors
    refuses tensors that share storage, as the parameters do while training's optimizer holds them
    in one buffer (tasks.training.optimizer)."""
    return {name: tensor.detach().to("cpu", copy=True).contiguous() for name, tensor in tensors.items()}


def load_weights(model: Model, path: Path, fix: str) -> None:
    """Load a weights file saved by `save_tensors` (a snapshot) into `model`, after the checks a
    run's weights get: exactly the model's tensors, shapes and dtypes, and finite values."""
    state, _ = load_tensors(path, fix)
    check_state(path, state, model.state_dict())
    model.load_state_dict(state)


@timed("save")
def save_checkpoint(run_dir: Path, model: Model, config: dict) -> str:
    """Weights first, config (with the weights' SHA-256) last: a config always names its weights.
    Returns that SHA-256."""
    from safetensors.torch import save_file

    weights = Path(run_dir) / WEIGHTS
    state = cpu_tensors(model.state_dict())
    atomic_write(weights, lambda temp: save_file(state, temp))
    digest = sha256_file(weights)
    write_json(Path(run_dir) / CONFIG, {**config, "format": FORMAT, "weights_sha256": digest})
    return digest


def writer(config: dict) -> str:
    """Which toylens wrote a config, for error messages."""
    versions = config.get("versions")
    found = versions.get("toylens") if isinstance(versions, dict) else None
    return f"toylens {found}" if found else "an unknown toylens version"


def read_config(run_dir: Path) -> dict:
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        raise UsageError(f"{path} not found; point at a run folder written by toylens training")
    config = read_json(path, "retrain the run or restore the file")
    if not isinstance(config, dict):
        raise UsageError(f"{path} must hold a JSON object; retrain the run")
    missing = [field for field in REQUIRED_CONFIG_FIELDS if field not in config]
    if missing:
        raise UsageError(f"{path} is missing field(s) {missing}; retrain the run")
    if config["format"] != FORMAT:
        raise UsageError(
            f"{path} has format {config['format']!r} (written by {writer(config)}), this "
            f"toylens reads {FORMAT!r}; use that toylens version or retrain the run"
        )
    return config


def inspect_checkpoint(run_dir: Path) -> tuple[dict, ModelSpec]:
    """(config, spec) after every check that needs no torch: files present, no pickles, config
    fields, spec, vocabulary size, and the weights' SHA-256 against the one config.json recorded."""
    run_dir = Path(run_dir)
    weights = run_dir / WEIGHTS
    if not weights.is_file():
        pickles = sorted(p.name for p in run_dir.iterdir() if p.suffix in PICKLE_SUFFIXES) if run_dir.is_dir() else []
        if pickles:
            raise UsageError(
                f"{run_dir / pickles[0]} is a pickled checkpoint; toylens loads only "
                f"safetensors ({WEIGHTS}) and never unpickles a file"
            )
        raise UsageError(f"{weights} not found; retrain the run (or resume it if it is unfinished)")
    config = read_config(run_dir)
    spec = stored_spec(config["spec"], run_dir / CONFIG)
    vocabulary = config["vocabulary"]
    if not isinstance(vocabulary, list) or len(vocabulary) != spec.d_vocab:
        size = len(vocabulary) if isinstance(vocabulary, list) else "no list of"
        raise UsageError(
            f"{run_dir / CONFIG}: vocabulary has {size} tokens but the model expects "
            f"d_vocab={spec.d_vocab}; the files do not belong together"
        )
    spec.check_memory()
    recorded = config.get("weights_sha256")
    if recorded is None:
        raise UsageError(
            f"{run_dir / CONFIG} records no weights_sha256, so {WEIGHTS} cannot be verified; retrain the run"
        )
    if sha256_file(weights) != recorded:
        problem = damage(weights)
        if problem == "corrupt or truncated":
            problem = "corrupt or truncated, or not the file config.json was written with (SHA-256 differs)"
        raise UsageError(f"{weights} is {problem}; retrain the run")
    held = stored_values(weights)
    if spec.parameter_count() > 1.5 * held + 10_000:
        # Checked from the file's header, before a model of the spec's size is allocated.
        raise UsageError(
            f"{run_dir / CONFIG}: its spec describes ~{spec.parameter_count()} parameters but {WEIGHTS} "
            f"holds {held} values; the files do not belong together"
        )
    return config, spec


def load_checkpoint(run_dir: Path):
    """(model in eval mode, config dict), after checking the files agree with each other."""
    config, spec = inspect_checkpoint(run_dir)
    weights = Path(run_dir) / WEIGHTS
    state = read_tensors(weights, lambda error: f"{weights} is {damage(weights)} ({error}); retrain the run")
    import torch

    with torch.device("cpu"):  # where read_tensors put the weights, whatever default a notebook set
        model = build_model(spec, seed=config["seed"])
    check_state(weights, state, model.state_dict())
    model.load_state_dict(state)
    model.eval()
    return model, config


def check_state(path: Path, state: dict, expected: dict) -> None:
    """Weights that fit the model exactly: the same tensors, shapes and dtypes (an int8 or bool
    tensor would be cast silently), and every value finite."""
    import torch

    if set(state) != set(expected):
        raise UsageError(
            f"{path} holds tensors {sorted(set(state) ^ set(expected))[:3]} that "
            "do not match the spec in config.json; the files do not belong together"
        )
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape or tensor.dtype != expected[name].dtype:
            raise UsageError(
                f"{path}: {name} is {tensor.dtype} {tuple(tensor.shape)}, the spec expects "
                f"{expected[name].dtype} {tuple(expected[name].shape)}; the files do not belong together"
            )
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise UsageError(
                f"{path}: {name} holds {bad} NaN or infinite value(s); the run diverged "
                "or the file was altered: retrain it (with a lower --lr if it diverged)"
            )
