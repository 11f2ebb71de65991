"""What an edge outside a circuit carries instead of its clean write: the counterfactual run's write
(interchange ablation, MIB's and ACDC's "random" ablation), the mean write over the batch at that
position (mean ablation), or zero (ACDC's zero ablation). Each is a `Runs` the oracle, the methods
and the searches take unchanged: base = the clean run, other = the replacement writes, and the
other run's outcome is the metric with every edge given its replacement (the empty circuit), so
the faithfulness scale keeps 0 = empty circuit, 1 = full model for every ablation.
"""

from __future__ import annotations

import dataclasses
from enum import Enum

import torch

from models.graph import Embed, Graph
from probes.circuits.oracle import Direction, Runs, Writes, patched_outcomes, record_runs
from tasks.data import Batch


class Ablation(Enum):
    COUNTERFACTUAL = "counterfactual"
    MEAN = "mean"
    ZERO = "zero"


def ablated_runs(model, batch: Batch, graph: Graph, ablation: Ablation) -> Runs:
    runs = record_runs(model, batch, graph, Direction.NOISE)
    if ablation is Ablation.COUNTERFACTUAL:
        return runs
    clean = runs.base
    if ablation is Ablation.MEAN:
        writes = {s: w.mean(0, keepdim=True).expand_as(w) for s, w in clean.writes.items()}
    else:
        writes = {s: torch.zeros_like(w) for s, w in clean.writes.items()}
    other = Writes(clean.outcome, writes, {0: writes[Embed()]}, {})
    placeholder = Runs(Direction.NOISE, clean, other)
    empty = patched_outcomes(model, batch, graph, [frozenset(graph.edges)], placeholder)[0]
    return Runs(Direction.NOISE, clean, dataclasses.replace(other, outcome=empty))
