"""EAP, EAP-IG and ACDC-style pruning: checked against TL's node attribution, against the oracle
where the metric is linear, and on the planted circuits."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from models import ModelSpec, build_model
from models.graph import Embed, Head, Input, Logits, MLP, graph_of
from tests.conftest import float32_sum_tolerance, hand_batch

SPEC = ModelSpec(n_layers=2, d_model=16, n_heads=2, n_ctx=4, d_vocab=4)


def scaled_model(spec, seed=3):
    model = build_model(spec, seed=seed)
    model.load_state_dict({name: 3 * value for name, value in model.state_dict().items()})
    return model


def fixed_answer_batch(n=8):
    """Every pair scored on token 0 against token 1, so one metric function serves every pair."""
    batch = hand_batch(n)
    return dataclasses.replace(batch, answers=torch.zeros(n, dtype=torch.long), foils=torch.ones(n, dtype=torch.long))


def test_eap_edges_out_of_a_sender_sum_to_transformer_lens_node_attribution():
    """TL 4.3's attribution_patch (node granularity, denoising) scores a writer by
    (clean - corrupt) . d metric / d write at the corrupt run; a write's gradient is the sum of its
    readers' input gradients, so denoising EAP edges out of a sender must sum to that node score."""
    from transformer_lens.tools.analysis.attribution_patching import EdgeAttributionConfig, attribution_patch

    from probes.circuits.methods.attribution import eap
    from probes.circuits.oracle import Direction
    from probes.patching import corrupt_inputs

    model, batch, graph = scaled_model(SPEC), fixed_answer_batch(), graph_of(SPEC)
    ours = eap(model, batch, graph, direction=Direction.DENOISE)
    theirs = attribution_patch(
        model,
        batch.inputs,
        corrupt_inputs(batch),
        lambda logits: logits[0, 3, 0] - logits[0, 3, 1],
        EdgeAttributionConfig(granularity="node"),
    ).node_scores
    summed = {}
    for edge, score in zip(ours.edges, ours.score.tolist()):
        summed[edge.sender] = summed.get(edge.sender, 0.0) + score

    def node_of(key):
        return (
            Embed()
            if key.kind == "embed"
            else Head(key.layer, key.head)
            if key.kind == "attn_head_out"
            else MLP(key.layer)
        )

    theirs_by_sender = {}
    for key, score in theirs.items():  # TL scores nodes per position; ours sum positions
        theirs_by_sender[node_of(key)] = theirs_by_sender.get(node_of(key), 0.0) + score
    assert set(theirs_by_sender) == set(summed)
    # Each side adds the same products (examples x positions x d_model, over the sender's edges) in
    # another order: measured 8.213828 against 8.213971 on a loaded machine.
    largest = max(abs(s) for s in summed.values())
    for sender, score in summed.items():
        terms = batch.inputs.numel() * SPEC.d_model * sum(e.sender == sender for e in graph.edges)
        assert score == pytest.approx(theirs_by_sender[sender], abs=float32_sum_tolerance(terms, largest)), sender
    assert max(abs(s) for s in summed.values()) > 0.1


def test_eap_equals_the_oracle_where_the_metric_is_linear_in_the_edge():
    """Without a norm the answer - foil logit is linear in the logits' input: EAP's edges into the
    logits are exact there, and wrong sign or direction would show."""
    from probes.circuits.methods.attribution import eap
    from probes.circuits.oracle import edge_effects

    spec = dataclasses.replace(SPEC, norm=None)
    model, batch, graph = scaled_model(spec), fixed_answer_batch(), graph_of(spec)
    estimate, exact = eap(model, batch, graph), edge_effects(model, batch, graph)
    into_logits = torch.tensor([e.receiver == Input(Logits()) for e in graph.edges])
    assert torch.allclose(estimate.score[into_logits], exact.effect[into_logits], atol=1e-4)
    assert not torch.allclose(estimate.score[~into_logits], exact.effect[~into_logits], atol=1e-3)


def test_eap_ig_with_one_step_is_eap_and_more_steps_move_towards_the_oracle():
    from probes.circuits.methods.attribution import eap, eap_ig
    from probes.circuits.oracle import edge_effects

    model, batch, graph = scaled_model(SPEC), fixed_answer_batch(), graph_of(SPEC)
    exact = edge_effects(model, batch, graph).effect
    plain, one, many = (
        eap(model, batch, graph).score,
        eap_ig(model, batch, graph, 1).score,
        eap_ig(model, batch, graph, 8).score,
    )
    assert torch.equal(plain, one)
    assert (many - exact).abs().sum() < (plain - exact).abs().sum()


@pytest.fixture(scope="module")
def planted():
    from probes.circuits.truth.planted import planted_models

    return planted_models(n=16)


def test_pruning_keeps_exactly_the_planted_circuit_or_one_of_two_alternative_branches(planted):
    from probes.circuits.methods.attribution import acdc
    from probes.circuits.truth.planted import Structure

    for p in planted:
        kept = acdc(p.model, p.batch, graph_of(p.spec), threshold=0.05).circuit
        if p.structure is Structure.ALTERNATIVES:  # one branch suffices: ACDC drops the other
            assert kept < p.edges and len(p.edges - kept) == 2, p.name
        else:
            assert kept == p.edges, p.name


def test_eap_misses_edges_through_saturated_attention_and_eap_ig_finds_them(planted):
    """The known failure of plain attribution (Hanna et al. 2024), reproduced by construction: a
    sharp softmax has ~zero gradient with respect to its query or key input."""
    from probes.circuits.methods.attribution import eap, eap_ig
    from probes.circuits.methods.scores import auroc

    two_hop = planted[0]
    graph = graph_of(two_hop.spec)
    truth = torch.tensor([e in two_hop.edges for e in graph.edges])
    assert auroc(eap(two_hop.model, two_hop.batch, graph).score.abs(), truth) < 0.9
    assert auroc(eap_ig(two_hop.model, two_hop.batch, graph, 5).score.abs(), truth) == 1.0
