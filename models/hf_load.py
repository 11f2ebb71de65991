"""A local Hugging Face folder (`save_pretrained`) as a TransformerLens bridge, with the hub off.

Offline is the normal case on clusters, and a model id given to TransformerLens could still reach
the network (TransformerLens issue #846). So the folder is read here, never a hub id: the config,
the weights (safetensors only; a folder of pickles is refused, nothing is unpickled) and the
folder's own tokenizer load with `local_files_only=True` while HF_HUB_OFFLINE and
TRANSFORMERS_OFFLINE are set, and `TransformerBridge.boot_transformers(PATH, hf_model=...,
tokenizer=...)` wraps the model already loaded (eager attention, so pattern hooks fire). Everything
checkable without torch is checked first (`inspect_folder`), each refusal one line naming the fix:
a folder that is not a checkpoint of a supported family, pickled weights, or weights over the stated
memory budget.

Supported families (the bridge adapters toylens tests): GPT-2, GPT-NeoX (Pythia) and Llama.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from common.cli import UsageError
from common.store import read_json, stored_values

FAMILIES = {"gpt2": "GPT-2", "gpt_neox": "GPT-NeoX (Pythia)", "llama": "Llama"}
PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "tf_model.h5", "flax_model.msgpack")
DEFAULT_MEMORY_GIB = 8.0
# float32 weights once (the bridge wraps the HF modules, it does not copy them), plus room for the
# activations a report caches: measured peaks on the test models stay under this factor.
MEMORY_FACTOR = 2.5
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


@dataclass(frozen=True)
class Origin:
    """What an outside model is: the probes' description of it in place of a toylens spec."""

    path: str
    family: str  # the config's model_type (gpt2, gpt_neox, llama)
    architecture: str  # the HF class, e.g. GPT2LMHeadModel
    n_layers: int
    n_heads: int
    d_model: int
    d_vocab: int
    parameters: int

    @property
    def name(self) -> str:
        return f"{FAMILIES[self.family]} {self.n_layers}x{self.n_heads} d{self.d_model} from {self.path}"


@dataclass(frozen=True)
class Loaded:
    bridge: object  # TransformerBridge, eval mode
    hf_model: object  # the HF model the bridge wraps (eager attention), for the preflight's comparison
    tokenizer: object
    origin: Origin


@contextmanager
def offline():
    """The hub switched off for the duration, whatever the environment said; restored after.
    huggingface_hub reads HF_HUB_OFFLINE when imported, so its constant is set too."""
    saved = {name: os.environ.get(name) for name in OFFLINE}
    os.environ.update(OFFLINE)
    from huggingface_hub import constants  # a dependency of transformers and of TransformerLens

    was = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = was
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def weight_files(folder: Path) -> list[Path]:
    """The folder's safetensors files, or a refusal naming what it holds instead."""
    files = sorted(folder.glob("*.safetensors"))
    if files:
        return files
    pickles = [name for name in PICKLES if (folder / name).exists()] + sorted(p.name for p in folder.glob("*.pt*"))
    if pickles:
        raise UsageError(
            f"{folder / pickles[0]} is a pickled checkpoint; toylens loads only safetensors and never "
            "unpickles a file: re-save it with save_pretrained(..., safe_serialization=True)"
        )
    raise UsageError(f"{folder} holds no *.safetensors weights; point at a save_pretrained folder")


def inspect_folder(path, memory_gib: float = DEFAULT_MEMORY_GIB) -> tuple[dict, list[Path], int]:
    """(config.json, weight files, number of weights) after every check that needs no torch."""
    folder = Path(path)
    if not folder.is_dir():
        raise UsageError(f"{folder} is not a folder; point at a Hugging Face save_pretrained folder")
    if not (folder / "config.json").is_file():
        raise UsageError(f"{folder} has no config.json, so it is not a Hugging Face checkpoint folder")
    config = read_json(folder / "config.json", "re-save the model with save_pretrained")
    family = config.get("model_type") if isinstance(config, dict) else None
    if family not in FAMILIES:
        raise UsageError(
            f"{folder / 'config.json'}: model_type {family!r} is not supported; toylens loads "
            f"{', '.join(FAMILIES.values())} checkpoints"
        )
    files = weight_files(folder)
    values = 0
    for file in files:
        try:
            values += stored_values(file)
        except UsageError:
            raise UsageError(f"{file} is not a readable safetensors file; re-save the model") from None
    need = MEMORY_FACTOR * 4 * values
    if need > memory_gib * 2**30:
        raise UsageError(
            f"{folder}: {values:,} weights need ~{need / 2**30:.3g} GiB in float32 with room for "
            f"activations, over the memory budget of {memory_gib:g} GiB; raise --memory-gib or use a smaller model"
        )
    return config, files, values


def load_folder(path, memory_gib: float = DEFAULT_MEMORY_GIB, device: str = "cpu") -> Loaded:
    """The folder's model as a bridge in eval mode, with the HF model and tokenizer it wraps."""
    config, _, values = inspect_folder(path, memory_gib)
    import torch
    from transformer_lens import TransformerBridge
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = str(Path(path))
    with offline():
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except Exception as error:  # noqa: BLE001  (transformers raises many types for a missing tokenizer)
            raise UsageError(
                f"{folder}: no tokenizer loads from the folder ({type(error).__name__}); save the model's "
                "tokenizer beside it with tokenizer.save_pretrained(FOLDER)"
            ) from None
        try:
            hf_model = AutoModelForCausalLM.from_pretrained(
                folder, local_files_only=True, use_safetensors=True, attn_implementation="eager", dtype=torch.float32
            )
        except Exception as error:  # noqa: BLE001  (a damaged or mismatched checkpoint fails in many ways)
            raise UsageError(
                f"{folder}: the weights do not load ({type(error).__name__}: {str(error)[:160]}); re-save the model"
            ) from None
        torch.nn.Module.to(hf_model, torch.device(device)).eval()
        bridge = TransformerBridge.boot_transformers(folder, device=device, hf_model=hf_model, tokenizer=tokenizer)
    bridge.eval()
    origin = Origin(
        path=folder,
        family=config["model_type"],
        architecture=type(hf_model).__name__,
        n_layers=bridge.cfg.n_layers,
        n_heads=bridge.cfg.n_heads,
        d_model=bridge.cfg.d_model,
        d_vocab=bridge.cfg.d_vocab,
        parameters=values,
    )
    return Loaded(bridge, hf_model, tokenizer, origin)
