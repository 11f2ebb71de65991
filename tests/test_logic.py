"""The words truth suite: on planted models whose relations are known by construction, the
relation sentences the report prints (probes.report.logic_words from probes.circuits.logic) are
asserted, not only scores. Each relation must fire where it is planted and stay silent where not."""

from __future__ import annotations

import pytest
import torch

from models.graph import MLP, Head, graph_of

PAIRS = 16


def traced(p):
    from probes.circuits.logic import logic
    from probes.circuits.oracle import edge_effects, record_runs

    graph = graph_of(p.spec)
    runs = record_runs(p.model, p.batch, graph)
    single = edge_effects(p.model, p.batch, graph, runs=runs)
    return logic(p.model, p.batch, graph, p.edges, single.normalised(), runs)


@pytest.fixture(scope="module")
def found():
    from probes.circuits.truth import planted

    makers = (
        planted.two_hop,
        planted.induction,
        planted.three_hop,
        planted.mlp_xor,
        planted.backup_pair,
        planted.partial_pair,
        planted.three_backups,
        planted.and_pair,
        planted.backup_chain,
    )
    return {p.name: (p, traced(p)) for p in (make(PAIRS) for make in makers)}


def sentences(logic) -> str:
    from probes.report.logic_words import logic_sentences

    return " | ".join(logic_sentences(logic))


def kinds(logic) -> set[str]:
    return {r.kind.value for r in logic.relations}


@pytest.mark.parametrize(
    "name,chain", [("two-hop", "L0H0 -> L1H0"), ("induction", "L0H0 -> L1H0"), ("three-hop", "L0H0 -> L1H0 -> L2H0")]
)
def test_a_chain_of_heads_reads_as_one_series_and_one_main_path(found, name, chain):
    _, logic = found[name]
    text = sentences(logic)
    assert kinds(logic) == {"series"}, text
    assert f"in series {chain}: each link is needed" in text
    assert "main path" in text and "no single path" not in text
    assert "OR" not in text and "AND" not in text


def test_an_or_within_a_layer_names_each_branch_and_what_every_branch_needs(found):
    _, logic = found["backup-pair"]
    text = sentences(logic)
    assert "OR: L0H0 | L0H1 are alternatives: each branch suffices alone (keeps 100%, 100%" in text
    assert "MLP0 is in every minimal set: necessary (without MLP0 0%)" in text
    assert "AND" not in text


def test_three_backups_are_a_three_way_or(found):
    _, logic = found["three-backups"]
    assert "OR: L0H0 | L0H1 | L0H2 are alternatives" in sentences(logic)


def test_an_and_names_each_alone_share_below_the_bar(found):
    _, logic = found["and-pair"]
    text = sentences(logic)
    assert "AND: L0H0 and L0H1 are jointly needed: each alone (the others knocked out) keeps 0%, 0%" in text
    assert "OR:" not in text


def test_a_shared_answer_is_an_and_with_its_partial_shares(found):
    _, logic = found["partial-pair"]
    text = sentences(logic)
    assert "AND: L0H0 and L0H1 are jointly needed: each alone (the others knocked out) keeps 70%, 70%" in text
    assert "OR:" not in text


def test_a_chain_through_an_mlp_is_a_path_not_no_path(found):
    """mlp-xor: two heads feed MLP0, which computes their XOR for the logits."""
    _, logic = found["mlp-xor"]
    text = sentences(logic)
    assert "in series L0H0 -> MLP0" in text and "in series L0H1 -> MLP0" in text
    assert "AND: L0H0 and L0H1 are jointly needed" in text


def test_a_backed_up_middle_link_is_an_or_between_necessary_ends(found):
    _, logic = found["backup-chain"]
    text = sentences(logic)
    assert "OR: L1H0 | L1H1 are alternatives" in text
    assert "L0H0 and MLP1 are in every minimal set: necessary" in text
    assert logic.necessary == frozenset({Head(0, 0), MLP(1)})
    assert "main paths" in text and "L0H0.v -> L1H0.v -> MLP1 -> logits" in text


def test_knock_out_at_the_components_equals_the_edge_oracle(found):
    """KnockOut (hook_z / hook_mlp_out) against patching every out-edge on the edge oracle."""
    from probes.circuits.logic import KnockOut
    from probes.circuits.methods.joint import SetFaithfulness
    from probes.circuits.oracle import record_runs
    from models.graph import Embed

    p, logic = found["backup-chain"]
    graph = graph_of(p.spec)
    runs = record_runs(p.model, p.batch, graph)
    sets = [
        frozenset(),
        frozenset({Head(0, 0)}),
        frozenset({Head(0, 0), Head(1, 1), MLP(1)}),
        frozenset(logic.components),
    ]
    edges = [frozenset(e for e in graph.edges if isinstance(e.sender, Embed) or e.sender in s) for s in sets]
    fast = KnockOut(p.model, p.batch, runs, logic.components)(sets)
    exact = SetFaithfulness(p.model, p.batch, graph, runs)(edges)
    assert torch.allclose(torch.tensor(fast), torch.tensor(exact), atol=1e-5)


def test_beyond_the_exhaustive_size_the_search_is_bounded_and_says_so(found, monkeypatch):
    import probes.circuits.logic as logic_module

    p, _ = found["backup-chain"]
    monkeypatch.setattr(logic_module, "EXHAUSTIVE", 4)
    logic = traced(p)
    assert not logic.exhaustive and "a bounded search beyond 4 components" in sentences(logic)
    assert logic.necessary == frozenset({Head(0, 0), MLP(1)})


def test_the_summary_cell_names_the_main_path_or_the_or(found):
    from probes.report.logic_words import mechanism_cell

    assert mechanism_cell(found["two-hop"][1]) == "L0H0.v>L1H0.q"
    assert mechanism_cell(found["backup-pair"][1]).startswith("L0H0.v>MLP0")
    assert mechanism_cell(found["and-pair"][1]) == "no path >= 50%" or "AND" in mechanism_cell(found["and-pair"][1])


def test_mlp_ablation_and_the_decodability_profile_on_a_trained_block():
    """A planted MLP model: every MLP gets a mean and a zero row, and the profile has
    one probe per sublayer, each an accuracy in [0, 1] on the held-out rows."""
    from probes.ablation import Ablation, reference_activations
    from probes.circuits.truth.planted import mlp_xor
    from probes.sublayers import sublayers

    p = mlp_xor(PAIRS)
    reference = reference_activations(p.model, p.batch)
    result = sublayers(p.model, p.batch, p.batch, reference)
    assert [(m.layer, m.method) for m in result.mlps] == [(0, Ablation.MEAN), (0, Ablation.ZERO)]
    assert [d.after for d in result.profile] == ["embeddings", "attention 0", "MLP 0"]
    # mlp-xor's MLP0 computes the answer: zero-ablating it must cost accuracy
    assert result.mlps[1].scores.accuracy < result.intact.accuracy
    assert all(0.0 <= d.accuracy <= 1.0 for d in result.profile)


def test_the_profile_reads_a_post_norm_block_after_its_attention_where_it_is():
    """TL 4 aliases hook_resid_mid to ln2's input, which a post-norm block calls after its MLP: the
    profile's "after attention" stage must hold ln1(x + attention(x)), the MLP's input."""
    from models import ModelSpec, build_model
    from probes.ablation import chunked_cache
    from probes.sublayers import stages

    model = build_model(ModelSpec(n_layers=2, d_model=16, n_heads=2, n_ctx=6, d_vocab=7, norm_place="post"), seed=1)
    tokens = torch.randint(0, 7, (4, 6), generator=torch.Generator().manual_seed(0))
    named = dict(stages(model))
    _, cache = chunked_cache(model, tokens, list(named.values()))
    residual = cache[named["embeddings"]]
    with torch.no_grad():
        for layer, block in enumerate(model.blocks):
            after_attention = block.ln1(residual + block.attn(residual)[0])
            residual = block.ln2(after_attention + block.mlp(after_attention))
            assert torch.allclose(cache[named[f"attention {layer}"]], after_attention, atol=1e-6)
            assert torch.allclose(cache[named[f"MLP {layer}"]], residual, atol=1e-6)


@pytest.fixture(scope="module")
def gates():
    from probes.circuits.truth.gates import gate_models

    return {g.name: (g, traced(g)) for g in gate_models(PAIRS)}


@pytest.mark.parametrize(
    "name,says",
    [
        ("or-across", "OR: L0H0 | L1H0 are alternatives: each branch suffices alone (keeps 100%, 100%"),
        ("or-within-l1", "OR: L1H0 | L1H1 are alternatives"),
        ("or-three-layers", "are alternatives: each branch suffices alone (keeps 100%, 100%, 100%"),
        ("partial-or-across", "partial OR: L1H0 is a partial backup of L0H0: with L0H0 knocked out it keeps 50%"),
        ("partial-or-three", "OR: L0H0 | L0H1+L1H0 are alternatives"),
        (
            "partial-or-three",
            "AND: L0H1 and L1H0 are jointly needed: each alone (the others knocked out) keeps 50%, 50%",
        ),
        ("and-across", "AND: L0H0 and L1H0 are jointly needed: each alone (the others knocked out) keeps 0%, 0%"),
        (
            "soft-and-across",
            "AND: L0H0 and L1H0 are jointly needed: each alone (the others knocked out) keeps 25%, 25%",
        ),
        ("and-within-l1", "AND: L1H0 and L1H1 are jointly needed: each alone (the others knocked out) keeps 75%, 0%"),
        ("and-three", "AND: L0H0, L1H0 and L2H0 are jointly needed"),
        ("chain-4", "in series L0H0 -> L1H0 -> L2H0 -> L3H0: each link is needed"),
        ("mlp-chain", "in series L0H0 -> MLP0 -> L1H0: each link is needed"),
    ],
)
def test_planted_gates_read_as_planted(gates, name, says):
    _, logic = gates[name]
    text = sentences(logic)
    assert says in text, text


@pytest.mark.parametrize(
    "name",
    ["or-across", "or-within-l1", "or-three-layers", "and-across", "and-within-l1", "chain-2", "chain-3", "mlp-chain"],
)
def test_an_or_is_never_an_and_nor_a_chain_an_or(gates, name):
    _, logic = gates[name]
    text = sentences(logic)
    if name.startswith("or"):
        assert "AND:" not in text and "partial OR" not in text, text
    else:
        assert "OR:" not in text, text


def test_an_mlp_that_computes_is_needed_and_one_that_carries_is_not(gates):
    from probes.ablation import reference_activations
    from probes.report.sublayer_part import mlp_words
    from probes.settings import DEFAULT
    from probes.sublayers import sublayers

    words = {}
    for name in ("mlp-computes", "mlp-carries"):
        g, _ = gates[name]
        reference = reference_activations(g.model, g.batch)
        words[name] = " ".join(mlp_words(sublayers(g.model, g.batch, g.batch, reference), DEFAULT))
    assert "MLP1 needed" in words["mlp-computes"], words
    assert "MLP0 needed" not in words["mlp-carries"], words
