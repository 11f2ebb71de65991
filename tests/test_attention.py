"""Attention at scored positions: a uniform model's rows are the known prefix average."""

from __future__ import annotations

import pytest
import torch

from models import ModelSpec, build_model
from probes.attention import attention_from, pair_attention, scored_attention
from tasks.data import task_dataset, to_batch


@pytest.fixture(scope="module")
def heldout(small_winograd):
    return to_batch(task_dataset(small_winograd, 0)["heldout"])


def test_uniform_model_attends_evenly_to_the_prefix(heldout, small_winograd):
    spec = ModelSpec(
        n_layers=1,
        d_model=16,
        n_heads=2,
        attention="uniform",
        positions="none",
        n_ctx=heldout.inputs.shape[1],
        d_vocab=len(small_winograd.vocabulary()),
    )
    result = scored_attention(build_model(spec), heldout, small_winograd.vocabulary())
    query = int(heldout.positions[0])
    expected = torch.zeros(heldout.inputs.shape[1])
    expected[: query + 1] = 1 / (query + 1)
    for group in ("all", "crosser", "crossed"):
        torch.testing.assert_close(result.mean[group], expected.expand(1, 2, -1), rtol=0, atol=1e-6)
    assert result.rows["all"] == result.rows["crosser"] + result.rows["crossed"]
    # The answer noun occurs once in the visible prefix (at position 1 or 6).
    assert result.focus["all"][0][0].on_answer == pytest.approx(1 / (query + 1), abs=1e-6)
    assert result.labels[query] == f"p{query} the"
    torch.testing.assert_close(result.by_offset["all"][0, 0, : query + 1], expected[: query + 1])


def test_pair_and_query_rows_and_heatmap(heldout, small_winograd):
    from probes.report.figures import attention_heatmap

    vocabulary = small_winograd.vocabulary()
    spec = ModelSpec(
        n_layers=2, d_model=16, n_heads=2, mlp=False, n_ctx=heldout.inputs.shape[1], d_vocab=len(vocabulary)
    )
    model = build_model(spec, seed=2)
    pair = pair_attention(model, heldout, 0, vocabulary)
    assert pair.clean.shape == pair.corrupt.shape == (2, 2, heldout.inputs.shape[1])
    before = slice(0, pair.position + 1)  # the pair differs before the scored position
    assert pair.clean_tokens[before] != pair.corrupt_tokens[before]
    torch.testing.assert_close(pair.clean.sum(-1), torch.ones(2, 2))
    rows = attention_from(model, heldout, 3)
    assert rows["all"][:, :, 4:].abs().max() == 0  # causal: position 3 sees keys 0..3 only
    figure = attention_heatmap(scored_attention(model, heldout, vocabulary))
    assert len(figure.axes) >= 3


def test_roles_at_one_position_reuse_activation_patching(heldout, small_winograd):
    """A role at the same position in every pair reads activation patching's head_out there; a role
    whose position varies is patched per pair. Both equal patching the role's positions directly."""
    import dataclasses

    from probes.attention import role_patching
    from probes.patching import activation_patching, patch_many
    from tasks.data import spread_subset

    spec = ModelSpec(
        n_layers=2,
        d_model=16,
        n_heads=2,
        mlp=False,
        n_ctx=heldout.inputs.shape[1],
        d_vocab=len(small_winograd.vocabulary()),
    )
    model, pairs = build_model(spec, seed=3), spread_subset(heldout, 32)
    moved = torch.where(torch.arange(len(pairs)) % 2 == 0, 1, 6)  # a role at position 1 or 6 by pair
    pairs = dataclasses.replace(pairs, roles={**pairs.roles, "moving": moved})
    fixed = [role for role, where in pairs.roles.items() if bool((where == where[0]).all()) and int(where[0]) >= 0]
    assert fixed  # Winograd's template puts its roles at fixed positions
    patching = activation_patching(model, pairs)
    found = role_patching(model, pairs, patching)
    for role in [*fixed, "moving"]:
        targets = [(layer, pairs.roles[role], head) for layer in range(2) for head in range(2)]
        direct = torch.tensor([o.metric for o in patch_many(model, pairs, "z", targets)]).view(2, 2)
        torch.testing.assert_close(found[role], patching.recovered(direct), rtol=0, atol=1e-5)
