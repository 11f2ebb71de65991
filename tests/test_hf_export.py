"""`toylens export hf`: a toylens run as a Hugging Face GPT-2 or (rotary) GPT-NeoX checkpoint, and the
round trip as the test of truth: loaded back offline (AutoModelForCausalLM and boot_transformers), the
same logits within 1e-5 and the same report numbers (exact oracle, curve, joint search) as the run,
for every spec that exports."""

from __future__ import annotations

import pytest

from common.cli import UsageError
from models import ModelSpec
from models.hf_export import unmappable

EXPORTED = {
    "block-2": ModelSpec(n_layers=2, d_model=48, n_heads=4),
    "uniform": ModelSpec(n_layers=1, d_model=48, n_heads=2, attention="uniform", positions="none"),
    "sinusoidal-unscaled": ModelSpec(n_layers=1, d_model=48, n_heads=2, positions="sinusoidal", scale_scores=False),
    "rotary": ModelSpec(n_layers=2, d_model=48, n_heads=4, positions="rotary"),
    "rotary-unscaled": ModelSpec(n_layers=1, d_model=48, n_heads=2, positions="rotary", scale_scores=False),
}
REFUSED = {
    "attention-only": (ModelSpec(n_layers=2, d_model=32, n_heads=1, mlp=False), "attention-only"),
    "alibi": (ModelSpec(positions="alibi"), "ALiBi"),
    "no norm": (ModelSpec(norm=None), "no normalisation"),
    "post-norm": (ModelSpec(norm_place="post"), "post-norm"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_unmappable_shapes_are_named(name):
    spec, why = REFUSED[name]
    assert why in unmappable(spec)
    from models.hf_export import hf_model

    with pytest.raises(UsageError, match=f"no Hugging Face form: {why}"):
        hf_model(spec, {})


@pytest.fixture(scope="module")
def ioi_runs(tmp_path_factory):
    from tasks.ioi import IOITask
    from tests.conftest import train_tiny

    return train_tiny(IOITask(), tmp_path_factory.mktemp("runs") / "ioi", EXPORTED, steps=60)


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPORTED)
def test_round_trip_same_logits_and_oracle(ioi_runs, name, tmp_path, monkeypatch):
    import torch
    from transformer_lens import TransformerBridge
    from transformers import AutoModelForCausalLM

    from models.hf_load import load_folder
    from probes.circuits.oracle import edge_effects, model_graph
    from probes.circuits.scaled import About, trace
    from tasks.data import spread_subset
    from tasks.training.runs import Run
    from tests.hf_folders import no_network
    from toylens.export_hf import export_hf

    run = Run(ioi_runs / name / "seed0")
    out = tmp_path / "hf"
    export_hf(run.path, out)
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md"} <= {p.name for p in out.iterdir()}
    assert run.config["run_sha256"] in (out / "README.md").read_text()
    no_network(monkeypatch)
    native, batch = run.load_model(), spread_subset(run.batches()["heldout"], 16)
    loaded = load_folder(out)
    auto = AutoModelForCausalLM.from_pretrained(out, local_files_only=True, attn_implementation="eager").eval()
    with torch.no_grad():
        ours = native(batch.inputs)
        for theirs in (loaded.bridge(batch.inputs), auto(batch.inputs).logits):
            assert float((ours - theirs).abs().max()) <= 1e-5 * max(1.0, float(ours.abs().max()))
    assert isinstance(loaded.bridge, TransformerBridge)
    words = " ".join(run.task.vocabulary()[int(t)] for t in batch.tokens[0, : int(batch.lengths[0])])
    assert loaded.tokenizer.encode(words) == batch.tokens[0, : int(batch.lengths[0])].tolist()
    a = edge_effects(native, batch, model_graph(native))
    b = edge_effects(loaded.bridge, batch, model_graph(loaded.bridge))
    assert a.edges == b.edges
    difference = float((a.effect - b.effect).abs().max())
    print(f"{name}: oracle max |difference| {difference:.2g} over {len(a.edges)} edges")
    assert difference <= 1e-4 * max(1.0, float(a.effect.abs().max()))
    ours, theirs = (trace(m, batch, About(name, "any"), verify=20) for m in (native, loaded.bridge))
    assert ours.searched is not None and theirs.searched is not None
    assert ours.ranked.names == theirs.ranked.names and ours.searched.edges == theirs.searched.edges
    logits = [(x, y) for x, y in zip(ours.ranked.score, theirs.ranked.score)] + [(ours.clean, theirs.clean)]
    ratios = [(x[1], y[1]) for x, y in zip(ours.curve, theirs.curve)]
    ratios += [(ours.searched.faithfulness, theirs.searched.faithfulness)]
    numbers = logits + ratios
    print(f"{name}: report numbers max |difference| {max(abs(x - y) for x, y in numbers):.2g} over {len(numbers)}")
    tolerance = 1e-4 * max(1.0, abs(ours.clean), abs(ours.corrupt))  # logit units
    assert all(abs(x - y) <= tolerance for x, y in logits)
    # faithfulness is a logit difference over the clean - counterfactual gap: its noise is the logits' over the gap
    assert all(abs(x - y) <= tolerance / abs(ours.clean - ours.corrupt) for x, y in ratios)


@pytest.mark.slow
def test_export_command_refuses_in_one_line(tiny_runs, tmp_path, capsys):
    from toylens.export import main

    for argv, said in (
        (["hf", str(tiny_runs / "attn-only-2x1" / "seed0"), "--out", str(tmp_path / "hf")], "attention-only"),
        (["hf", str(tiny_runs / "bag-of-words" / "seed0")], "needs --out DIR"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        error = capsys.readouterr().err.strip()
        assert stop.value.code == 2 and said in error and "\n" not in error, error
    assert not (tmp_path / "hf").exists()
