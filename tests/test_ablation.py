"""Head ablation: zero, mean and resample replace exactly what they say."""

from __future__ import annotations

import pytest
import torch

from models import ModelSpec, UsageError, build_model
from models.components import Head
from probes.ablation import (
    ABLATION_METHODS,
    Ablation,
    ablate,
    ablated_scored,
    ablation_named,
    parse_heads,
    resample_rows,
)
from probes.ablation_sweep import head_ablation_sweep
from tasks.data import task_dataset, to_batch
from tasks.evaluate import score_model


def untrained(task, mlp: bool, seed: int):
    """A norm-free 2-layer, 2-head model (with or without MLPs) and the task's held-out and training rows."""
    data = task_dataset(task, 0)
    heldout, train = to_batch(data["heldout"]), to_batch(data["train"])
    spec = ModelSpec(
        n_layers=2,
        d_model=16,
        n_heads=2,
        mlp=mlp,
        norm=None,
        n_ctx=heldout.inputs.shape[1],
        d_vocab=len(task.vocabulary()),
    )
    return build_model(spec, seed=seed), heldout, train


@pytest.fixture(scope="module")
def setup(small_winograd):
    return untrained(small_winograd, mlp=False, seed=5)


def direct_logits(model, batch, z_means):
    """An attention-only, norm-free model with every head replaced: embeddings + the replaced head
    writes, unembedded. Computed from the weights, not through the hooks under test."""
    residual = model.W_E[batch.inputs] + model.W_pos[: batch.inputs.shape[1]]
    for layer, z in enumerate(z_means):
        residual = residual + torch.einsum("...hd,hdm->...m", z, model.W_O[layer]) + model.b_O[layer]
    return residual @ model.W_U + model.b_U


def test_zero_and_mean_ablation_of_every_head_match_the_weights(setup):
    model, heldout, train = setup
    every = [(l, h) for l in range(2) for h in range(2)]
    zero = ablated_scored(model, heldout, every, Ablation.ZERO)
    zeros = [torch.zeros(heldout.inputs.shape[1], 2, 8)] * 2
    expected = direct_logits(model, heldout, zeros)[heldout.example_index, heldout.positions]
    assert torch.equal(zero.predicted, expected.argmax(-1))

    _, cache = model.run_with_cache(train.inputs)
    means = [cache[f"blocks.{l}.attn.hook_z"][:, : heldout.inputs.shape[1]].mean(0) for l in range(2)]
    mean = ablated_scored(model, heldout, every, Ablation.MEAN, reference=train)
    expected = direct_logits(model, heldout, means)[heldout.example_index, heldout.positions]
    scored = expected.gather(1, heldout.answers[:, None])[:, 0] - expected.gather(1, heldout.foils[:, None])[:, 0]
    torch.testing.assert_close(mean.logit_diff, scored, rtol=0, atol=1e-4)


def test_sweep_covers_baseline_each_head_and_each_layer(setup):
    model, heldout, _ = setup
    sweep = head_ablation_sweep(model, heldout, Ablation.ZERO)
    assert [r.label for r in sweep] == ["none", "L0H0", "L0H1", "L1H0", "L1H1", "L0H0, L0H1", "L1H0, L1H1"]
    assert sweep[0].accuracy == pytest.approx(score_model(model, heldout).accuracy)
    assert set(sweep[0].by_group) == {"crosser", "crossed"}
    assert sum(g["n"] for g in sweep[0].by_group.values()) == len(heldout.positions)


# The sweep replays one clean run instead of ablating with hooks: check it on every block layout.
SWEEP_SPECS = {
    "attention-only": dict(mlp=False, norm=None),
    "MLP and LayerNorm": dict(),
    "rotary, unscaled, 3 layers": dict(n_layers=3, positions="rotary", scale_scores=False),
}


@pytest.mark.parametrize("layout", SWEEP_SPECS)
@pytest.mark.parametrize("method", ABLATION_METHODS)
def test_sweep_equals_ablating_each_target_on_its_own(setup, method, layout):
    _, heldout, train = setup
    fields = dict(n_layers=2, d_model=16, n_heads=2, n_ctx=heldout.inputs.shape[1], d_vocab=setup[0].cfg.d_vocab)
    model = build_model(ModelSpec(**{**fields, **SWEEP_SPECS[layout]}), seed=7)
    sweep = head_ablation_sweep(model, heldout, method, seed=3, reference=train)
    assert len(sweep) == 1 + 3 * model.cfg.n_layers
    for result in sweep:
        alone = ablate(model, heldout, result.heads, method, seed=3, reference=train)
        assert result.accuracy == alone.accuracy
        assert result.logit_diff == pytest.approx(alone.logit_diff, abs=1e-5)
        for group, scores in result.by_group.items():
            assert scores["logit_diff"] == pytest.approx(alone.by_group[group]["logit_diff"], abs=1e-5)


@pytest.mark.parametrize("method", [Ablation.ZERO, Ablation.MEAN])
def test_sweep_replays_blocks_whose_attention_replaces_the_stream(setup, method):
    # Ablating every head of such a block leaves nothing of the tokens, so answer and foil logits
    # tie and argmax follows float noise: compare the logit differences, not the accuracies. No
    # LayerNorm: zero-ablated, the stream is ~0 and LayerNorm would blow float noise up to unit size.
    _, heldout, train = setup
    model = build_model(
        ModelSpec(
            n_layers=2,
            d_model=16,
            n_heads=2,
            n_ctx=heldout.inputs.shape[1],
            norm=None,
            d_vocab=setup[0].cfg.d_vocab,
            positions="alibi",
            residual=False,
        ),
        seed=7,
    )
    for result in head_ablation_sweep(model, heldout, method, seed=3, reference=train):
        alone = ablate(model, heldout, result.heads, method, seed=3, reference=train)
        assert result.logit_diff == pytest.approx(alone.logit_diff, abs=1e-5)


def test_resample_is_seeded_and_reads_long_enough_rows(setup):
    model, heldout, train = setup
    rows = resample_rows(heldout, train, seed=1)
    assert torch.equal(rows, resample_rows(heldout, train, seed=1))
    assert bool((train.lengths[rows] >= heldout.lengths).all())
    first = ablate(model, heldout, ["L1H0"], Ablation.RESAMPLE, seed=1, reference=train)
    assert first == ablate(model, heldout, [(1, 0)], Ablation.RESAMPLE, seed=1, reference=train)
    assert first.method is Ablation.RESAMPLE and first.heads == (Head(1, 0),) and first.label == "L1H0"


def test_bad_heads_and_methods_are_usage_errors(setup):
    model, heldout, _ = setup
    assert parse_heads(["L0H1", (1, 0)]) == ((0, 1), (1, 0))
    with pytest.raises(UsageError, match="L<layer>H<head>"):
        parse_heads(["head1"])
    with pytest.raises(UsageError, match="does not exist"):
        ablate(model, heldout, ["L2H0"])
    for method in ("mean", Ablation.COUNTERFACTUAL):  # a name not converted; a method heads cannot take
        with pytest.raises(UsageError, match="one of zero, mean, resample"):
            ablate(model, heldout, ["L0H0"], method=method)


def test_a_bad_method_name_at_the_edge_is_one_line_naming_the_choices():
    assert ablation_named("resample", ABLATION_METHODS) is Ablation.RESAMPLE
    assert ablation_named("counterfactual") is Ablation.COUNTERFACTUAL
    for name in ("noise", "counterfactual"):
        with pytest.raises(UsageError) as error:
            ablation_named(name, ABLATION_METHODS)
        assert str(error.value) == f"ablation method must be one of zero, mean, resample, got {name!r}"


def test_reference_and_clean_forwards_are_sized_in_tokens(setup, monkeypatch):
    # One forward over every reference row held all their attention scores at once: a plugin's
    # 2000-token sequences ran the report out of memory. Chunked forwards give the same sweep.
    import probes.ablation
    import probes.ablation_sweep

    model, heldout, train = setup
    whole = head_ablation_sweep(model, heldout, reference=train)
    budget, widths = 4 * train.inputs.shape[1], []
    monkeypatch.setattr(probes.ablation, "TOKENS_PER_FORWARD", budget)
    monkeypatch.setattr(probes.ablation_sweep, "TOKENS_PER_FORWARD", budget)
    handle = model.embed.register_forward_hook(lambda module, args, out: widths.append(args[0].numel()))
    chunked = head_ablation_sweep(model, heldout, reference=train)
    handle.remove()
    assert widths and max(widths) <= budget
    assert [r.logit_diff for r in chunked] == pytest.approx([r.logit_diff for r in whole], abs=1e-6)
    assert [r.top_share for r in chunked] == [r.top_share for r in whole]


def test_one_ablation_enum_for_heads_and_edges():
    # The edge graph has no resample ablation: refused, not run as another one.
    from probes.circuits import ablations

    assert ablations.Ablation is Ablation and Ablation.RESAMPLE not in ablations.EDGE_ABLATIONS
    with pytest.raises(UsageError, match="edge ablation must be one of counterfactual, mean, zero, got"):
        ablations.ablated_runs(None, None, None, Ablation.RESAMPLE)


@pytest.fixture(scope="module")
def mlp_model(small_winograd):
    return untrained(small_winograd, mlp=True, seed=6)


def logits_with_mlp_out(model, batch, layer, replacement):
    """The model's scored logits with MLP `layer`'s output set to `replacement` ([pos, d] or [n, pos, d]),
    through a plain hook written here rather than the hooks under test."""

    def hook(out, hook):
        return replacement.expand_as(out).clone()

    logits = model.run_with_hooks(batch.inputs, fwd_hooks=[(f"blocks.{layer}.hook_mlp_out", hook)])
    return logits[batch.example_index, batch.positions]


@pytest.mark.parametrize("method", ABLATION_METHODS)
def test_an_mlp_is_ablated_by_name_as_a_head_is(mlp_model, method):
    """Zero: its output 0; mean: its per-position mean over the reference's rows (every reference row
    is as long as the batch's here); resample: a seeded reference row's output at each position."""
    model, heldout, train = mlp_model
    width = heldout.inputs.shape[1]
    assert bool(train.real_positions()[:, :width].all()), "the reference's rows are padded: the mean below is not plain"
    _, cache = model.run_with_cache(train.inputs)
    outputs = cache["blocks.1.hook_mlp_out"][:, :width]
    replacement = {
        Ablation.ZERO: torch.zeros(width, model.cfg.d_model),
        Ablation.MEAN: outputs.mean(0),
        Ablation.RESAMPLE: outputs[resample_rows(heldout, train, 3)],
    }[method]
    logits = logits_with_mlp_out(model, heldout, 1, replacement)
    expected = logits.argmax(-1)
    result = ablated_scored(model, heldout, ["MLP1"], method, seed=3, reference=train)
    assert torch.equal(result.predicted, expected)
    answer = logits.gather(1, heldout.answers[:, None])[:, 0]
    assert torch.allclose(result.loss, torch.nn.functional.cross_entropy(logits, heldout.answers), atol=1e-6)
    assert not torch.allclose(
        answer, logits_with_mlp_out(model, heldout, 1, outputs.mean(0) + 1.0).gather(1, heldout.answers[:, None])[:, 0]
    ), "the MLP's output does not reach the answer: the test cannot tell"
    named = ablate(model, heldout, ["MLP1"], method, seed=3, reference=train)
    assert named.label == "MLP1" and named.heads == () and named.mlps[0].layer == 1
    assert named.accuracy == pytest.approx(float((expected == heldout.answers).float().mean()))


def test_heads_and_mlps_ablate_together_and_a_missing_mlp_is_one_line(mlp_model, setup):
    model, heldout, train = mlp_model
    both = ablate(model, heldout, ["L0H1", "MLP0"], Ablation.ZERO)
    assert both.label == "L0H1, MLP0"
    with pytest.raises(UsageError, match="MLP2 does not exist: the model has MLP0 to MLP1"):
        ablate(model, heldout, ["MLP2"], Ablation.ZERO)
    with pytest.raises(UsageError, match="MLPx"):
        ablate(model, heldout, ["MLPx"], Ablation.ZERO)
    attn_only, heldout, _ = setup
    with pytest.raises(UsageError, match="MLP0 does not exist: the model has no MLPs"):
        ablate(attn_only, heldout, ["MLP0"], Ablation.ZERO)


def test_the_mlp_sweep_has_one_row_per_mlp_and_none_without_mlps(mlp_model, setup):
    from probes.ablation_sweep import mlp_ablation_sweep

    model, heldout, train = mlp_model
    rows = mlp_ablation_sweep(model, heldout, Ablation.MEAN, reference=train)
    assert [r.label for r in rows] == ["MLP0", "MLP1"]
    attn_only, heldout, train = setup
    assert mlp_ablation_sweep(attn_only, heldout, Ablation.MEAN, reference=train) == []


MLP_SWEEP_SPECS = {
    "MLP and LayerNorm": dict(),
    "rotary, unscaled, 3 layers": dict(n_layers=3, positions="rotary", scale_scores=False),
    "attention replacing the stream": dict(norm=None, positions="alibi", residual=False),
    "post-norm": dict(norm_place="post"),
}


@pytest.mark.parametrize("layout", MLP_SWEEP_SPECS)
@pytest.mark.parametrize("method", ABLATION_METHODS)
def test_the_mlp_sweep_equals_ablating_each_mlp_with_hooks(setup, method, layout):
    """The MLP sweep replays the clean run from each MLP's block (a post-norm model is ablated with
    hooks): every row equals ablating that MLP alone with hooks."""
    from probes.ablation_sweep import mlp_ablation_sweep

    _, heldout, train = setup
    fields = dict(n_layers=2, d_model=16, n_heads=2, n_ctx=heldout.inputs.shape[1], d_vocab=setup[0].cfg.d_vocab)
    model = build_model(ModelSpec(**{**fields, **MLP_SWEEP_SPECS[layout]}), seed=7)
    rows = mlp_ablation_sweep(model, heldout, method, seed=3, reference=train)
    assert [r.label for r in rows] == [f"MLP{layer}" for layer in range(model.cfg.n_layers)]
    for result in rows:
        alone = ablate(model, heldout, list(result.mlps), method, seed=3, reference=train)
        assert result.logit_diff == pytest.approx(alone.logit_diff, abs=1e-5)
        for group, scores in result.by_group.items():
            assert scores["logit_diff"] == pytest.approx(alone.by_group[group]["logit_diff"], abs=1e-5)


@pytest.mark.parametrize("method", [Ablation.ZERO, Ablation.MEAN])
def test_a_post_norm_sweep_equals_ablating_each_target(setup, method):
    """A post-norm block normalises after its residual add, which the replay (the ablation's change
    added to the stream, the MLP run from there) would skip: its sweep ablates with hooks."""
    _, heldout, train = setup
    spec = ModelSpec(
        n_layers=2,
        d_model=16,
        n_heads=2,
        n_ctx=heldout.inputs.shape[1],
        d_vocab=setup[0].cfg.d_vocab,
        norm_place="post",
    )
    model = build_model(spec, seed=7)
    for result in head_ablation_sweep(model, heldout, method, seed=3, reference=train):
        alone = ablate(model, heldout, result.heads, method, seed=3, reference=train)
        assert result.logit_diff == pytest.approx(alone.logit_diff, abs=1e-5)
