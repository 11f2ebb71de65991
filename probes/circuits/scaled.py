"""A circuit of ANY bridge with methods that scale with its graph: a toylens model or a loaded
checkpoint (models.hf_load: GPT-2, GPT-NeoX / Pythia, Llama), described by what it is (`About`),
never by a path.

Edges of the residual-stream graph (probes.circuits.oracle.model_graph: GPT-NeoX's parallel blocks
have no head -> MLP edge within a block; under Llama's grouped-query attention a key / value input is
its group's, named `LlKVg.k` / `.v`; rotary tables and RMSNorm are the model's own, recomputed by its
modules). When the graph has at most `edge_budget` edges, every edge is measured by the exact oracle;
above it, EAP (one forward and backward) or EAP-IG (`ranking`, `ig_steps` forwards and backwards)
ranks every edge and the oracle measures the top `verify` of that ranking, reporting how well the two
agree (Spearman). With `positional`, one edge per (sender, input, position), for tasks whose prompts
share one layout (refused otherwise). Then the ranking's faithfulness curve (top-k kept clean,
everything else given its counterfactual value; 0 = the counterfactual run, 1 = the clean run), and
the joint search (probes.circuits.methods.joint.prune: removal by joint effect, forward selection,
backward pruning on the exact oracle) over the top `verify` edges of the ranking, so its cost does not
grow with the graph. Time, process peak memory and the number of forwards are part of the result.
Run the hook preflight (models.preflight) first.
"""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import dataclass

import torch

from common.cli import UsageError
from models.graph import Edge, Graph, Head
from models import Model
from tasks.data import Batch

EDGE_BUDGET = 2000  # exact oracle up to this many edges
VERIFY = 200  # above it, the top of the attribution ranking measured exactly (and searched jointly)
RANKINGS = ("eap", "eap-ig")
IG_STEPS = 5


@dataclass(frozen=True)
class About:
    """What the model is: `family` "toylens" (a spec) or an HF model_type; `name` for the reader."""

    name: str
    family: str


@dataclass(frozen=True)
class Ranked:
    unit: str  # "edge" (one per position with positional edges)
    names: tuple[str, ...]  # every unit of the graph, in the graph's order
    score: tuple[float, ...]  # the ranking's score per unit (exact effects, or attribution)
    method: str  # "exact oracle" or "EAP + oracle verification" (EAP-IG ...)
    verified: dict  # unit name -> exact effect, for the units measured exactly
    agreement: float | None  # Spearman of attribution vs exact effect over the verified units


@dataclass(frozen=True)
class Searched:
    """The joint search's circuit over the ranking's top `allowed` edges (probes.circuits.methods.joint)."""

    allowed: int
    edges: tuple[str, ...]  # the circuit, in the graph's order
    faithfulness: float  # of the circuit, 0 = counterfactual run, 1 = clean run
    target: float
    sets: int  # edge sets the search measured on the oracle


@dataclass(frozen=True)
class ScaledCircuit:
    about: About
    ranked: Ranked
    pairs: int
    clean: float  # mean answer - foil logit, clean run
    corrupt: float  # the same, counterfactual run
    curve: tuple[tuple[int, float], ...]  # (top-k kept, faithfulness 0 = counterfactual, 1 = clean)
    searched: Searched | None
    forwards: int
    seconds: float
    peak_rss_mib: float  # the process's peak resident memory so far (it includes loading the model)

    def top(self, k: int = 10) -> list[tuple[str, float]]:
        exact = self.ranked.verified
        order = sorted(range(len(self.ranked.names)), key=lambda i: -abs(self.ranked.score[i]))
        return [(self.ranked.names[i], exact.get(self.ranked.names[i], self.ranked.score[i])) for i in order[:k]]


def trace_task(
    model: Model, task, about: About, tokenizer=None, seed: int = 0, pairs: int = 64, **options
) -> ScaledCircuit:
    """`trace` on the task's held-out pairs: any bridge (a toylens model, or a loaded checkpoint with
    its `tokenizer`) and any task (a text task for a checkpoint; tasks.templates)."""
    from tasks.templates import heldout_batch

    batch = heldout_batch(task, seed, tokenizer, pairs)
    if batch.inputs.shape[1] > model.cfg.n_ctx:
        raise UsageError(
            f"task {task.name!r} needs {batch.inputs.shape[1]} positions, over the model's {model.cfg.n_ctx}"
        )
    return trace(model, batch.to(next(model.parameters()).device), about, **options)


def trace(
    model: Model,
    batch: Batch,
    about: About,
    edge_budget: int = EDGE_BUDGET,
    verify: int = VERIFY,
    ranking: str = "eap",
    ig_steps: int = IG_STEPS,
    positional: bool = False,
    search: bool = True,
) -> ScaledCircuit:
    """The circuit of `model` on `batch` (clean rows and their counterfactual partners)."""
    from probes.circuits.oracle import model_graph, record_runs

    if ranking not in RANKINGS:
        raise UsageError(f"ranking must be one of {', '.join(RANKINGS)}, got {ranking!r}")
    graph = model_graph(model, fixed_positions(batch) if positional else None)
    began, counter = time.perf_counter(), ForwardCounter(model)
    try:
        runs = record_runs(model, batch, graph)
        ranked, score = edge_ranking(model, batch, graph, runs, edge_budget, verify, (ranking, ig_steps))
        faithful = curve_points(model, batch, graph, ranked.method, score, runs)
        searched = joint_from_ranking(model, batch, graph, runs, score, verify) if search else None
    finally:
        counter.remove()
    clean, corrupt = runs.base.outcome.metric, runs.other.outcome.metric
    seconds = time.perf_counter() - began
    return ScaledCircuit(
        about, ranked, len(batch), clean, corrupt, faithful, searched, counter.calls, seconds, peak_rss_mib()
    )


def fixed_positions(batch: Batch) -> tuple[int, ...]:
    """Every position of the prompts, when they share one layout (one length, one scored position,
    counterfactuals of that length too); else a refusal naming why."""
    lengths, scored = set(batch.lengths.tolist()), set(batch.positions.tolist())
    if len(lengths) > 1 or len(scored) > 1:
        raise UsageError(
            f"position-aware edges need prompts of one layout; these have {len(lengths)} lengths and "
            f"{len(scored)} scored positions: use a task (or task parameters) with one template length, "
            "or trace without positions"
        )
    return tuple(range(max(scored) + 1))  # positions after the scored one reach no score


def hooks_used(model: Model) -> list[str]:
    """The hooks `trace` edits or reads on this model: what the preflight must check first."""
    from models.preflight import report_hooks

    return report_hooks(model, edges=True)


class ForwardCounter:
    """Counts passes through the unembedding: every forward ends there, full or resumed, batched or not."""

    def __init__(self, model: Model):
        self.calls = 0
        self.handle = model.unembed.register_forward_pre_hook(self.count)

    def count(self, module, args):
        self.calls += 1

    def remove(self):
        self.handle.remove()


def peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def edge_name(edge: Edge, model: Model) -> str:
    """str(edge), with a grouped key / value input named by its group (`L1KV0.k`), not as a head."""
    grouped = getattr(model.cfg, "n_key_value_heads", None)
    node = edge.receiver.node
    if not grouped or grouped == model.cfg.n_heads or edge.receiver.port not in ("k", "v"):
        return str(edge)
    assert isinstance(node, Head)
    where = "" if edge.position is None else f" @p{edge.position}"
    return f"{edge.sender} -> L{node.layer}KV{node.head}.{edge.receiver.port}{where}"


def edge_ranking(model: Model, batch: Batch, graph: Graph, runs, budget: int, verify: int, ranking: tuple[str, int]):
    """(Ranked, the score tensor the curve and the search order by): the exact oracle within the
    budget, else attribution with its top `verify` measured exactly."""
    from probes.circuits.methods.attribution import eap, eap_ig
    from probes.circuits.oracle import edge_effects, patched_outcomes

    names = tuple(edge_name(edge, model) for edge in graph.edges)
    if len(graph.edges) <= budget:
        score = edge_effects(model, batch, graph, runs=runs).effect
        return Ranked(
            "edge", names, tuple(score.tolist()), "exact oracle", dict(zip(names, score.tolist())), None
        ), score
    method, steps = ranking
    scores = eap(model, batch, graph, runs=runs) if method == "eap" else eap_ig(model, batch, graph, steps, runs=runs)
    top = scores.score.abs().argsort(descending=True, stable=True)[:verify].tolist()
    outcomes = patched_outcomes(model, batch, graph, [frozenset([graph.edges[i]]) for i in top], runs)
    exact = [o.metric - runs.base.outcome.metric for o in outcomes]
    return verified_ranking(names, scores.score, top, exact, f"{scores.method} + oracle verification"), scores.score


def verified_ranking(names, score: torch.Tensor, top: list[int], exact: list[float], method: str) -> Ranked:
    from probes.circuits.methods.scores import spearman

    agreement = spearman(score[top], torch.tensor(exact)) if len(top) > 2 else None
    verified = {names[i]: value for i, value in zip(top, exact)}
    return Ranked("edge", names, tuple(score.tolist()), method, verified, agreement)


def curve_points(model: Model, batch: Batch, graph: Graph, method: str, score: torch.Tensor, runs):
    from probes.circuits.faithfulness import curve

    faithful = curve(model, batch, graph, method, score, runs)
    return tuple(zip(faithful.sizes, faithful.faithfulness))


def joint_from_ranking(model: Model, batch: Batch, graph: Graph, runs, score: torch.Tensor, allowed: int) -> Searched:
    """The joint search over the ranking's top `allowed` edges (every other edge given its
    counterfactual value throughout): it starts from all of them and pass 2 may bring back any."""
    from probes.circuits.faithfulness import ranked
    from probes.circuits.methods.joint import TARGET, SetFaithfulness, in_graph_order, prune

    top = frozenset(ranked(graph.edges, score)[:allowed])
    measure = SetFaithfulness(model, batch, graph, runs)
    found = prune(measure, top)
    names = tuple(edge_name(edge, model) for edge in in_graph_order(graph, found.circuit))
    return Searched(len(top), names, found.faithfulness, TARGET, measure.measured)
