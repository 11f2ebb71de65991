"""Trained ground truth: small models trained on a task whose mechanism was designed (a plugin or a
built-in task), stored as fixtures with the edges an independent check established as their circuit.

Nobody set these weights, so the truth is measured, not planted: the exact oracle
(probes.circuits.oracle) over the fixture's stored counterfactual pairs. `establish` grows the
oracle's top-ranked edges until keeping only them reproduces the full model, then drops every edge
whose removal costs less than MIN_COST, repeating until none is left to drop; `check` states the rule
the result must pass: keeping only the true edges (every other edge given its counterfactual write)
leaves the full model's answer - foil metric within KEEP_WITHIN of the clean - counterfactual gap,
and removing any one of them from that circuit costs at least MIN_COST of the gap. The fixture
records the rule, what it measured and the training that made the model
(benchmarks/make_trained_fixtures.py); tests/test_trained.py re-measures it on every fixture.

Such a truth is the oracle's, so the oracle's own row scores well on it by construction; what it
grades is whether the faster methods find the edges exact patching needs.

A fixture is `NAME.safetensors` (the model's state dict, and the pairs as `pairs.*` tensors) and
`NAME.json` (spec, task, training, truth, check, provenance), read without retraining.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import torch

from common.atomic import write_json
from common.cli import UsageError
from models import ModelSpec, build_model
from common.store import load_tensors, read_json
from models.checkpoint import save_tensors
from models.graph import Edge, Graph, graph_of
from models import Model
from probes.circuits.faithfulness import normalised, ranked
from probes.circuits.oracle import circuit_outcomes, edge_effects, record_runs
from tasks.data import Batch, select_rows

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "trained"
# The true edges alone leave the metric within 5% of the gap from the full model's: a trained model
# spreads a few percent over edges that each carry under MIN_COST (neighbour-after: 3.7% measured),
# which a tighter bound would force back in, failing the per-edge bound instead.
KEEP_WITHIN = 0.05
HEADROOM = 0.01  # establish starts within 1%, so dropping the edges that carry under MIN_COST has room
MIN_COST = 0.01  # every true edge carries at least 1% of the gap (removing it alone from the circuit)
PAIR_FIELDS = ("tokens", "lengths", "example_index", "positions", "answers", "foils", "counterfactual")
REMAKE = "remake it with `python benchmarks/make_trained_fixtures.py`"


@dataclass(frozen=True)
class Check:
    """What the rule measured on one circuit: its faithfulness (1 = the full model's metric, 0 = every
    edge counterfactual) and, per edge, the share of the gap lost when that edge alone is removed."""

    faithfulness: float
    costs: dict  # edge name -> share of the gap lost without it
    pairs: int
    gap: float  # full - every-edge-counterfactual metric, in logits

    @property
    def passes(self) -> bool:
        return abs(1 - self.faithfulness) <= KEEP_WITHIN and min(self.costs.values(), default=0.0) >= MIN_COST


@dataclass(frozen=True)
class Trained:
    """A loaded fixture: the model, its pairs and graph, the true edges and what the JSON records."""

    name: str
    spec: ModelSpec
    model: object
    batch: Batch
    graph: Graph
    edges: frozenset
    meta: dict

    @property
    def story(self) -> str:
        return str(self.meta["story"])


def check(model: Model, batch: Batch, graph: Graph, edges: frozenset) -> Check:
    """The rule's measurements for `edges` on `batch` (exact patching, counterfactual ablation)."""
    runs = record_runs(model, batch, graph)
    order = [e for e in graph.edges if e in edges]
    sets: list[Iterable[Edge]] = [[], graph.edges, order, *([x for x in order if x != e] for e in order)]
    outcomes = circuit_outcomes(model, batch, graph, sets, runs)
    metrics = [o.metric for o in outcomes]
    shares = normalised(metrics[2:], metrics[0], metrics[1])
    return Check(
        shares[0], {str(e): shares[0] - s for e, s in zip(order, shares[1:])}, len(batch), metrics[1] - metrics[0]
    )


def establish(model: Model, batch: Batch, graph: Graph) -> frozenset:
    """The circuit the rule is checked on: the oracle's smallest top-k circuit within HEADROOM of
    the full model, then, cheapest first, every edge removing which costs under MIN_COST and keeps
    the rest within KEEP_WITHIN, until none is left. Raises when the rule still fails (the model has
    no circuit this finds that meets it)."""
    runs = record_runs(model, batch, graph)
    order = ranked(graph.edges, edge_effects(model, batch, graph, runs=runs).effect)
    outcomes = circuit_outcomes(model, batch, graph, [order[:k] for k in range(len(order) + 1)], runs)
    every = normalised([o.metric for o in outcomes], outcomes[0].metric, outcomes[-1].metric)
    edges = frozenset(order[: next(k for k, f in enumerate(every) if abs(1 - f) <= HEADROOM)])
    while True:
        measured = check(model, batch, graph, edges)
        droppable = [
            edge
            for edge, cost in sorted(measured.costs.items(), key=lambda item: item[1])
            if cost < MIN_COST and abs(1 - (measured.faithfulness - cost)) <= KEEP_WITHIN
        ]
        if not droppable:
            break
        edges = frozenset(e for e in edges if str(e) != droppable[0])
    if not measured.passes:
        raise UsageError(
            f"no circuit passes the rule (faithfulness {measured.faithfulness:.3f}, "
            f"cheapest edge {min(measured.costs.values(), default=0.0):.3f}); train the model longer"
        )
    return edges


def save(
    name: str, model: Model, spec: ModelSpec, batch: Batch, graph: Graph, edges: frozenset, meta: dict, folder: Path
) -> Check:
    """Write the fixture (weights and pairs, then the JSON with the truth and its check)."""
    measured = check(model, batch, graph, edges)
    pairs = {f"pairs.{field}": getattr(batch, field) for field in PAIR_FIELDS}
    folder.mkdir(parents=True, exist_ok=True)
    save_tensors(folder / f"{name}.safetensors", {**model.state_dict(), **pairs}, {"fixture": name})
    truth = {
        "edges": [str(e) for e in graph.edges if e in edges],
        "check": {
            "rule": (
                f"exact oracle, counterfactual ablation, on the stored pairs: keeping only these edges "
                f"leaves the answer - foil metric within {KEEP_WITHIN:.0%} of the gap from the full model's, "
                f"and removing any one of them costs at least {MIN_COST:.0%} of the gap"
            ),
            "keep_within": KEEP_WITHIN,
            "min_cost": MIN_COST,
            **dataclasses.asdict(measured),
        },
    }
    write_json(folder / f"{name}.json", {"name": name, "spec": spec.to_dict(), **meta, "truth": truth})
    return measured


def names(folder: Path = FIXTURES) -> list[str]:
    """The fixtures stored in `folder` (both files present), sorted."""
    return sorted(p.stem for p in folder.glob("*.json") if (folder / f"{p.stem}.safetensors").is_file())


def load(name: str, folder: Path = FIXTURES) -> Trained:
    meta = read_json(folder / f"{name}.json", REMAKE)
    try:
        spec = ModelSpec.from_dict(meta["spec"])
        recorded = list(meta["truth"]["edges"])
    except (KeyError, TypeError) as error:
        raise UsageError(f"{folder / name}.json is not a trained fixture toylens wrote ({error}); {REMAKE}") from None
    tensors, _ = load_tensors(folder / f"{name}.safetensors", REMAKE)
    pairs = {field: tensors.pop(f"pairs.{field}", None) for field in PAIR_FIELDS}
    if any(value is None for value in pairs.values()):
        raise UsageError(f"{folder / name}.safetensors stores no complete pairs; {REMAKE}")
    with torch.device("cpu"):
        model = build_model(spec, seed=0)
    try:
        model.load_state_dict(tensors)
    except RuntimeError as error:  # missing, unexpected or mis-shaped weights
        raise UsageError(f"{folder / name}.safetensors does not fit its spec ({str(error)[:160]}); {REMAKE}") from None
    batch = Batch(**pairs, groups=[name] * len(pairs["tokens"]))
    graph = graph_of(spec)
    by_name = {str(e): e for e in graph.edges}
    unknown = [edge for edge in recorded if edge not in by_name]
    if unknown:
        raise UsageError(f"trained fixture {name!r} records edges its graph lacks ({', '.join(unknown[:3])}); {REMAKE}")
    return Trained(name, spec, model.eval(), batch, graph, frozenset(by_name[e] for e in recorded), meta)


def sample(batch: Batch, n: int, seed: int) -> Batch:
    """`n` of the stored pairs, drawn by `seed` (all of them, in order, when n covers them)."""
    if n >= len(batch):
        return batch
    rows = torch.randperm(len(batch), generator=torch.Generator().manual_seed(seed))[:n]
    return select_rows(batch, rows.sort().values)
