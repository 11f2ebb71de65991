"""Local Hugging Face folders as bridges, offline (models.hf_load), and the hook preflight
(models.preflight, `toylens preflight`): three families built here with random weights."""

from __future__ import annotations

import json

import pytest

from common.cli import UsageError
from models.hf_load import inspect_folder
from tests.hf_folders import FAMILIES, build_folder, bypass, no_network


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return {family: build_folder(root / family, family) for family in FAMILIES}


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_folder_loads_offline_and_passes_preflight(folders, family, monkeypatch):
    import torch

    from models.hf_load import load_folder
    from models.preflight import preflight, report_hooks

    no_network(monkeypatch)
    loaded = load_folder(folders[family])
    assert loaded.origin.family == family and loaded.bridge.cfg.n_layers == 2
    tokens = torch.tensor([loaded.tokenizer.encode("When Mary and John went to the store John gave a drink to")])
    assert (tokens > 0).all()  # the folder's own tokenizer, not a default one
    result = preflight(loaded.bridge, tokens, loaded.hf_model, report_hooks(loaded.bridge, edges=True))
    assert result.passed, result.refusal()
    assert any("HF model" in check.name and check.passed for check in result.checks)


@pytest.mark.slow
def test_preflight_fails_on_a_bypassed_hook(folders):
    """A hook point that still fires but whose edit is dropped: the preflight names it."""
    import torch

    from models.hf_load import load_folder
    from models.preflight import preflight

    loaded = load_folder(folders["gpt2"])
    bypass(loaded.bridge.blocks[1].attn.hook_z)
    result = preflight(loaded.bridge, torch.tensor([[1, 2, 3, 4, 5, 6]]), loaded.hf_model)
    assert not result.passed
    assert [check.name for check in result.failures()][0] == "blocks.1.attn.hook_z: an edit changes the logits"
    assert "nothing is measured" in result.refusal() and "\n" not in result.refusal()


def test_refusals_name_the_problem(tmp_path):
    with pytest.raises(UsageError, match="not a folder"):
        inspect_folder(tmp_path / "missing")
    with pytest.raises(UsageError, match="no config.json"):
        inspect_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    with pytest.raises(UsageError, match="model_type 'bert' is not supported"):
        inspect_folder(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x02 pickle")
    with pytest.raises(UsageError, match="pickled checkpoint; toylens loads only safetensors"):
        inspect_folder(tmp_path)


def test_memory_budget_is_refused_before_loading(folders):
    config, files, values = inspect_folder(folders["llama"])
    assert values > 0 and files[0].suffix == ".safetensors"
    with pytest.raises(UsageError, match="over the memory budget of 1e-05 GiB"):
        inspect_folder(folders["llama"], memory_gib=1e-5)


def test_preflight_command_exits_2_in_one_line(tmp_path, capsys):
    from toylens.preflight import main

    with pytest.raises(SystemExit) as stop:
        main([str(tmp_path)])
    assert stop.value.code == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("error: ") and "no config.json" in error and "\n" not in error
