"""A circuit's faithfulness (one result type for the head view and the edge view), and circuits from
edge scores, judged like MIB (Mueller et al. 2025): the top-k edges of a ranking as a circuit, at a
ladder of sizes; each circuit's faithfulness on the null-normalised scale
    f(C) = (m(C) - m(empty)) / (m(full) - m(empty))      0 = empty circuit, 1 = full model,
where m(C) is the metric (mean answer - foil logit over the pairs) of the clean run with every edge
outside C given its counterfactual value (probes.circuits.oracle.circuit_outcomes; the empty circuit is then
the counterfactual run, so this is the circuit report's gap scale, not its mean-ablated null
scale). CPR: area under f over the circuit's share of edges, from the empty circuit (share 0, f 0)
to the full one (share 1, f 1), trapezoids between the ladder's points (higher is better). CMD:
area of |1 - f| over the same points (lower is better).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import torch

from models.graph import Edge, Graph
from models import Model
from probes.circuits.methods.scores import without_float_noise
from probes.circuits.oracle import Direction, Runs, circuit_outcomes, record_runs
from probes.settings import DEFAULT
from tasks.data import Batch

LADDER = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


@dataclass(frozen=True)
class Faithfulness:
    """A circuit's metric m(C) (the clean input, every edge outside C given its ablated write) on
    both scales:
        recovered  = (m(C) - m(corrupt)) / (m(clean) - m(corrupt))   the counterfactual scale (TL's
                     attribution_patching.faithfulness): 0 = the counterfactual run, 1 = the clean run
        normalised = (m(C) - m(empty)) / (m(clean) - m(empty))       the null scale (MIB's): 0 = the
                     empty circuit (every edge the circuit may drop ablated), 1 = the full model
    Under counterfactual ablation the empty circuit is the counterfactual run and the two coincide;
    under mean ablation the first reads ~0.5 for "nothing left" when the counterfactual mirrors the
    clean input (its metric is minus the clean one), so the second is the one a verdict uses."""

    metric: float
    accuracy: float  # share of scored positions where the answer still wins
    clean: float
    corrupt: float
    empty: float
    recovered: float = field(init=False)
    normalised: float = field(init=False)

    def __post_init__(self):
        from common.stats import share

        object.__setattr__(self, "recovered", share(self.metric, self.corrupt, self.clean))
        object.__setattr__(self, "normalised", share(self.metric, self.empty, self.clean))


def scaled(outcome, clean, corrupt, empty) -> Faithfulness:
    """The Faithfulness of a circuit's probes.patching.Outcome, given the clean, counterfactual
    and empty-circuit Outcomes."""
    return Faithfulness(outcome.metric, outcome.restored, clean.metric, corrupt.metric, empty.metric)


@dataclass(frozen=True)
class Curve:
    method: str
    total: int  # edges in the graph
    sizes: tuple[int, ...]  # circuit sizes measured, 0 and total included
    faithfulness: tuple[float, ...]

    @property
    def shares(self) -> list[float]:
        return [size / self.total for size in self.sizes]

    @property
    def cpr(self) -> float:
        return trapezoid(self.shares, self.faithfulness)

    @property
    def cmd(self) -> float:
        return trapezoid(self.shares, [abs(1 - f) for f in self.faithfulness])


def trapezoid(x: Sequence[float], y: Sequence[float]) -> float:
    return sum((x[i + 1] - x[i]) * (y[i] + y[i + 1]) / 2 for i in range(len(x) - 1))


def ranked(edges: tuple[Edge, ...], score: torch.Tensor) -> list[Edge]:
    """Edges by |score|, largest first; ties, and scores within float noise of 0, keep the graph's
    order (probes.circuits.scores.FLOAT_NOISE)."""
    order = without_float_noise(score).abs().argsort(descending=True, stable=True)
    return [edges[i] for i in order.tolist()]


def normalised(metrics: list[float], empty: float, full: float) -> list[float]:
    from common.stats import share

    return [share(m, empty, full) for m in metrics]


def ladder_sizes(total: int, ladder=LADDER) -> list[int]:
    """The circuit sizes a curve measures: k = ceil(share * edges), at least 1, with 0 and all edges."""
    return sorted({0, total, *(max(1, math.ceil(share * total)) for share in ladder)})


def curve(
    model: Model, batch: Batch, graph: Graph, method: str, score: torch.Tensor, runs: Runs | None = None, ladder=LADDER
) -> Curve:
    """Faithfulness of the top-k circuits at each ladder share (k = ceil(share * edges), at least 1)."""
    runs = runs or record_runs(model, batch, graph, Direction.NOISE)
    order, total = ranked(graph.edges, score), len(graph.edges)
    sizes = ladder_sizes(total, ladder)
    outcomes = circuit_outcomes(model, batch, graph, [order[:k] for k in sizes], runs)
    metrics = [o.metric for o in outcomes]
    return Curve(method, total, tuple(sizes), tuple(normalised(metrics, metrics[0], metrics[-1])))


@dataclass(frozen=True)
class SmallestCircuit:
    """The smallest top-k circuit of a ranking whose faithfulness reaches `target` (None: none does
    below the full graph)."""

    method: str
    target: float
    edges: tuple[Edge, ...] | None
    faithfulness: Faithfulness  # of that circuit (of the full graph when none reaches target); clean =
    # the full circuit, empty = no edge, as measured
    every_k: tuple[float, ...]  # null-scale faithfulness of the top-k circuit for k = 0 .. edges


def smallest_circuit(
    model: Model,
    batch: Batch,
    graph: Graph,
    method: str,
    score: torch.Tensor,
    runs: Runs | None = None,
    target: float = DEFAULT.circuit_target,
) -> SmallestCircuit:
    runs = runs or record_runs(model, batch, graph, Direction.NOISE)
    order = ranked(graph.edges, score)
    outcomes = circuit_outcomes(model, batch, graph, [order[:k] for k in range(len(order) + 1)], runs)
    metrics = [o.metric for o in outcomes]
    every = normalised(metrics, metrics[0], metrics[-1])
    k = next((k for k, f in enumerate(every) if f >= target), None)
    found = scaled(outcomes[-1 if k is None else k], outcomes[-1], runs.other.outcome, outcomes[0])
    return SmallestCircuit(method, target, None if k is None else tuple(order[:k]), found, tuple(every))


def curve_of(smallest: SmallestCircuit, ladder=LADDER) -> Curve:
    """curve() of the ranking `smallest` was found on, read off its every_k: the same top-k circuits
    on the same normalisation (k = 0 and all edges), so nothing is measured again."""
    total = len(smallest.every_k) - 1
    sizes = ladder_sizes(total, ladder)
    return Curve(smallest.method, total, tuple(sizes), tuple(smallest.every_k[k] for k in sizes))
