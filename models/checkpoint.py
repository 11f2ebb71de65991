"""Checkpoints are `model.safetensors` + `config.json`, written atomically; nothing is unpickled.

`config.json` holds the model spec and whatever the caller records beside it (task, vocabulary,
training settings, seed, versions). Loading rebuilds the variant with `build_model`, so frozen
weights and constants come back exactly as trained.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from models.errors import UsageError
from models.spec import ModelSpec, build_model

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
REQUIRED_CONFIG_FIELDS = ("format", "spec", "vocabulary")
FORMAT = "toylens-run/1"


def atomic_write(path: Path, write) -> None:
    """Call `write(temp_path)` and rename the result over `path`: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(temp)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def write_json(path: Path, payload) -> None:
    def write(temp):
        Path(temp).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")

    atomic_write(path, write)


def save_checkpoint(run_dir: Path, model, config: dict) -> None:
    """Weights first, config last: a run dir with a config always has matching weights."""
    from safetensors.torch import save_file

    state = {name: tensor.detach().contiguous() for name, tensor in model.state_dict().items()}
    atomic_write(Path(run_dir) / WEIGHTS, lambda temp: save_file(state, temp))
    write_json(Path(run_dir) / CONFIG, {"format": FORMAT, **config})


def read_config(run_dir: Path) -> dict:
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        raise UsageError(f"{path} not found; point at a run folder written by toylens training")
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"{path} is not valid JSON ({error.msg if hasattr(error, 'msg') else error}); "
                         "retrain the run or restore the file") from None
    if not isinstance(config, dict):
        raise UsageError(f"{path} must hold a JSON object; retrain the run")
    missing = [field for field in REQUIRED_CONFIG_FIELDS if field not in config]
    if missing:
        raise UsageError(f"{path} is missing field(s) {missing}; retrain the run")
    if config["format"] != FORMAT:
        raise UsageError(f"{path} has format {config['format']!r}, this toylens reads {FORMAT!r}; "
                         "retrain the run with this version")
    return config


def load_checkpoint(run_dir: Path):
    """(model in eval mode, config dict), after checking the files agree with each other."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    run_dir = Path(run_dir)
    pickles = sorted(p.name for p in run_dir.glob("*.pt")) + sorted(p.name for p in run_dir.glob("*.pth"))
    weights_path = run_dir / WEIGHTS
    if not weights_path.is_file():
        if pickles:
            raise UsageError(f"{run_dir / pickles[0]} is a pickled checkpoint; toylens loads only "
                             f"safetensors ({WEIGHTS}) and never unpickles a file")
        raise UsageError(f"{weights_path} not found; retrain the run")
    config = read_config(run_dir)
    spec = ModelSpec.from_dict(config["spec"])
    vocabulary = config["vocabulary"]
    if not isinstance(vocabulary, list) or len(vocabulary) != spec.d_vocab:
        raise UsageError(f"{run_dir / CONFIG}: vocabulary has {len(vocabulary)} tokens but the "
                         f"model expects d_vocab={spec.d_vocab}; the files do not belong together")
    try:
        state = load_file(str(weights_path))
    except (SafetensorError, OSError, ValueError) as error:
        raise UsageError(f"{weights_path} is corrupt or truncated ({error}); retrain the run") from None
    model = build_model(spec, seed=int(config.get("seed", 0)))
    expected = model.state_dict()
    if set(state) != set(expected):
        raise UsageError(f"{weights_path} holds tensors {sorted(set(state) ^ set(expected))[:3]} that "
                         "do not match the spec in config.json; the files do not belong together")
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape:
            raise UsageError(f"{weights_path}: {name} has shape {tuple(tensor.shape)}, spec expects "
                             f"{tuple(expected[name].shape)}; the files do not belong together")
    model.load_state_dict(state)
    model.eval()
    return model, config
