"""The circuit graph built from a ModelSpec: nodes, receiver inputs, edges, counts."""

from __future__ import annotations

import pytest

from models import ModelSpec
from models.graph import MLP, Edge, Embed, Head, Input, Logits, graph_of
from models.spec import Attention


def test_a_two_block_four_head_model_has_every_residual_edge():
    graph = graph_of(ModelSpec(n_layers=2, n_heads=4))
    # Layer-0 heads read the embeddings (3 inputs x 4 heads); MLP0 reads embed + 4 heads; layer-1
    # heads read embed, 4 heads, MLP0 (6 senders x 12 inputs); MLP1 10 senders; logits 11.
    assert graph.counts() == {
        "q": 4 + 24,
        "k": 4 + 24,
        "v": 4 + 24,
        "mlp": 5 + 10,
        "logits": 11,
        "nodes": 12,
        "edges": 12 + 5 + 72 + 10 + 11,
    }
    assert Edge(Head(0, 1), Input(MLP(0))) in graph.edges  # a block's MLP reads its heads
    assert Edge(Head(1, 0), Input(Head(1, 1), "k")) not in graph.edges  # heads of one block do not
    assert Edge(MLP(0), Input(Head(1, 2), "v")) in graph.edges
    assert str(Edge(Embed(), Input(Head(0, 3), "q"), 5)) == "embed -> L0H3.q @p5"
    assert [str(s) for s in graph.senders][:3] == ["embed", "L0H0", "L0H1"]


@pytest.mark.parametrize(
    "spec, edges",
    [
        (ModelSpec(n_layers=2, n_heads=1, mlp=False, norm=None), 3 + 3 * 2 + 3),  # L0 qkv, L1 qkv from 2, logits from 3
        (ModelSpec(n_layers=1, n_heads=2, positions="rotary"), 6 + 3 + 4),
        (ModelSpec(n_layers=1, n_heads=2, attention="uniform", positions="none"), 4 + 3 + 4),  # no q inputs
    ],
)
def test_attention_only_rotary_and_uniform_graphs(spec, edges):
    graph = graph_of(spec)
    assert graph.counts()["edges"] == edges
    if spec.attention == Attention.UNIFORM:
        assert graph.counts()["q"] == 0


def test_per_position_edges_repeat_every_edge_at_each_position():
    spec = ModelSpec(n_layers=2, n_heads=1, mlp=False)
    whole, per = graph_of(spec), graph_of(spec, positions=(3, 4))
    assert len(per.edges) == 2 * len(whole.edges)
    assert {e.position for e in per.edges} == {3, 4}
    assert len(per.into(Input(Logits()))) == 2 * 3
