"""The training loop's resume logic, in process: an interrupted `train` continued with `resume=True`
ends bit for bit where an uninterrupted one does, and its log holds each evaluation once."""

from __future__ import annotations

import json

import pytest
import torch

import tasks.training.loop as training
from models import UsageError, build_model
from models.bridge import hook_free_forward
from tasks.data import task_dataset, to_batch
from tasks.training.resume import STATE
from tasks.settings import TrainSettings
from tests.conftest import TINY_SPECS

SETTINGS = TrainSettings(max_steps=40, batch_size=16, eval_every=10)


@pytest.fixture(scope="module")
def batches(small_winograd):
    return {name: to_batch(split) for name, split in task_dataset(small_winograd, 0).items()}


def fresh_model(batches, small_winograd):
    from toylens.family import sized_spec

    return build_model(sized_spec(TINY_SPECS["attn-only-2x1"], small_winograd, batches), seed=0)


def run(model, batches, tmp_path, **options):
    return training.train(
        model,
        batches["train"],
        batches["validation"],
        SETTINGS,
        seed=0,
        progress=False,
        log_path=tmp_path / "log.jsonl",
        state_path=tmp_path / STATE,
        **options,
    )


def interrupt_at_call(monkeypatch, calls: int) -> None:
    """Make the `calls`-th loss computation raise KeyboardInterrupt, like Ctrl-C mid-step."""
    real, seen = training.lm_loss, []

    def loss(*args):
        seen.append(1)
        if len(seen) == calls:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(training, "lm_loss", loss)


def logged(path) -> list[dict]:
    return [{k: v for k, v in json.loads(line).items() if k != "seconds"} for line in path.read_text().splitlines()]


def test_resumed_training_matches_uninterrupted_training(batches, small_winograd, tmp_path, monkeypatch):
    straight = fresh_model(batches, small_winograd)
    (tmp_path / "a").mkdir()
    expected = run(straight, batches, tmp_path / "a")

    # Steps 1-10 and the evaluation at 10 call lm_loss 11 times; stop during step 27, after the
    # evaluation at 20 was logged and the state at 15 saved (checkpoints every 15 steps).
    interrupted = fresh_model(batches, small_winograd)
    (tmp_path / "b").mkdir()
    interrupt_at_call(monkeypatch, 29)
    with pytest.raises(KeyboardInterrupt):
        run(interrupted, batches, tmp_path / "b", checkpoint_every=15)
    assert [e["step"] for e in logged(tmp_path / "b" / "log.jsonl")] == [10, 20]
    monkeypatch.undo()

    resumed = fresh_model(batches, small_winograd)  # a new process would start from scratch too
    result = run(resumed, batches, tmp_path / "b", checkpoint_every=15, resume=True)

    for name, tensor in straight.state_dict().items():
        assert torch.equal(tensor, resumed.state_dict()[name]), name
    drop = lambda history: [{k: v for k, v in h.items() if k != "seconds"} for h in history]  # noqa: E731
    assert drop(result.history) == drop(expected.history)
    assert logged(tmp_path / "b" / "log.jsonl") == logged(tmp_path / "a" / "log.jsonl")
    assert (result.steps, result.stop_reason) == (expected.steps, expected.stop_reason)


def test_without_resume_an_old_state_is_ignored(batches, small_winograd, tmp_path):
    first = run(fresh_model(batches, small_winograd), batches, tmp_path)
    again = run(fresh_model(batches, small_winograd), batches, tmp_path)
    assert [h["val_loss"] for h in again.history] == [h["val_loss"] for h in first.history]


def test_damaged_state_is_refused_with_the_fix(batches, small_winograd, tmp_path):
    (tmp_path / STATE).write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not a header}")
    with pytest.raises(UsageError, match="corrupt or truncated .*pass --overwrite"):
        run(fresh_model(batches, small_winograd), batches, tmp_path, resume=True)


def evaluations(losses, accuracies, every=25):
    """The same losses as the loss at every position and at the scored positions (either is watched)."""
    return [
        {"step": every * (i + 1), "val_loss": loss, "val_scored_loss": loss, "val_accuracy": accuracy}
        for i, (loss, accuracy) in enumerate(zip(losses, accuracies))
    ]


def test_stop_reason_solved_stalled_or_none():
    settings = TrainSettings(stop_accuracy=0.99, stop_evals=3, plateau_steps=100, plateau_tolerance=0.01)
    # Solved: accuracy >= 0.99 at the last 3 evaluations, whatever the loss does.
    assert (
        training.stop_reason(evaluations([1.0, 0.9, 0.9, 0.95], [0.5, 0.99, 1.0, 1.0]), settings) == "validation solved"
    )
    assert training.stop_reason(evaluations([1.0, 0.9, 0.9], [0.5, 1.0, 1.0]), settings) is None
    # Stalled: the best loss (0.5 at step 25) is not beaten by 1% for 100 steps; gains under 1% do not count.
    flat = evaluations([0.5, 0.6, 0.7, 0.498, 0.6], [0.1] * 5)
    assert training.stop_reason(flat[:4], settings) is None
    assert training.stop_reason(flat, settings) == "validation stalled"
    improving = evaluations([0.5, 0.6, 0.7, 0.49, 0.6], [0.1] * 5)  # 2% better at step 100
    assert training.stop_reason(improving, settings) is None


VARIANTS = {
    "softmax, MLP, LayerNorm": dict(),
    "uniform attention, no positions": dict(attention="uniform", positions="none"),
    "attention-only, no norm, unscaled": dict(mlp=False, norm=None, scale_scores=False),
    "rotary, 2 layers": dict(positions="rotary", n_layers=2),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_hook_free_forward_is_the_same_model_without_wrappers(variant):
    from models import ModelSpec
    from transformer_lens.model_bridge.generalized_components.base import GeneralizedComponent

    model = build_model(ModelSpec(d_model=16, n_heads=2, n_ctx=9, d_vocab=11, **VARIANTS[variant]), seed=3)
    forward = hook_free_forward(model)
    assert not any(isinstance(m, GeneralizedComponent) for m in forward.modules())
    assert {id(p) for p in forward.parameters()} == {id(p) for p in model.parameters()}
    tokens = torch.randint(11, (5, 9), generator=torch.Generator().manual_seed(0))
    assert torch.equal(forward(tokens), model(tokens))
    # One step through it moves the bridge's own weights: the logits still agree afterwards.
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    forward(tokens).logsumexp(-1).mean().backward()
    optimizer.step()
    assert torch.equal(forward(tokens), model(tokens))


def test_a_model_with_hooks_trains_through_the_bridge():
    from models import ModelSpec

    model = build_model(ModelSpec(d_model=16, n_heads=2, n_ctx=9, d_vocab=11), seed=3)
    model.add_hook("blocks.0.attn.hook_pattern", lambda pattern, hook: pattern, is_permanent=True)
    assert hook_free_forward(model) is model


# The stalled rule watches what the settings name: the scored positions' loss (default), their
# accuracy (absolute points), or the loss at every position. Catches: a model that cannot do the
# task kept training while its every-position loss fell (it learned the sequences' structure).
def test_stalled_watches_the_chosen_metric():
    from tasks.settings import StopMetric

    history = [
        {"step": 25 * (i + 1), "val_loss": 2.0 - 0.1 * i, "val_scored_loss": 0.69, "val_accuracy": 0.5}
        for i in range(6)
    ]
    base = dict(plateau_steps=100, plateau_tolerance=0.01)
    assert training.stop_reason(history, TrainSettings(**base)) == "validation stalled"
    assert training.stop_reason(history, TrainSettings(**base, stop_metric=StopMetric.LOSS)) is None
    rising = [{**h, "val_accuracy": 0.5 + 0.02 * i} for i, h in enumerate(history)]
    assert training.stop_reason(rising, TrainSettings(**base, stop_metric=StopMetric.ACCURACY)) is None
    assert training.stop_reason(history, TrainSettings(**base, stop_metric=StopMetric.ACCURACY)) == "validation stalled"


def test_loss_on_scored_positions_only_ignores_the_rest(small_winograd):
    from tasks.data import task_dataset, to_batch

    batch = to_batch(task_dataset(small_winograd, 0)["validation"])
    logits = torch.randn(*batch.inputs.shape, len(small_winograd.vocabulary()))
    mask = training.scored_mask(batch)
    assert int(mask.sum()) == len(batch.positions)
    moved = logits.clone()
    moved[~mask] += torch.randn_like(moved[~mask])  # change every unscored position's logits
    assert torch.equal(
        training.scored_loss(logits, batch.tokens, mask), training.scored_loss(moved, batch.tokens, mask)
    )
    expected = torch.nn.functional.cross_entropy(logits[batch.example_index, batch.positions], batch.answers)
    assert torch.allclose(training.scored_loss(logits, batch.tokens, mask), expected)
