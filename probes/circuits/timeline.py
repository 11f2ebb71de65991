"""When a circuit forms: the final model's edge circuit replayed through the exact oracle at every
weight snapshot of its training run.

Each circuit edge's effect alone at a snapshot is divided by the FINAL model's clean -
counterfactual gap, a fixed reference: early snapshots have a gap near 0, and shares of their own
gap would be noise (0 = the edge moves nothing, 1 = it moves as much as the final model's whole
gap). An edge has entered at the first snapshot where its effect reaches ENTERS of its final
effect, and is stable from the first snapshot after which it stays within STABLE of its final
effect. The circuit's own faithfulness is shown on each snapshot's gap scale, only where that gap
is large enough to trace (ReportSettings.traces).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from models.graph import Edge, Graph
from models import Model
from probes.circuits.faithfulness import normalised
from probes.circuits.oracle import Direction, circuit_outcomes, edge_effects, record_runs
from probes.settings import DEFAULT, ReportSettings
from tasks.data import Batch

ENTERS = 0.5  # share of its final effect an edge must reach to have entered
STABLE = 0.2  # an edge is stable once it stays within this share of its final effect


@dataclass(frozen=True)
class CircuitTimeline:
    steps: tuple[int, ...]
    edges: tuple[Edge, ...]  # the final model's circuit
    effect: torch.Tensor  # [snapshots, edges] each edge alone, / the final model's gap
    gap: tuple[float, ...]  # clean - counterfactual metric at each snapshot
    faithfulness: tuple[float | None, ...]  # of the circuit on each snapshot's gap scale (None: gap too small)

    def entered(self, edge: Edge) -> int | None:
        column = self.effect[:, self.edges.index(edge)]
        final = float(column[-1])
        hit = [s for s, v in zip(self.steps, column.tolist()) if final and v / final >= ENTERS]
        return hit[0] if hit else None

    def stable(self, edge: Edge) -> int | None:
        column = self.effect[:, self.edges.index(edge)].tolist()
        final = column[-1]
        if not final:
            return None
        close = [abs(v - final) <= STABLE * abs(final) for v in column]
        first = next(i for i in range(len(close)) if all(close[i:]))
        return self.steps[first]


def circuit_timeline(
    model: Model,
    batch: Batch,
    graph: Graph,
    circuit: tuple[Edge, ...],
    snapshots: list[tuple[int, Callable]],
    settings: ReportSettings = DEFAULT,
) -> CircuitTimeline:
    """`snapshots`: (step, load) in training order, the last the final model; `load(model)` puts
    that snapshot's weights into `model` (the caller restores the model's own afterwards)."""
    only = Graph(graph.n_layers, graph.senders, graph.inputs, tuple(circuit))
    steps, effects, gaps, kept = [], [], [], []
    for step, load in snapshots:
        load(model)
        model.eval()
        runs = record_runs(model, batch, graph, Direction.NOISE)
        alone = edge_effects(model, batch, only, runs=runs)
        empty, found, full = circuit_outcomes(model, batch, graph, [[], circuit, graph.edges], runs)
        gap = full.metric - empty.metric
        steps.append(step)
        effects.append(alone.effect)
        gaps.append(gap)
        kept.append(normalised([found.metric], empty.metric, full.metric)[0] if settings.traces(gap) else None)
    final_gap = gaps[-1]
    effect = -torch.stack(effects) / final_gap if final_gap else torch.stack(effects) * float("nan")
    return CircuitTimeline(tuple(steps), tuple(circuit), effect, tuple(gaps), tuple(kept))
