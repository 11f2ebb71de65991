"""Head scores on a hand-set 2-layer attention-only model whose roles are known by construction:
L0H0 copies the previous token into a slot, L1H0 is an induction head reading that slot through its
keys and copying into the unembedding, L0H1 attends to an earlier copy of its own token (writes
nothing), L1H1 anti-copies weakly."""

from __future__ import annotations

import pytest
import torch

from models import ModelSpec, build_model
from models.components import Head
from tasks.data import task_dataset, to_batch
from tasks.induction import InductionParams, InductionTask

V, N, D_MODEL, N_HEADS = 6, 10, 40, 2
D_HEAD = D_MODEL // N_HEADS
TOK, POS, PREV, OUT = 0, V, V + N, 2 * V + N  # residual slots (one-hot each)
C = 10.0  # query/key gain: sharp attention


def set_head(state, layer, head, W_Q=None, W_K=None, W_V=None, W_O=None):
    """Write per-head [d_model, d_head] / [d_head, d_model] matrices into nn.Linear weights."""
    rows = slice(head * D_HEAD, (head + 1) * D_HEAD)
    for name, matrix in (("q", W_Q), ("k", W_K), ("v", W_V)):
        if matrix is not None:
            state[f"blocks.{layer}.attn.{name}.weight"][rows] = matrix.T
    if W_O is not None:
        state[f"blocks.{layer}.attn.o.weight"][:, rows] = W_O.T


def hand_set_model():
    model = build_model(
        ModelSpec(n_layers=2, d_model=D_MODEL, n_heads=N_HEADS, mlp=False, norm=None, n_ctx=N, d_vocab=V)
    )
    state = {name: torch.zeros_like(tensor) for name, tensor in model.state_dict().items()}
    for t in range(V):
        state["embed.weight"][t, TOK + t] = 1.0
        state["unembed.weight"][t, OUT + t] = 1.0
    for p in range(N):
        state["pos_embed.weight"][p, POS + p] = 1.0
    zeros = lambda rows, cols: torch.zeros(rows, cols)  # noqa: E731
    # L0H0: position p queries position p-1; copies the token there into PREV.
    q, k, v, o = zeros(D_MODEL, D_HEAD), zeros(D_MODEL, D_HEAD), zeros(D_MODEL, D_HEAD), zeros(D_HEAD, D_MODEL)
    for p in range(N):
        q[POS + p, p] = C
        if p + 1 < N:
            k[POS + p, p + 1] = C
    for t in range(V):
        v[TOK + t, t] = 1.0
        o[t, PREV + t] = 1.0
    set_head(state, 0, 0, q, k, v, o)
    # L0H1: same token, other position (token match minus self match); writes nothing.
    q, k = zeros(D_MODEL, D_HEAD), zeros(D_MODEL, D_HEAD)
    for t in range(V):
        q[TOK + t, t] = k[TOK + t, t] = C
    for p in range(N):
        q[POS + p, V + p], k[POS + p, V + p] = C, -C
    set_head(state, 0, 1, q, k)
    # L1H0: current token queries keys whose PREV slot holds it; copies that position's token out.
    q, k, v, o = zeros(D_MODEL, D_HEAD), zeros(D_MODEL, D_HEAD), zeros(D_MODEL, D_HEAD), zeros(D_HEAD, D_MODEL)
    for t in range(V):
        q[TOK + t, t] = k[PREV + t, t] = C
        v[TOK + t, t] = 1.0
        o[t, OUT + t] = 10.0
    set_head(state, 1, 0, q, k, v, o)
    # L1H1: uniform attention, writes minus the tokens it sees (negative copying).
    v, o = zeros(D_MODEL, D_HEAD), zeros(D_HEAD, D_MODEL)
    for t in range(V):
        v[TOK + t, t] = 1.0
        o[t, OUT + t] = -1.0
    set_head(state, 1, 1, W_V=v, W_O=o)
    model.load_state_dict(state)
    return model


@pytest.fixture(scope="module")
def setup():
    task = InductionTask(InductionParams(tokens=V - 1, min_repeat=2, max_repeat=4, train=20, validation=10, heldout=40))
    return hand_set_model(), to_batch(task_dataset(task, 0)["heldout"])


def test_hand_set_model_solves_induction(setup):
    from tasks.evaluate import score_model

    model, batch = setup
    assert score_model(model, batch).accuracy == 1.0


def test_attention_scores_name_the_built_heads(setup):
    from probes.heads import head_scores

    model, batch = setup
    scores = head_scores(model, batch)
    assert scores.previous_token[0][0] > 0.99 and max(scores.previous_token[0][1], *scores.previous_token[1]) < 0.6
    assert scores.induction[1][0] > 0.99 and max(scores.induction[0] + scores.induction[1][1:]) < 0.5
    assert scores.duplicate_token[0][1] > 0.99 and max(scores.duplicate_token[1]) < 0.5
    assert scores.copying[1][0] == pytest.approx(1.0, abs=1e-4)
    assert scores.copying[1][1] == pytest.approx(-1.0, abs=1e-4)
    assert scores.copying[0][0] == pytest.approx(0.0, abs=1e-4)  # writes nowhere the unembedding reads
    assert scores.direct_logit[1][0] > 5 and abs(scores.direct_logit[0][0]) < 1e-4


def test_direct_logit_effects_sum_to_the_logit(setup):
    """Heads' direct effects plus the embeddings' add up to the model's centred answer logit."""
    from probes.heads import direct_logit_effects
    from tasks.evaluate import logits_at_scored, run_logits

    model, batch = setup
    scored = logits_at_scored(run_logits(model, batch.inputs), batch)
    centred = (scored.gather(1, batch.answers[:, None])[:, 0] - scored.mean(-1)).mean()
    # Embeddings write nothing the unembedding reads here, and every bias is zero.
    assert direct_logit_effects(model, batch).sum().item() == pytest.approx(centred.item(), rel=1e-4)


def test_rankings_are_verified_by_ablation(setup):
    from probes.heads import head_report

    model, batch = setup
    report = head_report(model, batch, reference=batch)  # the mean over the batch itself, as built
    assert report.baseline_accuracy == 1.0
    previous, induction = report.roles["previous_token"], report.roles["induction"]
    assert previous.ranking[0] == Head(0, 0) and previous.layer == 0
    assert all(type(h) is Head for h in previous.ranking + list(previous.scores) + list(report.ablated_accuracy))
    assert previous.heads == [Head(0, 0)] and previous.top_is_most_harmful
    assert induction.heads == [Head(1, 0)] and induction.top_is_most_harmful
    assert report.ablated_accuracy[Head(0, 0)] < 0.6 and report.ablated_accuracy[Head(1, 0)] < 0.6
    # The duplicate-token head writes nothing: top-ranked, yet its ablation changes nothing.
    duplicate = report.roles["duplicate_token"]
    assert duplicate.ranking[0] == Head(0, 1) and not duplicate.top_is_most_harmful
    assert report.ablated_accuracy[Head(0, 1)] == 1.0


def test_the_report_names_role_heads_from_their_heads():
    from types import SimpleNamespace

    from probes.report.sections import names, role_cell

    run = SimpleNamespace(heads=SimpleNamespace(previous=[Head(0, 1)], induction=[Head(1, 0), Head(1, 2)]))
    assert role_cell(run) == "prev L0H1, ind L1H0+L1H2"
    assert names(run.heads.induction) == "L1H0, L1H2" and names([]) == "none"
