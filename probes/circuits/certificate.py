"""A circuit checked against the full model on every input of a task's domain, not on a sample of
pairs: the circuit's run is the exact oracle's (probes.circuits.oracle: every edge outside it given
its ablated write, counterfactual by default, each input with its own partner), and on each input
its answer (the top token at every scored position) is compared with the full model's.

Within the budget (CertificateBudget.inputs) every input is checked, in batches of `chunk`; beyond
it a uniform sample of `sample` inputs is, and the result is an estimate: the share of failing
inputs with its 95% Wilson interval, so "fails on at most X% of the domain" is said with its
confidence, never "certified". The cost is the seconds it took and the inputs checked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Iterable

import torch

from models.bridge import device_of
from models.graph import Edge, Graph
from models.resume import forward_from
from models import Model
from probes.ablation import Ablation
from probes.patching import replica_scored, scored_metric
from tasks.data import Batch

SHOWN_FAILURES = 3  # failing inputs a certificate lists (the count covers all of them)


@dataclass(frozen=True)
class CertificateBudget:
    inputs: int = 4096  # a domain up to this size is checked whole
    sample: int = 1024  # else this many inputs drawn uniformly
    chunk: int = 512  # inputs per forward
    seed: int = 0  # the sample's


@dataclass(frozen=True)
class Inputs:
    """What a certificate reads: `size` inputs, a Batch of any of them by index (with their
    counterfactual partners), and a short text for one (to list a failing input)."""

    size: int
    batch: Callable[[list[int]], Batch]
    text: Callable[[int], str]
    described: str

    def sample(self, n: int, seed: int) -> list[int]:
        from tasks.base import uniform_indices

        return uniform_indices(self.size, n, seed)


# The batches task_inputs made in this process: (the task's class, name, params and domain size,
# the indices) -> Batch. A report worker certifies several runs of one task on the same domain, and
# making the examples (each through the plugin guard and the example contract) cost more than the
# forwards checking them; a domain's examples depend on the task's class and params alone (Domain's
# contract: deterministic), so each chunk is made once per process.
_BATCHES: dict = {}
_KEPT_BATCHES = 64  # chunks kept at most (a few domains' worth); the oldest is dropped first


def task_inputs(task, domain) -> Inputs:
    """A task's declared tasks.base.Domain as a certificate's Inputs (each example made through the
    plugin guard and checked against the example contract as it is first read in this process)."""
    from tasks.data import columns_to_batch, examples_to_columns
    from tasks.validate import domain_examples

    kind = (type(task), task.name, repr(task.params), domain.size)

    def batch(indices: list[int]) -> Batch:
        key = (kind, tuple(indices))
        if key not in _BATCHES:
            if len(_BATCHES) >= _KEPT_BATCHES:
                del _BATCHES[next(iter(_BATCHES))]
            _BATCHES[key] = columns_to_batch(examples_to_columns(domain_examples(task, domain, indices)))
        return _BATCHES[key]

    def text(i: int) -> str:
        return task.decode(domain_examples(task, domain, [i])[0].tokens)

    return Inputs(domain.size, batch, text, domain.described)


@dataclass(frozen=True)
class Failure:
    index: int
    text: str
    deviation: float  # the largest |metric(circuit) - metric(full)| at its scored positions


@dataclass(frozen=True)
class Certificate:
    """The circuit on `checked` of the domain's `size` inputs (all of them when `exhaustive`):
    `kept` inputs where its answer is the full model's at every scored position; the metric's
    deviation |m(circuit) - m(full)| per scored position, worst and mean, against the full model's
    mean |metric| (`scale`); the failing inputs, a few listed; the cost."""

    size: int
    checked: int
    exhaustive: bool
    kept: int
    worst: float
    mean: float
    scale: float
    failures: tuple[Failure, ...]
    ablation: str
    edges: int  # in the circuit
    seconds: float  # wall
    cpu_seconds: float  # this process's CPU time (every thread)
    described: str = ""

    @property
    def failing(self) -> int:
        return self.checked - self.kept

    @property
    def share(self) -> float:
        """Share of the checked inputs whose answer the circuit keeps."""
        return self.kept / self.checked

    @property
    def certified(self) -> bool:
        return self.exhaustive and self.failing == 0

    @property
    def failing_bound(self) -> float:
        """The 95% Wilson upper bound on the share of the whole domain that fails (a sample's), or
        the exact share (the whole domain)."""
        from common.stats import wilson

        return self.failing / self.checked if self.exhaustive else wilson(self.failing, self.checked).high


@dataclass(frozen=True)
class Chunk:
    kept: torch.Tensor  # [n] bool
    deviation: torch.Tensor  # [n] largest |deviation| per input (0 where nothing is scored)
    total: float  # sum of |deviation| over scored positions
    scale: float  # sum of |full metric|
    positions: int


def check_chunk(model: Model, batch: Batch, graph: Graph, circuit: frozenset, ablation: Ablation, reference) -> Chunk:
    from probes.circuits.ablations import ablated_runs
    from probes.circuits.oracle import forward_patched

    batch = batch.to(device_of(model))
    with torch.no_grad():
        runs = ablated_runs(model, batch, graph, ablation, reference)
        # The full model's logits from the clean run just recorded (its residual entering the final
        # norm): the model's own final norm and unembedding, without a second forward.
        final = forward_from(model, runs.base.resid_pre[graph.n_layers], graph.n_layers)
        full = replica_scored(final, batch)[0].cpu()
    patched = forward_patched(model, batch, graph, [frozenset(graph.edges) - circuit], runs, keep_logits=True)[0]
    ours = patched.logits
    assert ours is not None  # asked for with keep_logits
    cpu = batch.to("cpu")
    deviation = (scored_metric(ours, cpu) - scored_metric(full, cpu)).abs()
    wrong = ours.argmax(-1) != full.argmax(-1)
    n = len(cpu)
    failed = wrong.new_zeros(n).index_put((cpu.example_index,), wrong, accumulate=True)
    worst = deviation.new_zeros(n).scatter_reduce(0, cpu.example_index, deviation, "amax")
    return Chunk(~failed, worst, float(deviation.sum()), float(scored_metric(full, cpu).abs().sum()), len(deviation))


def certify(
    model: Model,
    graph: Graph,
    circuit: Iterable[Edge],
    inputs: Inputs,
    ablation: Ablation = Ablation.COUNTERFACTUAL,
    reference=None,
    budget: CertificateBudget = CertificateBudget(),
) -> Certificate:
    """Check `circuit` (edges of `graph`) against the full model on every one of `inputs` within
    `budget` (else on a uniform sample, said so). `reference`: what mean ablation averages over
    (a Batch; default each chunk's own inputs)."""
    began, cpu = time.perf_counter(), time.process_time()
    circuit = frozenset(circuit)
    exhaustive = inputs.size <= budget.inputs
    indices = list(range(inputs.size)) if exhaustive else inputs.sample(budget.sample, budget.seed)
    chunks = [
        (part, check_chunk(model, inputs.batch(part), graph, circuit, ablation, reference))
        for part in (indices[i : i + budget.chunk] for i in range(0, len(indices), budget.chunk))
    ]
    kept = torch.cat([c.kept for _, c in chunks])
    worst = torch.cat([c.deviation for _, c in chunks])
    flat = [i for part, _ in chunks for i in part]
    bad = [j for j in range(len(flat)) if not kept[j]]
    shown = sorted(bad, key=lambda j: -float(worst[j]))[:SHOWN_FAILURES]
    positions = sum(c.positions for _, c in chunks)
    return Certificate(
        size=inputs.size,
        checked=len(flat),
        exhaustive=exhaustive,
        kept=int(kept.sum()),
        worst=float(worst.max()) if len(worst) else 0.0,
        mean=sum(c.total for _, c in chunks) / max(positions, 1),
        scale=sum(c.scale for _, c in chunks) / max(positions, 1),
        failures=tuple(Failure(flat[j], inputs.text(flat[j]), float(worst[j])) for j in shown),
        ablation=str(ablation),
        edges=len(circuit),
        seconds=time.perf_counter() - began,
        cpu_seconds=time.process_time() - cpu,
        described=inputs.described,
    )
