"""Mechanism signatures: invariant when heads within a layer are relabelled, different when the
mechanism differs; stored as JSON; traced on a model whose heads were permuted (float-equal)."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
import torch

from models import ModelSpec
from models.graph import MLP, Edge, Embed, Head, Input, Logits
from probes.circuits.signature import MechanismSignature, mechanism_signature, relabelled_heads
from probes.circuits.roles import PREVIOUS, UNNAMED, attends_role

ROLES = [PREVIOUS, attends_role("adjective"), UNNAMED]


def random_circuit(rng: random.Random, n_layers: int = 3, n_heads: int = 4):
    """Random edges of a layered graph (embed, heads, MLPs, logits) and random roles."""
    heads = [Head(layer, h) for layer in range(n_layers) for h in range(n_heads)]
    roles = {head: rng.choice(ROLES) for head in heads}
    edges = set()
    for _ in range(rng.randint(3, 14)):
        receiver_layer = rng.randrange(n_layers + 1)
        if receiver_layer == n_layers:
            receiver = Input(Logits())
        elif rng.random() < 0.2:
            receiver = Input(MLP(receiver_layer))
        else:
            receiver = Input(Head(receiver_layer, rng.randrange(n_heads)), rng.choice("qkv"))
        senders = (
            [Embed()] + [h for h in heads if h.layer < receiver_layer] + [MLP(layer) for layer in range(receiver_layer)]
        )
        edges.add(Edge(rng.choice(senders), receiver, rng.choice([None, None, 2])))
    return sorted(edges, key=str), roles


def relabel(edges, roles, rng: random.Random, n_heads: int = 4):
    """The same circuit with each layer's heads renumbered by a random permutation."""
    layers = {head.layer for head in roles}
    perm = {layer: rng.sample(range(n_heads), n_heads) for layer in layers}

    def move(node):
        return Head(node.layer, perm[node.layer][node.head]) if isinstance(node, Head) else node

    moved = [Edge(move(e.sender), Input(move(e.receiver.node), e.receiver.port), e.position) for e in edges]
    rng.shuffle(moved)  # order of the edges is no part of a circuit either
    return moved, {move(head): role for head, role in roles.items()}, move


@pytest.mark.parametrize("seed", range(200))
def test_relabelling_heads_within_a_layer_keeps_the_signature(seed):
    rng = random.Random(seed)
    edges, roles = random_circuit(rng)
    moved, moved_roles, move = relabel(edges, roles, rng)
    before, after = mechanism_signature(edges, roles), mechanism_signature(moved, moved_roles)
    assert before == after and before.to_dict()["edges"] == after.to_dict()["edges"]
    # Each part is played by the relabelled heads of the same part.
    for part, heads in before.heads:
        assert sorted(str(move(Head.parse(h))) for h in heads) == sorted(after.head_map[part])


def test_a_different_role_or_input_is_a_different_mechanism():
    edges = [Edge(Head(0, 0), Input(Head(1, 1), "k")), Edge(Head(1, 1), Input(Logits()))]
    roles = {Head(0, 0): PREVIOUS, Head(1, 1): attends_role("adjective")}
    base = mechanism_signature(edges, roles)
    assert base.text == (
        "L0 previous-token head -> L1 head that attends the adjective role.k; "
        "L1 head that attends the adjective role -> logits"
    )
    assert mechanism_signature(edges, {**roles, Head(0, 0): UNNAMED}) != base
    assert mechanism_signature([Edge(Head(0, 0), Input(Head(1, 1), "v")), edges[1]], roles) != base
    # A head's index never names it: an unmeasured role is said to be unnamed.
    assert "L0 head of unnamed role" in mechanism_signature(edges, {}).parts


def test_heads_of_one_layer_and_role_apart_in_the_graph_are_told_apart():
    # Two unnamed layer-0 heads, one feeding a key, the other a value: two parts, each named once.
    edges = [Edge(Head(0, 0), Input(Head(1, 0), "k")), Edge(Head(0, 1), Input(Head(1, 0), "v"))]
    signature = mechanism_signature(edges, {})
    assert [p for p in signature.parts if p.startswith("L0")] == [
        "L0 head of unnamed role (a)",
        "L0 head of unnamed role (b)",
    ]
    # Two interchangeable heads are one part counted twice.
    twins = mechanism_signature([Edge(Head(0, 0), Input(Logits())), Edge(Head(0, 2), Input(Logits()))], {})
    assert "L0 head of unnamed role x2" in twins.parts and twins.edges == ("L0 head of unnamed role -> logits x2",)


def test_signature_json_round_trip_and_refusals():
    from common.cli import UsageError

    rng = random.Random(3)
    signature = mechanism_signature(*random_circuit(rng), basis="edge circuit")
    signature = MechanismSignature(signature.parts, signature.edges, signature.basis, ("AND(a, b)",), signature.heads)
    again = MechanismSignature.from_dict(signature.to_dict(), "circuit.json", "retrace")
    assert again == signature and again.heads == signature.heads
    with pytest.raises(UsageError, match="heads"):
        MechanismSignature.from_dict({**signature.to_dict(), "heads": {"x": [1]}}, "circuit.json", "retrace")
    with pytest.raises(UsageError, match="lacks"):
        MechanismSignature.from_dict({"parts": [], "edges": []}, "circuit.json", "retrace")


def test_relabelled_heads_is_said_only_when_signatures_agree_and_heads_differ():
    edges = [Edge(Head(0, 0), Input(Logits()))]
    one, other = mechanism_signature(edges, {}), mechanism_signature([Edge(Head(0, 1), Input(Logits()))], {})
    assert relabelled_heads([one, other]) and not relabelled_heads([one, one])
    assert not relabelled_heads([one, mechanism_signature([Edge(Head(0, 0), Input(MLP(0)))], {})])


def masses(previous: float, current: float):
    """RoleMasses of a 2x1 model: L0H0's previous-token mass (every row) and current-token mass
    (scored rows); L1H0 attends the value role from the scored rows."""
    from probes.circuits.roles import CURRENT, RoleMasses

    return RoleMasses(
        {PREVIOUS: torch.tensor([[previous], [0.1]])},
        {CURRENT: torch.tensor([[current], [0.0]]), attends_role("value"): torch.tensor([[0.0], [0.9]])},
    )


# markcopy's layer-0 head, read only through the layer-1 keys and values, attended the current token
# at the scored position in one seed of three: the same circuit counted as two mechanisms.
def test_attention_at_the_scored_positions_names_only_a_head_read_there():
    from probes.circuits.roles import CURRENT, circuit_roles

    reader = Edge(Head(1, 0), Input(Logits()))
    by_key = [Edge(Head(0, 0), Input(Head(1, 0), "k")), Edge(Head(0, 0), Input(Head(1, 0), "v")), reader]
    roles = [circuit_roles(by_key, masses(0.3, current)) for current in (0.0, 0.9)]
    assert roles[0] == roles[1] == {Head(0, 0): PREVIOUS, Head(1, 0): attends_role("value")}  # every row: read anywhere
    # Read at the scored position, through a query or an MLP into the logits: its attention there names it.
    by_query = [Edge(Head(0, 0), Input(Head(1, 0), "q")), reader]
    by_mlp = [Edge(Head(0, 0), Input(MLP(0))), Edge(MLP(0), Input(Logits()))]
    for edges in (by_query, by_mlp):
        assert circuit_roles(edges, masses(0.3, 0.64))[Head(0, 0)] == CURRENT
        assert circuit_roles(edges, masses(0.3, 0.0))[Head(0, 0)] == PREVIOUS
        assert circuit_roles(edges, masses(0.3, 0.3))[Head(0, 0)] == UNNAMED  # a tie: neither above the other
    # A head circuit's head that feeds no other writes to the logits: read there.
    assert circuit_roles([], masses(0.3, 0.64), heads=[Head(0, 0)], sinks={Head(0, 0)})[Head(0, 0)] == CURRENT


def test_a_role_at_the_scored_position_is_the_current_token_not_a_second_role():
    from models.spec import build_model
    from probes.circuits.roles import CURRENT, role_masses

    batch = batch_of()
    batch = dataclasses.replace(batch, roles={**batch.roles, "query": batch.positions.clone()})
    measured = role_masses(build_model(VARIANTS["attn-only-2x4"], seed=0).eval(), batch)
    assert set(measured.scored) == {CURRENT, attends_role("cue")}


# ---- a model whose heads were permuted ---------------------------------------------------------

# Every model variant with more than one head per layer whose heads can be permuted by moving their
# weights alone (ALiBi fixes a slope per head index, so there a permutation changes the function).
VARIANTS = {
    "block-1": ModelSpec(n_layers=1, d_model=16, n_heads=4, d_vocab=6, n_ctx=8),
    "block-2": ModelSpec(n_layers=2, d_model=16, n_heads=4, d_vocab=6, n_ctx=8),
    "attn-only-2x4": ModelSpec(n_layers=2, d_model=16, n_heads=4, mlp=False, d_vocab=6, n_ctx=8),
    "rotary-2x2": ModelSpec(n_layers=2, d_model=16, n_heads=2, positions="rotary", d_vocab=6, n_ctx=8),
    "sinusoidal-no-norm": ModelSpec(
        n_layers=2, d_model=16, n_heads=2, positions="sinusoidal", norm=None, d_vocab=6, n_ctx=8
    ),
    "unscaled-2x2": ModelSpec(n_layers=2, d_model=16, n_heads=2, scale_scores=False, d_vocab=6, n_ctx=8),
}


def permute_heads(model, spec: ModelSpec, layer: int, order: list[int]) -> None:
    """Head h of `layer` takes head order[h]'s q/k/v rows and o columns, all moved together."""
    d = spec.d_head
    index = torch.cat([torch.arange(o * d, (o + 1) * d) for o in order])
    state = model.state_dict()
    with torch.no_grad():
        for name in ("q", "k", "v"):
            for kind in ("weight", "bias"):
                key = f"blocks.{layer}.attn.{name}.{kind}"
                state[key].copy_(state[key][index].clone())
        key = f"blocks.{layer}.attn.o.weight"
        state[key].copy_(state[key][:, index].clone())


def batch_of(n: int = 24):
    from tasks.base import NO_FOIL
    from tasks.data import Batch

    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 6, (n, 6), generator=generator)
    counterfactual = tokens.clone()
    counterfactual[:, 1] = (tokens[:, 1] + 1 + torch.randint(0, 4, (n,), generator=generator)) % 6
    return Batch(
        tokens=tokens,
        lengths=torch.full((n,), 6),
        example_index=torch.arange(n),
        positions=torch.full((n,), 4),
        answers=tokens[:, 5],
        foils=torch.full((n,), NO_FOIL),
        groups=["g"] * n,
        counterfactual=counterfactual,
        roles={"cue": torch.full((n,), 1)},
    )


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_model_with_permuted_heads_traces_to_one_mechanism(name):
    from models.graph import graph_of
    from models.spec import build_model
    from probes.census import group_census
    from probes.circuits.signature import edge_signature
    from probes.circuits.roles import role_masses

    spec = VARIANTS[name]
    batch = batch_of()
    model, permuted = build_model(spec, seed=3).eval(), build_model(spec, seed=3).eval()
    orders = {spec.n_layers - 1: list(range(spec.n_heads))[::-1]}
    if spec.n_layers > 1:
        orders[0] = list(range(1, spec.n_heads)) + [0]
    for layer, order in orders.items():
        permute_heads(permuted, spec, layer, order)
    with torch.no_grad():
        assert torch.allclose(model(batch.inputs), permuted(batch.inputs), atol=1e-5)
    assert not torch.equal(
        model.state_dict()["blocks.0.attn.q.weight"], permuted.state_dict()["blocks.0.attn.q.weight"]
    )
    graph = graph_of(spec)
    # claim 0: every head gets its most attended target, so the roles moved with the heads are tested too
    signatures = [edge_signature(m, batch, graph, role_masses(m, batch, ratio=0.0)) for m in (model, permuted)]
    assert signatures[0] is not None and signatures[0] == signatures[1]
    # the same parts, played by the heads the permutation moved them to (one part may hold all of a
    # layer's heads, so the heads need not differ)
    moved = {Head(layer, i): Head(layer, o) for layer, order in orders.items() for i, o in enumerate(order)}
    relabelled = {
        part: sorted(str(moved.get(Head.parse(h), Head.parse(h))) for h in hs) for part, hs in signatures[1].heads
    }
    assert relabelled == {part: sorted(hs) for part, hs in signatures[0].heads}
    census = group_census(name, "p", {}, [fake_member(seed, s) for seed, s in enumerate(signatures)], 0)
    assert len(census.circuits) == 1 and census.circuits[0].count == 2


def fake_member(seed: int, signature):
    """A census member (run, kind, label, path share) as probes.census.read_label gives it."""
    from types import SimpleNamespace

    from probes.circuits.labels import LabelKind

    run = SimpleNamespace(seed=seed, metrics={"stop_reason": "solved", "accuracy": {"heldout": 1.0}})
    return run, LabelKind.PATH, signature.text, None, signature


# ---- the census and the stored circuit ----------------------------------------------------------


def two_block(head0: int, head1: int, port: str = "k"):
    """A previous-token head feeding MLP0, which feeds a layer-1 head's `port`, in other numbering."""
    roles = {Head(0, head0): PREVIOUS, Head(1, head1): attends_role("adjective")}
    edges = [
        Edge(Head(0, head0), Input(MLP(0))),
        Edge(MLP(0), Input(Head(1, head1), port)),
        Edge(Head(1, head1), Input(Logits())),
    ]
    return mechanism_signature(edges, roles, basis="edge circuit")


def test_the_census_counts_one_row_per_mechanism_and_names_each_parts_heads():
    from probes.census import group_census, part_words

    same = [two_block(0, 1), two_block(1, 2), two_block(0, 3)]
    group = group_census("block-2", "p", {}, [fake_member(seed, s) for seed, s in enumerate(same)], 0)
    assert [(s.label, s.count) for s in group.circuits] == [(same[0].text, 3)]
    words = part_words(group.parts[same[0].text])
    assert "L0 previous-token head: L0H0 in seeds 0, 2; L0H1 in seed 1" in words
    assert "L1 head that attends the adjective role: L1H1 in seed 0; L1H2 in seed 1; L1H3 in seed 2" in words
    # Two mechanisms that really differ (the layer-1 head reads MLP0 through its query, not its key): two rows.
    differ = [two_block(0, 1), two_block(1, 2, "q"), two_block(2, 0)]
    group = group_census("block-2", "p", {}, [fake_member(seed, s) for seed, s in enumerate(differ)], 0)
    assert sorted(s.count for s in group.circuits) == [1, 2]
    assert group.circuits[0].share.n == 3 and group.seeds[differ[0].text] == [0, 2]


def test_a_stored_circuit_keeps_its_signature_and_is_labelled_by_it():
    from probes.circuits.labels import CircuitSummary, circuit_label

    def stored(head0, head1):
        return CircuitSummary(
            "block-2", head0, 2, 1.0, (f"L0H{head0}", f"L1H{head1}"), None, 0.9, signature=two_block(head0, head1)
        )

    one, other = stored(0, 1), stored(2, 3)
    again = CircuitSummary.from_dict(json.loads(json.dumps(one.to_dict())))
    assert again == one and again.signature.heads == one.signature.heads
    assert circuit_label(one) == circuit_label(other) and "L0H" not in circuit_label(one).text
    # Written before signatures: no field, the head-named label as before.
    old = {k: v for k, v in json.loads(json.dumps(one.to_dict())).items() if k != "signature"}
    assert CircuitSummary.from_dict(old).signature is None
    assert "L0H0" in circuit_label(CircuitSummary.from_dict(old)).text


# The main job's block-1 seed 1: a layer-0 head at 0.504 +- 0.014 on the induction pattern was named
# an induction head, and the seeds' one two-head mechanism was counted twice (issue 34); a cut at a
# mass of 0.5 split one previous-token head by its sharpness (issue 56). The rule: the interval's
# lower end above every rival's mean.
def test_a_role_is_named_when_its_interval_clears_every_rival():
    from models.spec import build_model
    from probes.circuits.roles import DUPLICATE, RoleMasses, role_masses

    def role(mean: float, low: float, rival: float) -> str:
        measured = RoleMasses(
            {PREVIOUS: torch.tensor([[mean]]), DUPLICATE: torch.tensor([[rival]])},
            {},
            low={PREVIOUS: torch.tensor([[low]])},
        )
        return measured.role(Head(0, 0), read_at_scored=False)

    assert role(0.62, 0.61, 0.30) == PREVIOUS
    assert role(0.32, 0.29, 0.30) == UNNAMED  # the mean clears the rival, its interval does not
    assert role(0.97, 0.95, 0.02) == role(0.75, 0.70, 0.05) == role(0.45, 0.40, 0.05) == PREVIOUS  # any sharpness
    measured = role_masses(build_model(VARIANTS["attn-only-2x4"], seed=0).eval(), batch_of())
    assert set(measured.low) == set(measured.everywhere) | set(measured.scored)
    for name, low in measured.low.items():
        mean = {**measured.everywhere, **measured.scored}[name]
        assert bool((low <= mean + 1e-7).all()) and bool((low >= 0).all()) and bool((low < mean).any()), name


def parts_from_shares(monkeypatch, graph, roles, values):
    """carrying_parts with each edge's share alone `values` and a part edge costing their sum."""
    from types import SimpleNamespace

    import probes.circuits.signature as signature

    oracle = SimpleNamespace(normalised=lambda: torch.tensor(values))
    monkeypatch.setattr(
        signature,
        "part_edge_costs",
        lambda model, pairs, graph, members, keys: {k: sum(a for _, a in members[k]) for k in keys},
    )
    return signature.carrying_parts(None, None, graph, roles, oracle)


def test_a_part_holds_its_heads_by_contribution_and_keeps_one_whose_edges_are_each_small(monkeypatch):
    """block-2 seed 0 listed L1H0, L1H1, L1H2 (index order) and omitted L1H3: a part's heads are those
    whose kept edges move the gap by REFERENCE_NOISE summed, ordered by that share, largest first."""

    from models.graph import graph_of
    from probes.circuits.methods.scores import REFERENCE_NOISE

    graph = graph_of(ModelSpec(n_layers=2, d_model=16, n_heads=4, mlp=False, n_ctx=4, d_vocab=5))
    roles = {Head(layer, h): UNNAMED for layer in range(2) for h in range(4)}
    share = {
        (Head(0, 0), Head(1, 0)): 0.2,
        (Head(0, 0), Head(1, 3)): 0.3,
        (Head(1, 0), Logits()): 0.25,
        (Head(1, 3), Logits()): 0.35,
        # L1H1: every edge below the noise alone, above it summed
        (Head(0, 0), Head(1, 1)): 0.6 * REFERENCE_NOISE,
        (Head(1, 1), Logits()): 0.6 * REFERENCE_NOISE,
    }
    values = [
        share.get(
            (e.sender, e.receiver.node), 1.0 if isinstance(e.sender, Embed) and e.receiver.node == Head(0, 0) else 0.0
        )
        for e in graph.edges
    ]
    found = parts_from_shares(monkeypatch, graph, roles, values)
    heads = dict(found.heads)
    assert heads["L1 head of unnamed role"] == ("L1H3", "L1H0", "L1H1"), heads
