"""Circuits of any bridge (probes.circuits.scaled) and `python -m probes.circuit report --model PATH
--task NAME`: IOI traced on a trained toylens model and on its Hugging Face export gives the same
numbers; the budget switches to EAP with oracle verification; text tasks refuse tokenizers that
split their words."""

from __future__ import annotations

import pytest

from common.cli import UsageError
from models import ModelSpec
from tests.hf_folders import build_folder, bypass, no_network, word_tokenizer


@pytest.fixture(scope="module")
def ioi_run(tmp_path_factory):
    from tasks.ioi import IOITask
    from tests.conftest import train_tiny

    runs = train_tiny(IOITask(), tmp_path_factory.mktemp("runs") / "ioi", {"block-2": ModelSpec(2, 48, 4)}, steps=150)
    return runs / "block-2" / "seed0"


@pytest.mark.slow
def test_ioi_on_a_run_and_on_its_export_gives_the_same_numbers(ioi_run, tmp_path, monkeypatch):
    from models.hf_load import load_folder
    from probes.circuits.scaled import About, trace_task
    from tasks.training.runs import Run
    from toylens.export_hf import export_hf

    run = Run(ioi_run)
    export_hf(run.path, tmp_path / "hf")
    no_network(monkeypatch)
    loaded = load_folder(tmp_path / "hf")
    ours = trace_task(run.load_model(), run.task, About("run", "toylens"), pairs=24)
    theirs = trace_task(loaded.bridge, run.task, About("export", "gpt2"), loaded.tokenizer, pairs=24)
    assert ours.ranked.names == theirs.ranked.names and ours.ranked.method == "exact oracle"
    assert ours.searched is not None and theirs.searched is not None and ours.searched.edges == theirs.searched.edges
    differences = [abs(a - b) for a, b in zip(ours.ranked.score, theirs.ranked.score)]
    differences += [abs(ours.clean - theirs.clean), abs(ours.corrupt - theirs.corrupt)]
    differences += [abs(a[1] - b[1]) for a, b in zip(ours.curve, theirs.curve)]
    print(f"IOI run vs export: max difference {max(differences):.2g} over {len(differences)} numbers")
    assert max(differences) <= 1e-4 * max(1.0, max(abs(s) for s in ours.ranked.score))


@pytest.mark.slow
def test_over_budget_ranks_by_eap_and_verifies_the_top_exactly(ioi_run):
    from probes.circuits.scaled import About, trace_task
    from tasks.training.runs import Run

    run, model = Run(ioi_run), Run(ioi_run).load_model()
    exact = trace_task(model, run.task, About("run", "toylens"), pairs=16)
    ranked = trace_task(model, run.task, About("run", "toylens"), pairs=16, edge_budget=10, verify=12).ranked
    assert ranked.method == "EAP + oracle verification" and len(ranked.verified) == 12
    for name, value in ranked.verified.items():  # the verified numbers are the oracle's own
        assert abs(value - exact.ranked.verified[name]) <= 1e-5 * max(1.0, abs(value))
    assert ranked.agreement is not None


@pytest.mark.slow
@pytest.mark.parametrize("family", ["gpt2", "gpt_neox", "llama"])
def test_report_command_on_a_checkpoint_offline(family, tmp_path, monkeypatch, capsys):
    from toylens.byom import main

    folder = build_folder(tmp_path / family, family)
    no_network(monkeypatch)
    main(["--model", str(folder), "--task", "ioi", "--out", str(tmp_path / "report"), "--pairs", "8"])
    text = (tmp_path / "report" / "report.md").read_text()
    assert "Preflight: passed" in text and "exact oracle over" in text and " edges" in text
    assert "## Joint search over the top" in text and "edge sets measured on the exact oracle" in text
    assert (tmp_path / "report" / "report.json").is_file()
    flags = ["--budget", "10", "--verify", "6", "--ranking", "eap-ig", "--ig-steps", "2", "--no-search"]
    main(["--model", str(folder), "--task", "ioi", "--out", str(tmp_path / "ig"), "--pairs", "8", *flags])
    text = (tmp_path / "ig" / "report.md").read_text()
    assert "EAP-IG (2 steps) + oracle verification over" in text and "Joint search" not in text


@pytest.mark.slow
def test_nothing_is_measured_when_the_preflight_fails(tmp_path, monkeypatch, capsys):
    import models.hf_load
    from toylens.byom import main

    folder, load = build_folder(tmp_path / "gpt2", "gpt2"), models.hf_load.load_folder

    def bypassed(*args, **kwargs):
        loaded = load(*args, **kwargs)
        bypass(loaded.bridge.blocks[0].attn.hook_q)
        return loaded

    monkeypatch.setattr(models.hf_load, "load_folder", bypassed)
    with pytest.raises(SystemExit) as stop:
        main(["--model", str(folder), "--task", "ioi", "--out", str(tmp_path / "report"), "--pairs", "8"])
    assert stop.value.code == 2 and not (tmp_path / "report").exists()
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith("error: preflight failed: blocks.0.attn.hook_q: an edit changes the logits")


def test_text_task_refuses_a_tokenizer_that_splits_its_words():
    from tasks.ioi import IOITask
    from tasks.templates import tokenised

    task = IOITask()
    words = [w for w in task.vocabulary() if w != "Mary"]
    with pytest.raises(UsageError, match="word 'Mary' as an unknown-word token"):
        tokenised(task, 0, word_tokenizer(words))


def test_only_text_tasks_run_on_a_checkpoint():
    from tasks.templates import tokenised
    from tasks.winograd import WinogradTask

    with pytest.raises(UsageError, match="needs a text task"):
        tokenised(WinogradTask(), 0, word_tokenizer(["a"]))


@pytest.mark.slow
def test_position_aware_report_takes_the_task_parameters(tmp_path, monkeypatch, capsys):
    """IOI's --templates 1 gives one prompt layout, so --positions traces an edge per position; with
    every template (two lengths) --positions is refused in one line before anything is written."""
    from toylens.byom import main

    folder = build_folder(tmp_path / "llama", "llama")
    no_network(monkeypatch)
    common = ["--model", str(folder), "--task", "ioi", "--pairs", "4", "--positions", "--no-search"]
    main([*common, "--templates", "1", "--out", str(tmp_path / "report")])
    text = (tmp_path / "report" / "report.md").read_text()
    assert "exact oracle over" in text and " @p12 |" in text
    with pytest.raises(SystemExit) as stop:
        main([*common, "--out", str(tmp_path / "refused")])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 2 and "position-aware edges need prompts of one layout" in error
    assert not (tmp_path / "refused").exists()
