"""The chapter's last pieces: learning-rate warmup, the text task (any UTF-8 file, every position
scored, scored in chunks when large), the head and averaging equalities, and the pre/post-norm
command on tiny settings."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

import tasks.evaluate as evaluate
import tasks.training.loop as training
from models import ModelSpec, UsageError, build_model
from tasks.data import task_dataset, to_batch
from tasks.settings import TrainSettings
from tasks.text import TextParams, TextTask
from tests.conftest import TINY_SPECS, train_tiny

WORDS = ("the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "hill", "with", "red", "ball", "é")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    rng = random.Random(0)
    lines = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) for _ in range(600)]
    path = tmp_path_factory.mktemp("corpus") / "words.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def tiny_text(corpus, **fields) -> TextTask:
    return TextTask(TextParams(corpus=str(corpus), **{"vocab": 300, "context": 8, **fields}))


def test_warmup_rises_linearly_then_holds():
    settings = TrainSettings(lr=0.01, warmup_steps=4).validate()
    assert [settings.lr_at(step) for step in range(1, 7)] == pytest.approx([0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01])
    assert TrainSettings(lr=0.01).lr_at(1) == 0.01
    for bad in (-1, 2.5, "4"):
        with pytest.raises(UsageError, match="warmup_steps"):
            TrainSettings(warmup_steps=bad).validate()


def test_training_steps_at_the_warmed_up_rate(small_winograd, monkeypatch):
    from toylens.family import sized_spec

    batches = {name: to_batch(split) for name, split in task_dataset(small_winograd, 0).items()}
    model = build_model(sized_spec(TINY_SPECS["attn-only-2x1"], small_winograd, batches), seed=0)
    seen, real = [], training.adamw

    def recording(model, settings):
        optimizer = real(model, settings)
        step = optimizer.step

        def stepped(*args, **kwargs):
            seen.append(optimizer.param_groups[0]["lr"])
            return step(*args, **kwargs)

        optimizer.step = stepped
        return optimizer

    monkeypatch.setattr(training, "adamw", recording)
    settings = TrainSettings(max_steps=6, batch_size=8, eval_every=3, lr=0.01, warmup_steps=4)
    training.train(model, batches["train"], batches["validation"], settings, seed=0, progress=False)
    assert seen == pytest.approx([0.0025, 0.005, 0.0075, 0.01, 0.01, 0.01])


def test_a_run_written_before_warmup_existed_is_kept(small_winograd, tmp_path):
    from tasks.training.runs import run_sha256
    from tests.conftest import tiny_plans
    from toylens.family import existing_status

    train_tiny(small_winograd, tmp_path, {"bag-of-words": TINY_SPECS["bag-of-words"]}, steps=4)
    config_path = tmp_path / "bag-of-words" / "seed0" / "config.json"
    config = json.loads(config_path.read_text())
    del config["training"]["warmup_steps"]  # as the toylens before warmup wrote it
    config["run_sha256"] = run_sha256(config)
    config_path.write_text(json.dumps(config))
    plan = tiny_plans(small_winograd, tmp_path, {"bag-of-words": TINY_SPECS["bag-of-words"]}, steps=4)[0]
    assert existing_status(plan, overwrite=False) == "done"


def test_a_run_written_before_stop_metric_existed_is_read_as_what_it_ran_with(small_winograd, tmp_path):
    """It stopped on the validation loss (LEGACY), not today's default: the same as a run asked for with
    stop_metric loss, and a different run from one asked for with the default."""
    from tasks.settings import StopMetric
    from tasks.training.runs import run_sha256
    from tests.conftest import tiny_plans
    from toylens.family import existing_status

    specs = {"bag-of-words": TINY_SPECS["bag-of-words"]}
    train_tiny(small_winograd, tmp_path, specs, steps=4)
    config_path = tmp_path / "bag-of-words" / "seed0" / "config.json"
    config = json.loads(config_path.read_text())
    del config["training"]["stop_metric"]  # as the toylens before the setting wrote it
    config["run_sha256"] = run_sha256(config)
    config_path.write_text(json.dumps(config))
    plan = tiny_plans(small_winograd, tmp_path, specs, steps=4)[0]
    assert plan.settings.stop_metric is not StopMetric.LOSS
    with pytest.raises(UsageError, match="incompatible run"):
        existing_status(plan, overwrite=False)
    as_it_ran = replace(plan, settings=replace(plan.settings, stop_metric=StopMetric.LOSS))
    assert existing_status(as_it_ran, overwrite=False) == "done"


def test_text_windows_cover_each_stretch_and_score_every_position(corpus):
    task = tiny_text(corpus)
    vocabulary = task.vocabulary()
    assert 256 < len(vocabulary) <= 300 and len(set(vocabulary)) == len(vocabulary)
    splits = task.generate(0)
    text = corpus.read_text(encoding="utf-8")
    stretches = task.stretches()
    assert "".join(stretches.values()) == text
    assert len(stretches["heldout"]) == pytest.approx(0.05 * len(text), rel=0.05)  # the end of the file
    for split, examples in splits.items():
        assert all(e.positions == tuple(range(8)) and len(e.tokens) == 9 for e in examples)
        ids = task.tokenizer().encode(stretches[split]).ids
        joined = [t for e in examples for t in e.tokens]
        assert joined == ids[: len(joined)] and len(ids) - len(joined) < 9  # consecutive, only a partial window dropped
    assert stretches["heldout"].startswith(task.decode(splits["heldout"][0].tokens))
    assert splits == task.generate(1)  # the text decides the data


def test_the_tokenizer_never_sees_the_heldout_text(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("abc abc abc\n" * 300 + "zqzqzqzq zqzqzqzq\n" * 40, encoding="utf-8")
    vocabulary = TextTask(TextParams(corpus=str(path), vocab=270, context=4, heldout_share=0.2)).vocabulary()
    assert any("abc" in token for token in vocabulary)
    assert not any("zq" in token for token in vocabulary)  # only in the last fifth: validation and held-out


@pytest.mark.parametrize(
    "content, problem", [(None, "no such file"), (b"\xff\xfe bad", "not UTF-8"), (b"   \n", "holds no text")]
)
def test_a_bad_corpus_is_refused_with_one_line(tmp_path, content, problem):
    path = tmp_path / "corpus.txt"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(UsageError, match=problem):
        TextTask(TextParams(corpus=str(path)))


def test_a_corpus_too_short_for_a_window_is_refused(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("a few words only\n" * 5, encoding="utf-8")
    with pytest.raises(UsageError, match="fewer than one window"):
        TextTask(TextParams(corpus=str(path), vocab=260, context=64)).generate(0)


def test_the_command_line_exits_2_on_a_missing_corpus(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "toylens",
            "train",
            "text",
            "--corpus",
            str(tmp_path / "none.txt"),
            "--out",
            str(tmp_path / "runs"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip() and "Warning" not in line]
    assert len(lines) == 1 and "no such file" in lines[0], done.stderr


def test_text_trains_and_reports_heldout_perplexity(corpus, tmp_path):
    from probes.accuracy import run_accuracy
    from tasks.training.runs import Run

    task = tiny_text(corpus)
    out = train_tiny(task, tmp_path / "runs", {"tiny": ModelSpec(n_layers=1, d_model=16, n_heads=2)}, steps=5)
    run = Run(out / "tiny" / "seed0")
    heldout = run_accuracy(run).splits["heldout"]
    windows = len(task.generate(0)["heldout"])
    assert heldout.n == 8 * windows
    batch = to_batch(task_dataset(task, 0)["heldout"])
    with torch.no_grad():
        logits = run.load_model()(batch.inputs)
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch.tokens[:, 1:].flatten())
    assert heldout.loss == pytest.approx(float(expected), rel=1e-5)
    assert 1 < math.exp(heldout.loss) < len(task.vocabulary()) * 2
    from probes.chapter.ladder import band_losses

    assert windows <= 256  # every held-out window is in the bands' sample
    bands = band_losses(run)
    assert [(first, last) for first, last, _ in bands] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert sum(loss for _, _, loss in bands) / 4 == pytest.approx(heldout.loss, rel=1e-5)  # equal-sized bands
    per_position = torch.nn.functional.cross_entropy(
        logits.flatten(0, 1), batch.tokens[:, 1:].flatten(), reduction="none"
    ).view(len(batch), 8)
    assert bands[3][2] == pytest.approx(float(per_position[:, 6:].mean()), rel=1e-5)


def test_large_splits_are_scored_in_chunks_with_the_same_result(corpus, monkeypatch):
    task = tiny_text(corpus)
    batch = to_batch(task_dataset(task, 0)["train"])
    model = build_model(ModelSpec(d_model=16, n_heads=2, n_ctx=8, d_vocab=len(task.vocabulary())), seed=0)
    whole = evaluate.score_model(model, batch)
    monkeypatch.setattr(evaluate, "SCORED_LOGITS", 8 * len(task.vocabulary()) * 7)  # 7 rows per chunk
    chunked = evaluate.score_model(model, batch)
    assert len(batch) > 7
    for field in ("predicted", "answers", "example_index"):
        assert torch.equal(getattr(chunked, field), getattr(whole, field)), field
    torch.testing.assert_close(chunked.loss, whole.loss, rtol=1e-6, atol=0)


def test_the_head_and_the_average_equal_their_library_forms():
    from probes.chapter.equalities import measure_equalities

    result = measure_equalities(d_model=16, n_heads=2, length=8, batch=2, seed=1)
    assert len(result.rows) == 5
    for row in result.rows:
        assert row.max_abs_difference < 1e-5 * max(1.0, row.max_abs_value), row
        assert row.max_abs_value > 0.1  # compared something, not zeros


def test_block_gradient_norms_match_the_bridge(corpus):
    from probes.chapter.norms import block_gradient_norms
    from tasks.training.loop import lm_loss

    task = tiny_text(corpus)
    batch = to_batch(task_dataset(task, 0)["train"])
    spec = ModelSpec(n_layers=3, d_model=16, n_heads=2, n_ctx=8, d_vocab=len(task.vocabulary()), norm_place="post")
    norms = block_gradient_norms(build_model(spec, seed=2), batch, 4, seed=5)
    model = build_model(spec, seed=2)
    picked = torch.randperm(len(batch), generator=torch.Generator().manual_seed(5))[:4]
    model.train()
    lm_loss(model(batch.tokens[picked, :-1]), batch.tokens[picked], batch.lengths[picked]).backward()
    expected = [
        float(torch.cat([p.grad.flatten() for p in block.parameters() if p.grad is not None]).norm())
        for block in model.blocks
    ]
    assert norms == pytest.approx(expected, rel=1e-4)
    assert len(set(round(n, 6) for n in norms)) == 3


def test_the_norms_command_on_tiny_settings(corpus, tmp_path, capsys):
    from toylens.chapter.norms import main

    out = tmp_path / "norms"
    main(
        [
            "text",
            "--corpus",
            str(corpus),
            "--vocab",
            "300",
            "--context",
            "8",
            "--layers",
            "2",
            "--d-model",
            "8",
            "--steps",
            "4",
            "--eval-every",
            "2",
            "--seeds",
            "0-1",
            "--out",
            str(out),
            "--jobs",
            "1",
            "--no-progress",
        ]
    )
    result = json.loads((out / "norms.json").read_text())
    assert [v["variant"] for v in result["variants"]] == ["pre", "pre+warmup", "post", "post+warmup"]
    assert [v["warmup_steps"] for v in result["variants"]] == [0, 1, 0, 1]
    for variant in result["variants"]:
        assert all(s["perplexity"] == pytest.approx(math.exp(s["loss"])) for s in variant["seeds"])
    for gradients in result["gradients"]:
        assert len(gradients["per_block"]) == 2 and all(len(n) == 2 for n in gradients["per_block"])
    assert "post-norm + warmup" in capsys.readouterr().out


@pytest.mark.parametrize(
    "module, argv, fragment",
    [
        ("toylens.chapter.norms", [], "required: task"),
        ("toylens.chapter.norms", ["text", "--steps", "10", "--warmup-steps", "11"], "must lie in 1..10"),
        ("toylens.chapter.norms", ["text", "--variants", "middle"], "unknown variant(s) ['middle']"),
        ("toylens.chapter.norms", ["text", "--variants", "post+warmup"], "needs pre or post"),
        ("toylens.chapter.norms", ["text", "--vocab", "100"], "vocab must be an integer from 257"),
        ("toylens.chapter.norms", ["text", "--context", "1"], "context must be an integer from 2"),
        ("probes.chapter.equalities", ["--d-model", "30", "--heads", "4"], "must be a multiple of --heads"),
    ],
)
def test_bad_arguments_are_one_line(module, argv, fragment, tmp_path, capsys):
    import importlib

    with pytest.raises(SystemExit) as done:
        importlib.import_module(module).main([*argv, "--out", str(tmp_path / "out")] if argv else argv)
    assert done.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], lines


def test_a_corpus_full_of_markup_trains_and_writes_every_json_file_strict(tmp_path):
    """A corpus of tags, quotes, `</script>`, `$`, ampersands and line separators: the tokens hold
    them, and every JSON file of the run (config, metrics, the run's summary) is written and parses
    as strict JSON with those strings kept (issue 38: such a corpus once wrote one JSON file of them)."""
    from tasks.training.runs import Run

    rng = random.Random(1)
    pieces = ("<script>", "</script>", '"q"', "'s'", "&amp;", "$x$", "<b>", "\u2028", "a", "b", "c", "é")
    lines = [" ".join(rng.choice(pieces) for _ in range(rng.randint(3, 10))) for _ in range(500)]
    path = tmp_path / "markup.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    task = TextTask(TextParams(corpus=str(path), vocab=280, context=8))
    out = train_tiny(task, tmp_path / "runs", {"tiny": ModelSpec(n_layers=1, d_model=16, n_heads=2)}, steps=5)
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.json"))
    assert {"tiny/seed0/config.json", "tiny/seed0/metrics.json"} <= set(written), written

    def strict(text):
        return json.loads(text, parse_constant=lambda name: pytest.fail(f"non-strict JSON constant {name}"))

    for name in written:
        strict((out / name).read_text(encoding="utf-8"))
    vocabulary = strict((out / "tiny" / "seed0" / "config.json").read_text())["vocabulary"]
    assert any("<" in token or "script" in token for token in vocabulary) and Run(out / "tiny" / "seed0").metrics
