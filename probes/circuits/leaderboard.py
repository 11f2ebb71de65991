"""The ground-truth leaderboard's engine: every registered edge method, under every edge ablation, on
every model whose circuit is known (probes.circuits.truth: the planted models, the planted gates,
the stored Tracr programs, the stored trained models), scored against that truth and timed. One `Cell` per model x method x
ablation; toylens.leaderboard stores them, resumes, and renders the pages.

A method is a function of a `Problem` (the model, its pairs, its graph, and the recorded runs of
one ablation) returning EdgeScores: a score per edge of the graph and, for a pruning method, the
circuit it kept. `register_method` adds one; its row then appears beside the built-in ones.

Scores of a cell (faithfulness on the null scale of probes.circuits.faithfulness: 0 = every edge
ablated, 1 = the full model):
- auroc: recovering the true edges by |score| (probes.circuits.methods.scores.auroc);
- cpr, cmd: MIB's areas over the method's top-k circuits (faithfulness.curve_of);
- smallest: the fewest top-ranked edges reaching the circuit target (90%), against `true_edges`;
- precision, recall: of the method's own circuit (a pruning method's kept edges; a ranking's
  smallest faithful circuit) against the true edges;
- unidentifiable: true edges whose receiver computes the same with the edge ablated alone as without
  on every pair (probes.circuits.identifiable): no method can see them under this ablation, so they
  are scored apart (left out of auroc, precision and recall) and counted; weakest: why the auroc on
  the identifiable truth falls short of 1;
- truth_faithfulness: the true circuit's own faithfulness under this ablation. The planted truths are
  stated for counterfactual ablation (every other edge given its counterfactual write); under mean or
  zero ablation an edge that carries the same write in every run (a position, a constant) can matter,
  and this column says where the truth itself is not the full model, so a low AUROC there is read with it;
- certified, certified_inputs: the method's own circuit checked on every input of the model's domain
  (probes.circuits.certificate; Tracr programs: every input at the compiled length) under this
  ablation: the share of inputs whose answer it keeps, of how many (None: no enumerable domain);
- mean ablation averages each write over the clean and the counterfactual inputs (both_runs);
- wall_s, cpu_s: the method's own time from the recorded runs on (the runs are recorded outside it).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Callable

import torch

from common.cli import UsageError
from models.graph import Graph, graph_of
from probes.ablation import Ablation
from probes.circuits.ablations import EDGE_ABLATIONS, ablated_runs
from probes.circuits.methods.attribution import EdgeScores
from probes.circuits.oracle import Runs
from tasks.data import Batch

if TYPE_CHECKING:
    from probes.circuits.certificate import Inputs

# The relations a model with these kinds of gates counts as an OR/AND model (the issue's >= 0.95 bar).
GATE_KINDS = ("OR", "PARTIAL_OR", "AND")
# Planted models (probes.circuits.truth.planted) whose structure is an OR or an AND of heads.
PLANTED_GATES = ("backup-pair", "partial-pair", "three-backups", "and-pair", "backup-chain")
# Models with redundancy: branches that each alone keep the answer, so no single-edge knock-out can
# rank them (the OR gates, the backups); the exact oracle's calibration leaves them out, said so.
REDUNDANT_KINDS = ("OR", "PARTIAL_OR")
PLANTED_BACKUPS = ("backup-pair", "partial-pair", "three-backups", "backup-chain")


@dataclass(frozen=True)
class Truth:
    """A model whose circuit is known: its true edges and, for a gate, its relations."""

    name: str
    family: str  # "planted", "gate", "tracr" or "trained"
    story: str
    model: object
    batch: Batch
    graph: Graph
    edges: frozenset
    relations: tuple = ()
    inputs: Inputs | None = None  # the whole domain (probes.circuits.certificate), where enumerable

    @property
    def redundant(self) -> bool:
        return self.name in PLANTED_BACKUPS or any(str(r.kind) in REDUNDANT_KINDS for r in self.relations)

    @property
    def gate_kinds(self) -> tuple[str, ...]:
        kinds = tuple(str(r.kind) for r in self.relations)
        return kinds + (("OR/AND",) if self.name in PLANTED_GATES else ())

    @property
    def is_gate(self) -> bool:
        return any(kind in GATE_KINDS or kind == "OR/AND" for kind in self.gate_kinds)


@dataclass(frozen=True)
class Entry:
    """A registered ground-truth model: its family and a builder (n pairs, seed) -> Truth."""

    family: str
    build: Callable[[int, int], Truth]


def planted_truth(build, family: str) -> Entry:
    def make(n: int, seed: int) -> Truth:
        p = build(n, seed)
        return Truth(p.name, family, p.story, p.model, p.batch, graph_of(p.spec), p.edges, getattr(p, "relations", ()))

    return Entry(family, make)


def tracr_truth(program: str) -> Entry:
    def make(n: int, seed: int) -> Truth:
        from probes.circuits.truth import tracr
        from probes.circuits.truth.tracr_domain import tracr_inputs

        compiled = tracr.load(program)
        model, graph = tracr.bridge(compiled), tracr.shape_graph(compiled)
        return Truth(
            f"tracr-{program}",
            "tracr",
            f"{tracr.PROGRAMS[program].source}, compiled by Tracr",
            model,
            tracr.pairs(model, compiled, n, seed),
            graph,
            tracr.recorded_edges(compiled, graph, "used"),  # the fixture's, checked by tests/test_tracr.py
            inputs=tracr_inputs(model, compiled, seed),
        )

    return Entry("tracr", make)


def tracr_fixtures() -> list[str]:
    """The programs with a stored fixture (weights and JSON) in the fixtures folder."""
    from probes.circuits.truth.tracr import FIXTURES, PROGRAMS

    return [
        name
        for name in PROGRAMS
        if (FIXTURES / f"{name}.json").is_file() and (FIXTURES / f"{name}.safetensors").is_file()
    ]


def trained_truth(name: str) -> Entry:
    def make(n: int, seed: int) -> Truth:
        from probes.circuits.truth import trained

        fixture = trained.load(name)
        return Truth(
            f"trained-{name}",
            "trained",
            fixture.story,
            fixture.model,
            trained.sample(fixture.batch, n, seed),
            fixture.graph,
            fixture.edges,  # the fixture's, established on all its pairs and re-checked by tests/test_trained.py
        )

    return Entry("trained", make)


def truth_models() -> dict[str, Entry]:
    """name -> its Entry, cheap to list: nothing is built here."""
    from probes.circuits.truth import gates, planted, relation_gates, trained

    planted_builds = (
        planted.two_hop,
        planted.induction,
        planted.mlp_xor,
        planted.three_hop,
        planted.backup_pair,
        planted.partial_pair,
        planted.saturated_mlp,
        planted.three_backups,
        planted.and_pair,
        planted.backup_chain,
    )
    out = {build.__name__.replace("_", "-"): planted_truth(build, "planted") for build in planted_builds}
    out |= {build.__name__.replace("_", "-"): planted_truth(build, "gate") for build in gates.GATES}
    out |= {build.__name__.replace("_", "-"): planted_truth(build, "gate") for build in relation_gates.RELATION_GATES}
    out |= {f"tracr-{name}": tracr_truth(name) for name in tracr_fixtures()}
    out |= {f"trained-{name}": trained_truth(name) for name in trained.names()}
    return out


@dataclass(frozen=True)
class Problem:
    """What a method is given: one model, its pairs, its graph and the runs of one ablation."""

    model: object
    batch: Batch
    graph: Graph
    runs: Runs

    @cached_property
    def single(self) -> torch.Tensor:
        """The exact oracle's single-edge shares of the gap (the joint search and masks start from it)."""
        from probes.circuits.oracle import edge_effects

        return edge_effects(self.model, self.batch, self.graph, runs=self.runs).normalised()


@dataclass(frozen=True)
class Method:
    name: str
    run: Callable[[Problem], EdgeScores]
    summary: str = ""


METHODS: dict[str, Method] = {}


def register_method(
    name: str, run: Callable[[Problem], EdgeScores], summary: str = "", replace: bool = False
) -> Method:
    """Add a method to the leaderboard: `run(problem)` returns EdgeScores over problem.graph.edges
    (EdgeScores.circuit: the edges it keeps, if it prunes). Its row appears on the next run."""
    if not name or not name.replace("-", "").replace("_", "").isalnum():
        raise UsageError(f"method name {name!r} must be letters, digits, '-' or '_' (it names files)")
    if name in METHODS and not replace:
        raise UsageError(f"a method named {name!r} is already registered; pick another name or pass replace=True")
    METHODS[name] = Method(name, run, summary)
    return METHODS[name]


def oracle_method(p: Problem) -> EdgeScores:
    from probes.circuits.named import ORACLE
    from probes.circuits.oracle import edge_effects

    effects = edge_effects(p.model, p.batch, p.graph, runs=p.runs)
    return EdgeScores(ORACLE, p.graph.edges, effects.effect, effects.seconds)


def eap_method(p: Problem) -> EdgeScores:
    from probes.circuits.methods.attribution import eap

    return eap(p.model, p.batch, p.graph, runs=p.runs)


def eap_ig_method(p: Problem) -> EdgeScores:
    from probes.circuits.methods.attribution import eap_ig

    return eap_ig(p.model, p.batch, p.graph, 5, runs=p.runs)


def acdc_method(p: Problem) -> EdgeScores:
    from probes.circuits.methods.attribution import acdc

    return acdc(p.model, p.batch, p.graph, 0.01, runs=p.runs)


def joint_method(p: Problem) -> EdgeScores:
    from probes.circuits.methods.joint import joint_search

    return joint_search(p.model, p.batch, p.graph, p.runs, p.single).scores


def masks_method(p: Problem) -> EdgeScores:
    from probes.circuits.methods.masks import learned_masks

    return learned_masks(p.model, p.batch, p.graph, p.runs, p.single).scores


for _name, _run, _summary in (
    ("oracle", oracle_method, "the exact oracle: every edge knocked out alone"),
    ("eap", eap_method, "edge attribution patching (Syed et al. 2023)"),
    ("eap-ig", eap_ig_method, "EAP with integrated gradients, 5 steps (Hanna et al. 2024)"),
    ("acdc", acdc_method, "ACDC's greedy pruning, threshold 1% of the gap (Conmy et al. 2023)"),
    ("joint", joint_method, "joint search by set effects, with stand-in searches (docs/joint.md)"),
    ("masks", masks_method, "learned hard-concrete edge masks (Edge Pruning, Bhaskar et al. 2024)"),
):
    register_method(_name, _run, _summary)


@dataclass(frozen=True)
class Cell:
    model: str
    family: str
    gate: bool  # an OR/AND model (Truth.is_gate)
    method: str
    ablation: str
    pairs: int
    seed: int
    edges: int  # in the graph
    true_edges: int
    auroc: float
    cpr: float
    cmd: float
    smallest: int | None  # None: no top-k circuit below the full graph reaches the target
    circuit: int  # edges of the method's own circuit
    circuit_from: str  # "kept" (the method prunes) or "smallest" (its ranking's smallest faithful circuit)
    precision: float
    recall: float
    circuit_faithfulness: float
    truth_faithfulness: float
    wall_s: float
    cpu_s: float
    # True edges unidentifiable under this ablation (probes.circuits.identifiable): scored apart, left
    # out of auroc, precision and recall; `weakest` says why auroc falls short of 1 ("" where it does not).
    unidentifiable: int
    redundant: bool  # Truth.redundant: no single-edge score can rank its branches
    weakest: str
    # probes.circuits.certificate on the method's own circuit over the model's whole domain (None: not
    # enumerable): the share of inputs whose answer it keeps, of how many.
    certified: float | None
    certified_inputs: int | None

    def to_json(self) -> dict:
        return asdict(self)


def both_runs(batch: Batch) -> Batch:
    """The clean and the counterfactual inputs as one batch: the mean ablation's reference. Over the
    clean inputs alone the mean is degenerate on most truths (every clean word of a gate model is
    positive, so the mean write is the clean write and nothing is ablated)."""
    import dataclasses

    assert batch.counterfactual is not None, "ground-truth batches are counterfactual pairs"
    return dataclasses.replace(
        batch,
        tokens=torch.cat([batch.tokens, batch.counterfactual]),
        lengths=torch.cat([batch.lengths, batch.lengths]),
        groups=batch.groups * 2,
        counterfactual=None,
    )


def method_scores(method: Method, problem: Problem) -> EdgeScores:
    """`method.run(problem)`, a user's code: whatever it raises (sys.exit included) or returns
    that is not finite EdgeScores is one line naming the method, in this process as in a worker."""
    where = f"leaderboard method {method.name!r}"
    try:
        scores = method.run(problem)
    except UsageError:
        raise
    except (Exception, SystemExit) as error:  # noqa: BLE001
        raise UsageError(
            f"{where} raised {type(error).__name__}: {str(error)[:200]}; fix it, or leave it out with --methods"
        ) from None
    if not (isinstance(scores, EdgeScores) and isinstance(scores.score, torch.Tensor)):
        raise UsageError(f"{where} returned {type(scores).__name__}, not EdgeScores; return EdgeScores")
    if scores.score.is_floating_point() and not bool(torch.isfinite(scores.score).all()):
        raise UsageError(f"{where} returned a NaN or infinite score; give every edge a finite score")
    return scores


def score_cell(truth: Truth, method: Method, ablation: Ablation, seed: int) -> Cell:
    from probes.circuits.faithfulness import curve_of, normalised, smallest_circuit
    from probes.circuits.identifiable import unidentifiable, weakest
    from probes.circuits.methods.scores import auroc
    from probes.circuits.oracle import circuit_outcomes

    model, batch, graph = truth.model, truth.batch, truth.graph
    reference = both_runs(batch) if ablation is Ablation.MEAN else None
    with torch.no_grad():  # reference_writes computes z @ W_O with grad: the masks would backprop into it twice
        runs = ablated_runs(model, batch, graph, ablation, reference)
    wall, cpu = time.perf_counter(), time.process_time()
    scores = method_scores(method, Problem(model, batch, graph, runs))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if tuple(scores.edges) != tuple(graph.edges) or scores.score.shape != (len(graph.edges),):
        raise UsageError(
            f"method {method.name!r} returned scores over other edges than the graph's "
            f"({len(scores.edges)} for {len(graph.edges)}); score problem.graph.edges in order"
        )
    hidden = unidentifiable(model, batch, runs, truth.edges)
    seen = torch.tensor([e not in hidden for e in graph.edges])
    positive = torch.tensor([e in truth.edges for e in graph.edges])
    smallest = smallest_circuit(model, batch, graph, method.name, scores.score, runs)
    curve = curve_of(smallest)
    kept = scores.circuit is not None
    own = frozenset(
        scores.circuit if scores.circuit is not None else smallest.edges if smallest.edges is not None else graph.edges
    )
    empty, full, circuit, true = circuit_outcomes(model, batch, graph, [[], graph.edges, own, truth.edges], runs)
    faithful = normalised([circuit.metric, true.metric], empty.metric, full.metric)
    hits, judged = len(own & truth.edges - hidden), own - hidden
    certificate = certified(truth, own, ablation, reference)
    return Cell(
        truth.name,
        truth.family,
        truth.is_gate,
        method.name,
        str(ablation),
        len(batch),
        seed,
        len(graph.edges),
        len(truth.edges),
        auroc(scores.score.abs()[seen], positive[seen]),
        curve.cpr,
        curve.cmd,
        None if smallest.edges is None else len(smallest.edges),
        len(own),
        "kept" if kept else "smallest",
        hits / len(judged) if judged else 0.0,
        hits / max(len(truth.edges - hidden), 1),
        faithful[0],
        faithful[1],
        wall,
        cpu,
        len(hidden),
        truth.redundant,
        weakest(graph.edges, scores.score, truth.edges, hidden),
        None if certificate is None else certificate.share,
        None if certificate is None else certificate.checked,
    )


def certified(truth: Truth, circuit: frozenset, ablation: Ablation, reference):
    """probes.circuits.certificate of `circuit` over the truth's whole domain (None: none declared)."""
    from probes.circuits.certificate import certify

    if truth.inputs is None:
        return None
    return certify(truth.model, truth.graph, circuit, truth.inputs, ablation, reference)


def ablation_of(text: str) -> Ablation:
    for ablation in EDGE_ABLATIONS:
        if str(ablation) == text:
            return ablation
    raise UsageError(f"edge ablation must be one of {', '.join(map(str, EDGE_ABLATIONS))}, got {text!r}")
