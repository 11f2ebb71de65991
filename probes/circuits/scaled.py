"""A circuit of ANY bridge with methods that scale with its graph: a toylens model or a loaded
checkpoint (models.hf_load), described by what it is (`About`), never by a path.

- Edges (toylens models and GPT-2-family bridges, whose blocks read the residual stream in sequence
  with one query, key and value per head; the exact oracle is tested equal across the two in
  tests/test_hf_export.py): when the graph has at most `edge_budget` edges, every edge is measured
  by the exact oracle (probes.circuits.oracle); above it, EAP (one forward and backward) ranks every
  edge and the oracle measures the top `verify` of that ranking, reporting how well the two agree.
- Components (GPT-NeoX's parallel attention and MLP, Llama's grouped key / value heads, where the
  edge oracle's reading of the stream does not hold): each head (its hook_z slice) and each MLP
  (hook_mlp_out) is given its counterfactual value alone, exactly, one forward each, within the
  same budget; above it attribution ranks them and the top `verify` are measured exactly.
Either way the ranking's faithfulness curve follows (top-k kept clean, everything else given its
counterfactual value; 0 = the counterfactual run, 1 = the clean run). Time, process peak memory
and the number of forwards are part of the result. Run the hook preflight (models.preflight) first.
"""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import dataclass

import torch

from probes.patching import corrupt_inputs, outcome, replica_scored, scored_metric
from tasks.data import Batch

EDGE_BUDGET = 2000  # exact oracle up to this many edges (or components)
VERIFY = 200  # above it, the top of the attribution ranking measured exactly
EDGE_FAMILIES = ("toylens", "gpt2")


@dataclass(frozen=True)
class About:
    """What the model is: `family` "toylens" (a spec) or an HF model_type; `name` for the reader."""

    name: str
    family: str


@dataclass(frozen=True)
class Ranked:
    unit: str  # "edge" or "component"
    names: tuple[str, ...]  # every unit of the graph, in the graph's order
    score: tuple[float, ...]  # the ranking's score per unit (exact effects, or attribution)
    method: str  # "exact oracle" or "EAP + oracle verification"
    verified: dict  # unit name -> exact effect, for the units measured exactly
    agreement: float | None  # Spearman of attribution vs exact effect over the verified units


@dataclass(frozen=True)
class ScaledCircuit:
    about: About
    ranked: Ranked
    pairs: int
    clean: float  # mean answer - foil logit, clean run
    corrupt: float  # the same, counterfactual run
    curve: tuple[tuple[int, float], ...]  # (top-k kept, faithfulness 0 = counterfactual, 1 = clean)
    forwards: int
    seconds: float
    peak_rss_mib: float  # the process's peak resident memory so far (it includes loading the model)

    def top(self, k: int = 10) -> list[tuple[str, float]]:
        exact = self.ranked.verified
        order = sorted(range(len(self.ranked.names)), key=lambda i: -abs(self.ranked.score[i]))
        return [(self.ranked.names[i], exact.get(self.ranked.names[i], self.ranked.score[i])) for i in order[:k]]


def trace_task(model, task, about: About, tokenizer=None, seed: int = 0, pairs: int = 64, **budgets) -> ScaledCircuit:
    """`trace` on the task's held-out pairs: any bridge (a toylens model, or a loaded checkpoint with
    its `tokenizer`) and any task (a text task for a checkpoint; tasks.templates)."""
    from tasks.templates import heldout_batch

    batch = heldout_batch(task, seed, tokenizer, pairs)
    if batch.inputs.shape[1] > model.cfg.n_ctx:
        from common.cli import UsageError

        raise UsageError(
            f"task {task.name!r} needs {batch.inputs.shape[1]} positions, over the model's {model.cfg.n_ctx}"
        )
    return trace(model, batch.to(next(model.parameters()).device), about, **budgets)


def trace(model, batch: Batch, about: About, edge_budget: int = EDGE_BUDGET, verify: int = VERIFY) -> ScaledCircuit:
    """The circuit of `model` on `batch` (clean rows and their counterfactual partners)."""
    began, counter = time.perf_counter(), ForwardCounter(model)
    try:
        if about.family in EDGE_FAMILIES:
            ranked, clean, corrupt, curve = edge_circuit(model, batch, edge_budget, verify)
        else:
            ranked, clean, corrupt, curve = component_circuit(model, batch, edge_budget, verify)
    finally:
        counter.remove()
    return ScaledCircuit(
        about, ranked, len(batch), clean, corrupt, curve, counter.calls, time.perf_counter() - began, peak_rss_mib()
    )


def hooks_used(model, about: About) -> list[str]:
    """The hooks `trace` edits or reads on this model: what the preflight must check first."""
    from models.preflight import report_hooks

    return report_hooks(model, edges=about.family in EDGE_FAMILIES)


class ForwardCounter:
    """Counts passes through the unembedding: every forward ends there, full or resumed, batched or not."""

    def __init__(self, model):
        self.calls = 0
        self.handle = model.unembed.register_forward_pre_hook(self.count)

    def count(self, module, args):
        self.calls += 1

    def remove(self):
        self.handle.remove()


def peak_rss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (2**20 if sys.platform == "darwin" else 2**10)


def edge_circuit(model, batch: Batch, budget: int, verify: int):
    from probes.circuits.faithfulness import curve
    from probes.circuits.methods.attribution import eap
    from probes.circuits.oracle import edge_effects, model_graph, patched_outcomes, record_runs

    graph = model_graph(model)
    runs = record_runs(model, batch, graph)
    names = tuple(str(edge) for edge in graph.edges)
    if len(graph.edges) <= budget:
        effects = edge_effects(model, batch, graph, runs=runs)
        score = effects.effect
        ranked = Ranked("edge", names, tuple(score.tolist()), "exact oracle", dict(zip(names, score.tolist())), None)
    else:
        score = eap(model, batch, graph, runs=runs).score
        top = score.abs().argsort(descending=True, stable=True)[:verify].tolist()
        outcomes = patched_outcomes(model, batch, graph, [frozenset([graph.edges[i]]) for i in top], runs)
        exact = [o.metric - runs.base.outcome.metric for o in outcomes]
        ranked = verified_ranking("edge", names, score, top, exact)
    faithful = curve(model, batch, graph, ranked.method, score, runs)
    points = tuple(zip(faithful.sizes, faithful.faithfulness))
    return ranked, runs.base.outcome.metric, runs.other.outcome.metric, points


def verified_ranking(unit: str, names, score: torch.Tensor, top: list[int], exact: list[float]) -> Ranked:
    from probes.circuits.methods.scores import spearman

    attributed = score[top]
    agreement = spearman(attributed, torch.tensor(exact)) if len(top) > 2 else None
    verified = {names[i]: value for i, value in zip(top, exact)}
    return Ranked(unit, names, tuple(score.tolist()), "EAP + oracle verification", verified, agreement)


def components(model) -> list[tuple[str, str, int | None]]:
    """(name, hook, head) of every head and MLP."""
    out: list[tuple[str, str, int | None]] = []
    for l in range(model.cfg.n_layers):
        out += [(f"L{l}H{h}", f"blocks.{l}.attn.hook_z", h) for h in range(model.cfg.n_heads)]
        if not model.cfg.attn_only:
            out.append((f"MLP{l}", f"blocks.{l}.hook_mlp_out", None))
    return out


def replacing(values: dict, units: list[tuple[str, str, int | None]]):
    """Hooks giving each unit its value from `values` (hook name -> tensor)."""
    by_hook: dict[str, list] = {}
    for _, hook, head in units:
        by_hook.setdefault(hook, []).append(head)

    def make(name, heads):
        def hook(act, hook):
            act = act.clone()
            for head in heads:
                if head is None:
                    act[:] = values[name]
                else:
                    act[:, :, head] = values[name][:, :, head]
            return act

        return hook

    return [(name, make(name, heads)) for name, heads in by_hook.items()]


def metric_of(model, batch: Batch, tokens, hooks=()) -> float:
    with torch.no_grad():
        logits = model.run_with_hooks(tokens, fwd_hooks=list(hooks))
    return outcome(replica_scored(logits, batch), batch)[0].metric


def component_circuit(model, batch: Batch, budget: int, verify: int):
    units = components(model)
    names = tuple(name for name, _, _ in units)
    hooks = sorted({hook for _, hook, _ in units})
    with torch.no_grad():
        _, clean_cache = model.run_with_cache(batch.inputs, names_filter=hooks)
        _, corrupt_cache = model.run_with_cache(corrupt_inputs(batch), names_filter=hooks)
    corrupt_values = {name: corrupt_cache[name] for name in hooks}
    clean = metric_of(model, batch, batch.inputs)
    corrupt = metric_of(model, batch, corrupt_inputs(batch))

    def effect(i: int) -> float:
        return metric_of(model, batch, batch.inputs, replacing(corrupt_values, [units[i]])) - clean

    if len(units) <= budget:
        exact = [effect(i) for i in range(len(units))]
        ranked = Ranked("component", names, tuple(exact), "exact oracle", dict(zip(names, exact)), None)
        score = torch.tensor(exact)
    else:
        score = component_attribution(model, batch, hooks, units, clean_cache, corrupt_values)
        top = score.abs().argsort(descending=True, stable=True)[:verify].tolist()
        ranked = verified_ranking("component", names, score, top, [effect(i) for i in top])
    order = score.abs().argsort(descending=True, stable=True).tolist()
    points = []
    for k in sorted({0, 1, 2, 5, 10, 20, 50, len(units)} & set(range(len(units) + 1))):
        outside = [units[i] for i in order[k:]]
        value = metric_of(model, batch, batch.inputs, replacing(corrupt_values, outside))
        points.append((k, (value - corrupt) / (clean - corrupt) if clean != corrupt else float("nan")))
    return ranked, clean, corrupt, tuple(points)


def component_attribution(model, batch: Batch, hooks, units, clean_cache, corrupt_values) -> torch.Tensor:
    """(counterfactual - clean value) . d metric / d value at the clean run, per unit (one backward)."""
    grads: dict = {}

    def keep(act, hook):
        act.register_hook(lambda grad, name=hook.name: grads.__setitem__(name, grad))
        return act

    logits = model.run_with_hooks(batch.inputs, fwd_hooks=[(name, keep) for name in hooks])
    scored_metric(replica_scored(logits, batch), batch).mean().backward()
    model.zero_grad(set_to_none=True)
    scores = []
    for _, hook, head in units:
        change = (corrupt_values[hook] - clean_cache[hook]) * grads[hook]
        scores.append(float(change[:, :, head].sum() if head is not None else change.sum()))
    return torch.tensor(scores)
