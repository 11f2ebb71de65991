"""A model as a computational graph of residual-stream edges, built from its ModelSpec.

Nodes: the embeddings (token + position, one node: they enter the residual stream together), every
head, every MLP, the logits. A receiver reads the residual stream through its inputs: a head through
three (q, k, v), an MLP and the logits through one. An edge is a sender's write reaching one
receiver input, which exists when the sender writes before the receiver reads: heads of block l read
what the embeddings and blocks < l wrote; block l's MLP also reads block l's heads; the logits read
everything. Optionally an edge is restricted to one position: the sender's write at position p
reaching the receiver input at p (the residual stream is read position by position; movement
between positions happens inside a head, through its k and v).

Uniform-attention models have no q inputs: W_Q is frozen at zero, so no write can reach a query.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Optional, Union

from models.components import Head
from models.spec import Attention, ModelSpec


@dataclass(frozen=True, order=True)
class Embed:
    def __str__(self) -> str:
        return "embed"


@dataclass(frozen=True, order=True)
class MLP:
    layer: int

    def __str__(self) -> str:
        return f"MLP{self.layer}"


@dataclass(frozen=True, order=True)
class Logits:
    def __str__(self) -> str:
        return "logits"


Sender = Union[Embed, Head, MLP]
Receiver = Union[Head, MLP, Logits]
Node = Union[Embed, Head, MLP, Logits]
HEAD_PORTS = ("q", "k", "v")


def port_heads(cfg, port: str) -> int:
    """How many `port` activations (hook_q / k / v / z) a block of a model with config `cfg` has: one
    per head; under grouped-query attention (Llama's n_key_value_heads) one key and one value per
    group, read by every head of the group."""
    grouped = getattr(cfg, "n_key_value_heads", None)
    return grouped if grouped and port in ("k", "v") else cfg.n_heads


def stage(node: Node, n_layers: int) -> int:
    """Order of writes and reads along the residual stream: a sender reaches a receiver iff its
    stage is smaller."""
    if isinstance(node, Embed):
        return 0
    if isinstance(node, Head):
        return 2 * node.layer + 1
    if isinstance(node, MLP):
        return 2 * node.layer + 2
    return 2 * n_layers + 1


@dataclass(frozen=True, order=True)
class Input:
    """One receiver input: a head's "q" / "k" / "v", or "in" of an MLP or the logits."""

    node: Receiver
    port: str = "in"

    def __str__(self) -> str:
        return f"{self.node}.{self.port}" if isinstance(self.node, Head) else str(self.node)


@dataclass(frozen=True, order=True)
class Edge:
    sender: Sender
    receiver: Input
    position: Optional[int] = None  # None: the write at every position

    def __str__(self) -> str:
        where = "" if self.position is None else f" @p{self.position}"
        return f"{self.sender} -> {self.receiver}{where}"


@dataclass(frozen=True)
class Graph:
    n_layers: int
    senders: tuple[Sender, ...]
    inputs: tuple[Input, ...]
    edges: tuple[Edge, ...]

    def counts(self) -> dict[str, int]:
        """Edges by receiver kind (q, k, v, mlp, logits), and in all."""
        kinds = Counter(
            edge.receiver.port
            if isinstance(edge.receiver.node, Head)
            else "mlp"
            if isinstance(edge.receiver.node, MLP)
            else "logits"
            for edge in self.edges
        )
        return {
            **{kind: kinds[kind] for kind in (*HEAD_PORTS, "mlp", "logits")},
            "nodes": len(self.senders) + 1,
            "edges": len(self.edges),
        }

    def into(self, receiver: Input) -> tuple[Edge, ...]:
        return tuple(edge for edge in self.edges if edge.receiver == receiver)


def graph_of(spec: ModelSpec, positions: Optional[tuple[int, ...]] = None) -> Graph:
    """The graph of `spec`; with `positions`, one edge per (sender, input, position) in it."""
    heads = [Head(layer, head) for layer in range(spec.n_layers) for head in range(spec.n_heads)]
    mlps = [MLP(layer) for layer in range(spec.n_layers)] if spec.mlp else []
    nodes: list[Sender] = [Embed(), *heads, *mlps]
    senders = tuple(sorted(nodes, key=lambda node: (stage(node, spec.n_layers), node)))
    ports = tuple(p for p in HEAD_PORTS if not (p == "q" and spec.attention == Attention.UNIFORM))
    receivers: list[Receiver] = [*heads, *mlps, Logits()]
    inputs = tuple(
        Input(node, port)
        for node in sorted(receivers, key=lambda n: (stage(n, spec.n_layers), n))
        for port in (ports if isinstance(node, Head) else ("in",))
    )
    where = (None,) if positions is None else tuple(positions)
    edges = tuple(
        Edge(sender, receiver, position)
        for receiver in inputs
        for sender in senders
        if stage(sender, spec.n_layers) < stage(receiver.node, spec.n_layers)
        for position in where
    )
    return Graph(spec.n_layers, senders, inputs, edges)
