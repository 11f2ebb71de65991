"""`toylens export hf RUN_DIR --out DIR`: one toylens run as a standard Hugging Face checkpoint, GPT-2
or (rotary positions) GPT-NeoX (models.hf_export): model.safetensors + config.json, the run's tokenizer and a model card with its
provenance, published whole. Before publishing, the folder is loaded back offline with
`AutoModelForCausalLM` and its logits on the run's held-out inputs are compared with the run's:
a difference over ROUND_TRIP_TOLERANCE fails the command."""

from __future__ import annotations

from pathlib import Path
from models import Model

ROUND_TRIP_TOLERANCE = 1e-5  # max |exported - run| logits, relative to max(1, max |logit|)


def run_tokenizer(run):
    """The run's own tokenizer: the text task's BPE, else a word-level one of its vocabulary."""
    from models.hf_export import word_tokenizer

    make = getattr(run.task, "tokenizer", None)
    if make is None:
        return word_tokenizer(run.config["vocabulary"])
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=make())


def provenance(run) -> dict:
    from models.hf_export import architecture

    config = run.config
    accuracy = run.metrics["accuracy"]
    return {
        "title": f"toylens {config['task']['name']} {run.model_name} seed {run.seed}",
        "architecture": architecture(run.spec),
        "fields": {
            "task": f"{config['task']['name']} {config['task']['params']}",
            "model": run.model_name,
            "spec": run.spec.to_dict(),
            "seed": run.seed,
            "held-out accuracy (the run's metrics.json)": f"{accuracy['heldout']:.4f}",
            "run_sha256 (what defines the run)": config["run_sha256"],
            "weights_sha256 (the run's model.safetensors)": config["weights_sha256"],
            "trained by": config.get("command", "unknown"),
            "versions": config.get("versions", {}),
            "round trip": f"logits equal the run's within {ROUND_TRIP_TOLERANCE:g} x max(1, max |logit|)",
        },
    }


def round_trip_difference(folder: Path, model: Model, inputs) -> float:
    """max |logits| difference of the exported folder (loaded offline) against `model`, relative."""
    import torch
    from transformers import AutoModelForCausalLM

    from models.hf_load import offline

    with offline(), torch.no_grad():
        loaded = AutoModelForCausalLM.from_pretrained(
            str(folder), local_files_only=True, use_safetensors=True, attn_implementation="eager"
        ).eval()
        ours, theirs = model(inputs), loaded(inputs).logits
    return float((ours - theirs).abs().max()) / max(1.0, float(ours.abs().max()))


def export_hf(run_dir: Path, out: Path) -> float:
    """Write the HF folder for the run at `run_dir` into `out`; returns the round trip's difference."""
    from common.atomic import publish_folder, staging
    from common.cli import UsageError
    from common.ownership import check_publishable
    from models.hf_export import hf_model, model_card
    from tasks.training.runs import Run

    run = Run(Path(run_dir))
    run.check()
    native = run.load_model()
    exported = hf_model(run.spec, native.state_dict())
    check_publishable(out, "export folder")
    with staging(out) as staged:
        exported.save_pretrained(staged, safe_serialization=True)
        run_tokenizer(run).save_pretrained(staged)
        (staged / "README.md").write_text(model_card(provenance(run)))
        inputs = run.batches()["heldout"].inputs[:64]
        difference = round_trip_difference(staged, native, inputs)
        if difference > ROUND_TRIP_TOLERANCE:
            raise UsageError(
                f"the exported model's logits differ from the run's by {difference:.2g} (relative), over "
                f"{ROUND_TRIP_TOLERANCE:g}; nothing was written"
            )
        publish_folder(staged, out)
    return difference


def export_hf_command(run_dir: Path, out: Path | None) -> None:
    from common.cli import UsageError

    if out is None:
        raise UsageError("toylens export hf needs --out DIR, the folder the checkpoint is written to")
    from models.hf_export import architecture
    from tasks.training.runs import Run

    difference = export_hf(run_dir, out)
    kind = architecture(Run(Path(run_dir)).spec)
    print(
        f"wrote {out} ({kind}, safetensors, tokenizer, README.md); round trip: max |logit difference| {difference:.2g}"
    )
