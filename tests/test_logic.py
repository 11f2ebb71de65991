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
def test_a_chain_of_heads_reads_as_links_in_series_and_one_main_path(found, name, chain):
    _, logic = found[name]
    text = sentences(logic)
    heads = chain.split(" -> ")
    for up, down in zip(heads, heads[1:]):
        assert f"in series {up} -> {down}: {down}'s effect needs {up}" in text, text
    assert "main path" in text and "no single path" not in text
    assert "OR" not in text and "AND" not in text and "additive" not in text


def test_an_or_within_a_layer_names_each_branch_and_the_necessary_mlp(found):
    _, logic = found["backup-pair"]
    text = sentences(logic)
    assert "OR: L0H0 | L0H1 are alternatives" in text, text
    assert "MLP0 is necessary" in text
    assert "AND" not in text


def test_three_backups_are_a_three_way_or(found):
    _, logic = found["three-backups"]
    assert "OR: L0H0 | L0H1 | L0H2 are alternatives" in sentences(logic)


def test_an_and_states_what_each_adds_alone_and_the_interaction(found):
    _, logic = found["and-pair"]
    text = sentences(logic)
    assert "AND (synergy): L0H0 and L0H1 together add more than the sum" in text, text
    assert "OR:" not in text


def test_a_symmetric_partial_share_is_an_overlap_not_an_and(found):
    _, logic = found["partial-pair"]
    text = sentences(logic)
    assert "partial overlap (a partial OR): L0H0 and L0H1" in text, text
    assert "AND (synergy): L0H0 and L0H1" not in text and "AND (synergy): L0H1 and L0H0" not in text


def test_a_chain_through_an_mlp_is_a_path_not_no_path(found):
    """mlp-xor: two heads feed MLP0, which computes their XOR for the logits; each counterfactual
    flips one of the two bits, so each pair needs exactly one head: a case split, row by row."""
    p, logic = found["mlp-xor"]
    text = sentences(logic)
    assert "main path" in text and "L0H0.v -> MLP0 -> logits" in text, text
    assert "case split: L0H0 decides" in text and "L0H1 the other" in text and "no pair needs two of them" in text
    assert "MLP0 is necessary" in text


def test_a_backed_up_middle_link_is_an_or_between_necessary_ends(found):
    _, logic = found["backup-chain"]
    text = sentences(logic)
    assert "OR: L1H0 | L1H1 are alternatives" in text, text
    assert "L0H0 is necessary" in text and "MLP1 is necessary" in text
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


def test_knock_out_replays_the_last_block_alone_as_the_whole_forward_would(found):
    """KnockOut runs the blocks before the last once per choice of the members kept there: on every
    subset of the members of a chain with a backed-up link, the edge oracle's numbers."""
    import itertools

    from probes.circuits.logic import KnockOut
    from probes.circuits.logic import every_subset
    from probes.circuits.methods.joint import SetFaithfulness
    from probes.circuits.oracle import record_runs
    from models.graph import Embed

    p, logic = found["backup-chain"]
    graph, members = graph_of(p.spec), [m.component for m in logic.interactions.members]
    assert any(c.layer < p.spec.n_layers - 1 for c in members), members  # knock-outs before the last block
    runs = record_runs(p.model, p.batch, graph)
    sets = every_subset(tuple(members))
    edges = [frozenset(e for e in graph.edges if isinstance(e.sender, Embed) or e.sender in s) for s in sets]
    fast = KnockOut(p.model, p.batch, runs, logic.components)(sets)
    exact = SetFaithfulness(p.model, p.batch, graph, runs)(edges)
    assert torch.allclose(torch.tensor(fast), torch.tensor(exact), atol=1e-5), list(
        itertools.compress(sets, [abs(a - b) > 1e-5 for a, b in zip(fast, exact)])
    )


def test_beyond_the_exhaustive_size_the_search_is_bounded_and_says_so(found, monkeypatch):
    import probes.circuits.logic as logic_module

    p, _ = found["backup-chain"]
    monkeypatch.setattr(logic_module, "EXHAUSTIVE", 4)
    logic = traced(p)
    assert not logic.exhaustive and "a bounded search beyond 4 components" in sentences(logic)
    assert logic.necessary == frozenset({Head(0, 0), MLP(1)})


def test_the_summary_cell_names_the_main_path_or_the_relation(found):
    from probes.report.logic_words import mechanism_cell

    assert mechanism_cell(found["two-hop"][1]) == "L0H0.v>L1H0.q"
    assert mechanism_cell(found["backup-pair"][1]).startswith("L0H0.v>MLP0")
    assert "AND(" in mechanism_cell(found["and-pair"][1]) or mechanism_cell(found["and-pair"][1]).startswith("L")


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
        ("or-across", "OR: L0H0 | L1H0 are alternatives: each alone adds at least 90% of what all add"),
        ("or-within-l1", "OR: L1H0 | L1H1 are alternatives"),
        ("or-three-layers", "OR: L0H0 | L1H0 | L2H0 are alternatives"),
        ("partial-or-across", "partial overlap (a partial OR): L0H0 and L1H0 carry part of the same answer"),
        ("partial-or-across", "L0H0 adds 100% [100%, 100%] with L1H0 knocked out, L1H0 50% [50%, 50%]"),
        ("partial-or-three", "partial overlap (a partial OR): L0H0, L0H1 and L1H0"),
        ("and-across", "AND (synergy): L0H0 and L1H0 together add more than the sum"),
        ("soft-and-across", "L0H0 adds 25% [25%, 25%] with L1H0 knocked out, L1H0 25% [25%, 25%]"),
        ("and-within-l1", "AND (synergy): L1H0 and L1H1 together add more than the sum"),
        ("adder-across", "additive: L0H0 and L1H0 add up"),
        ("adder", "additive: L0H0 and L0H1 add up"),
        ("chain-4", "in series L2H0 -> L3H0: L3H0's effect needs L2H0"),
        ("mlp-chain", "in series MLP0 -> L1H0: L1H0's effect needs MLP0"),
        ("mlp-chain", "in series L0H0 -> MLP0: MLP0's effect needs L0H0"),
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
        assert "AND" not in text and "partial overlap" not in text, text
    else:
        assert "OR:" not in text and "partial overlap" not in text, text


@pytest.mark.parametrize("name", ["adder", "adder-across", "partial-or-across", "partial-or-three"])
def test_additive_heads_and_partial_ors_are_never_an_and_between_heads(gates, name):
    _, logic = gates[name]
    heads = [r for r in logic.relations if r.kind.value == "and" and all(isinstance(c, Head) for c in r.members)]
    assert not heads, sentences(logic)


def test_the_shapley_shares_add_up_to_what_all_members_add(gates):
    _, logic = gates["adder"]
    found = logic.interactions
    assert found.exhaustive
    total = sum(m.shapley.value for m in found.members)
    assert total == pytest.approx(found.total.value, abs=1e-6)
    by = {str(m.component): m.shapley.value for m in found.members}
    assert by["L0H0"] > by["L0H1"] > by["L0H2"]


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


def test_an_mlp_verdict_never_says_computes_where_the_answers_survive():
    """The LD rule can call an MLP needed while every answer survives its ablation: the words then say
    so, with both numbers, instead of 'computes on it ... 100% accuracy without it'."""
    from types import SimpleNamespace

    from probes.report.sublayer_part import mlp_role
    from probes.settings import DEFAULT

    intact = SimpleNamespace(accuracy=1.0, logit_diff=4.0)
    weaker = SimpleNamespace(accuracy=1.0, logit_diff=0.44 * 4.0)
    words = mlp_role(intact, weaker, DEFAULT)
    assert words.startswith("strengthens it") and "needed: mean-ablated it keeps 100% accuracy" in words, words
    assert "44% of the logit difference" in words
    broken = SimpleNamespace(accuracy=0.5, logit_diff=0.0)
    assert mlp_role(intact, broken, DEFAULT).startswith("computes on it")


def test_a_path_is_measured_on_its_own_edges_and_two_readings_of_one_set_are_one_path():
    """attn-only-2x1's two main paths embed -> L0H0.k -> L1H0.q and embed -> L0H0.v -> L1H0.q were one
    4-edge set named twice; a path gets only its first head's other embedding inputs, never another
    component's (here L1H0's own embedding edge)."""
    from models import ModelSpec
    from models.graph import Edge, Embed, Input, Logits
    from probes.circuits.logic import own_paths
    from probes.report.logic_words import path_text

    graph = graph_of(ModelSpec(n_layers=2, d_model=16, n_heads=1, mlp=False, n_ctx=4, d_vocab=5))
    l0, l1 = Head(0, 0), Head(1, 0)
    circuit = frozenset(
        {
            Edge(Embed(), Input(l0, "k")),
            Edge(Embed(), Input(l0, "v")),
            Edge(l0, Input(l1, "q")),
            Edge(l1, Input(Logits())),
            Edge(Embed(), Input(l1, "v")),
        }
    )
    asked = []

    def f(sets):
        asked.extend(sets)
        return [0.9 if len(s) == 4 else 0.2 for s in sets]

    paths = own_paths(graph, circuit, {}, f)
    assert sorted(len(s) for s in asked) == [2, 4]
    assert {path_text(p) for p in paths} == {
        "embed -> L0H0.k/v -> L1H0.q -> logits",
        "embed -> L1H0.v -> logits",
    }
    assert frozenset({Edge(Embed(), Input(l1, "v")), Edge(l1, Input(Logits()))}) in asked
