"""Dictionaries on disk in SAELens's layout: one folder per hook, `cfg.json` + `sae_weights.safetensors`
(W_enc, b_enc, W_dec, b_dec), as `sae_lens.SAE.load_from_disk(folder)` reads them.

Both kinds are stored as SAELens's `topk` architecture. An SAE subtracts b_dec from its input
(`apply_b_dec_to_input`: true); a transcoder does not (false) and names its output hook in
`metadata.hook_name_out`: with d_in == d_out (an MLP reads and writes d_model), SAELens's TopK SAE
then computes exactly the transcoder (SAELens 6.54 has no TopK transcoder architecture; its
`transcoder` is ReLU).

Checksummed like runs (tasks.training.runs): `cfg.json` carries the SHA-256 of the weights file and
of its own content, and the run_sha256 + weights_sha256 of the run it was trained on, so an edited
file, a swapped weights file or a dictionary copied beside another run is refused, not believed.
The same identity makes training resumable per dictionary: one already written for this run and
config is read back instead of trained again.
"""

from __future__ import annotations

from pathlib import Path

import torch

from common.atomic import write_json
from common.cli import UsageError
from common.jsonfiles import canonical_sha256, sha256_file
from common.store import load_tensors, read_json
from models.checkpoint import save_tensors
from probes.features.dictionary import Dictionary, DictionaryConfig

CFG = "cfg.json"
WEIGHTS = "sae_weights.safetensors"
FORMAT = "toylens-dictionary/1"
SAE_LENS_LAYOUT = "6.54.12"  # the SAELens release whose cfg.json layout this follows (checked by hand)
NAMES = ("W_enc", "b_enc", "W_dec", "b_dec")
FIX = "delete the folder and train the dictionary again (toylens features RUNS_DIR)"


def folder_of(root: Path, config: DictionaryConfig) -> Path:
    return Path(root) / config.name / config.hook_in


def run_identity(run_config: dict) -> dict:
    return {
        "run_sha256": run_config["run_sha256"],
        "weights_sha256": run_config["weights_sha256"],
        "model_name": run_config["model_name"],
        "seed": run_config["seed"],
    }


def sae_lens_cfg(dictionary: Dictionary, run: dict, context_size: int) -> dict:
    config = dictionary.config
    return {
        "architecture": "topk",
        "d_in": config.d_in,
        "d_sae": config.d_sae,
        "k": config.k,
        "dtype": "float32",
        "device": "cpu",
        "apply_b_dec_to_input": config.kind == "sae",
        "normalize_activations": "none",
        "reshape_activations": "none",
        "rescale_acts_by_decoder_norm": False,
        "metadata": {
            "sae_lens_version": SAE_LENS_LAYOUT,
            "sae_lens_training_version": None,
            "model_name": run["model_name"],
            "hook_name": config.hook_in,
            "hook_name_out": config.hook_out,
            "hook_head_index": None,
            "prepend_bos": False,
            "context_size": context_size,
            "dataset_path": None,
        },
    }


def save(root: Path, dictionary: Dictionary, run: dict, context_size: int) -> Path:
    """Weights first, cfg.json (naming their SHA-256) last, as a run's checkpoint."""
    folder = folder_of(root, dictionary.config)
    weights = folder / WEIGHTS
    save_tensors(weights, {name: dictionary.weights[name] for name in NAMES}, {"format": FORMAT})
    payload = {
        **sae_lens_cfg(dictionary, run, context_size),
        "toylens": {
            "format": FORMAT,
            "dictionary": dictionary.config.to_dict(),
            "run": run,
            "fvu": dictionary.fvu,
            "dead": dictionary.dead,
            "weights_sha256": sha256_file(weights),
        },
    }
    write_json(folder / CFG, {**payload, "sha256": canonical_sha256(payload)})
    return folder


def load(folder: Path, run: dict | None = None) -> Dictionary:
    """The dictionary in `folder`, after its checks; with `run` (run_identity of a run's config), also
    that it was trained on that run."""
    folder = Path(folder)
    data = read_json(folder / CFG, FIX)
    mine = data.get("toylens") if isinstance(data, dict) else None
    if not isinstance(mine, dict) or mine.get("format") != FORMAT:
        raise UsageError(f"{folder / CFG} is not a dictionary this toylens wrote (format {FORMAT}); {FIX}")
    if data.get("sha256") != canonical_sha256({k: v for k, v in data.items() if k != "sha256"}):
        raise UsageError(f"{folder / CFG} was changed after toylens wrote it (its sha256 differs); {FIX}")
    if sha256_file(folder / WEIGHTS) != mine.get("weights_sha256"):
        raise UsageError(f"{folder / WEIGHTS} is not the file {CFG} was written with (SHA-256 differs); {FIX}")
    if run is not None and mine["run"] != run:
        raise UsageError(
            f"{folder} was trained on another run ({mine['run']['run_sha256'][:12]}, not "
            f"{run['run_sha256'][:12]}: retrained or copied); {FIX}"
        )
    try:
        config = DictionaryConfig.from_dict(mine["dictionary"])
    except TypeError as error:
        raise UsageError(f"{folder / CFG}: dictionary settings {error}; {FIX}") from None
    tensors, _ = load_tensors(folder / WEIGHTS, FIX)
    check_shapes(folder, tensors, config)
    return Dictionary(config, tensors, fvu=float(mine["fvu"]), dead=float(mine["dead"]))


def check_shapes(folder: Path, tensors: dict, config: DictionaryConfig) -> None:
    shapes = {
        "W_enc": (config.d_in, config.d_sae),
        "b_enc": (config.d_sae,),
        "W_dec": (config.d_sae, config.d_out),
        "b_dec": (config.d_out,),
    }
    if set(tensors) != set(NAMES):
        raise UsageError(f"{folder / WEIGHTS} holds {sorted(tensors)}, not {list(NAMES)}; {FIX}")
    for name, shape in shapes.items():
        if (
            tuple(tensors[name].shape) != shape
            or tensors[name].dtype != torch.float32
            or not bool(torch.isfinite(tensors[name]).all())
        ):
            raise UsageError(f"{folder / WEIGHTS}: {name} is not finite float32 {shape}; {FIX}")


def reusable(root: Path, config: DictionaryConfig, run: dict) -> Dictionary | None:
    """The dictionary already written for this run and config, or None (absent, or other settings)."""
    folder = folder_of(root, config)
    if not (folder / CFG).is_file():
        return None
    found = load(folder)
    return found if found.config == config and read_json(folder / CFG, FIX)["toylens"]["run"] == run else None
