"""A run's circuit as the report names it, kept as plain facts (circuit.json), and the label a
census counts.

A head-to-head path is seen two ways: the sender's clean write patched in at every position at
once (the graph view: an edge of the edge oracle is exactly this, sender at every position) and at
its best single position. A path is named when either view recovers ReportSettings.path_claim of the
gap, so a path whose position varies per example (a task whose layout varies) is named from the
graph view, and a path the per-position patches show is never missed.

The label is computed from the stored facts, not from the report's sentence, so when the report's
rule for naming a path changes (its claim threshold), `circuit_label` follows it without retracing.
A label names a mechanism (components and heads), never a position or the tokens found there: the
same mechanism over examples of different layouts, or over seeds, is one label. A circuit with a
mechanism signature (probes.circuits.signature: heads by layer and measured role, invariant to
relabelling heads within a layer) is labelled by it, so seeds that differ only in head numbers
share a label; circuits stored before signatures keep their head-named label.
"""

from __future__ import annotations

import math
import re
import dataclasses
from dataclasses import asdict, dataclass
from enum import StrEnum

from common.cli import UsageError
from common.jsonfiles import check_fields
from probes.circuits.signature import MechanismSignature

CIRCUIT = "circuit.json"
# circuit.json's fields and their types: a stored file is checked before a census counts it.
EDGE_FIELDS = {
    "sender": str,
    "receiver": str,
    "component": str,
    "position": int,
    "position_label": str,
    "recovered": float,
    "restored": float,
    "everywhere": float,
}
SUMMARY_FIELDS = {
    "model_name": str,
    "seed": int,
    "n_layers": int,
    "heldout": float,
    "nodes": list,
    "edge": dict,
    "faithfulness": float,
    "note": str,
    "summary": str,
    "signature": dict,
}
NULLABLE = ("edge", "faithfulness", "signature")  # signature: null, or absent in files written before it
PATHS = "paths"  # a list of EDGE_FIELDS objects, checked one by one


@dataclass(frozen=True)
class PathFacts:
    """One head-to-head path of the circuit, in both views: the sender patched at every position
    at once, and at its best single position."""

    sender: str
    receiver: str
    component: str  # q | k | v
    position: int  # the best single sender position patched (-1: none patched alone)
    position_label: str  # that position's name in the report, e.g. 'p14' ('' when none)
    recovered: float | None  # share of the clean - counterfactual gap the path closes there
    restored: float | None  # share of scored answers it restores there
    everywhere: float | None = None  # share of the gap with the sender patched at every position

    @property
    def strength(self) -> float:
        """What the naming rule compares with its claim: the stronger of the two views."""
        return max((v for v in (self.recovered, self.everywhere) if v is not None), default=-math.inf)

    @property
    def oracle_name(self) -> str:
        """The edge oracle's name for this path (models.graph.PathFacts), e.g. 'L0H0 -> L1H0.k'."""
        return f"{self.sender} -> {self.receiver}.{self.component}"

    @property
    def mechanism(self) -> str:
        return f"{self.component.upper()}-composition {self.sender}->{self.receiver}"


def circuit_paths(everywhere: list, single: list, position_label) -> list[PathFacts]:
    """Every head-to-head path measured, strongest first: `everywhere` the path patches with the
    sender at every position (probes.circuits.path_patching.PathPatch, positions None), `single`
    those at one sender position; `position_label(p)` names a position."""

    def key(patch):  # stored by name: circuit.json keeps heads as L0H1
        return str(patch.sender), str(patch.receiver), patch.component

    whole = {key(p): p for p in everywhere}
    best: dict = {}
    for patch in single:
        if key(patch) not in best or patch.recovered > best[key(patch)].recovered:
            best[key(patch)] = patch
    paths = []
    for name in dict.fromkeys([*whole, *best]):
        one, at_once = best.get(name), whole.get(name)
        sender, receiver, component = name
        # Keywords, not two star-unpackings: the type checker (and a reader) sees which field is which.
        position, label, recovered, restored = (
            (one.positions[0], position_label(one.positions[0]), one.recovered, one.restored)
            if one is not None
            else (-1, "", None, None)
        )
        paths.append(
            PathFacts(
                sender,
                receiver,
                component,
                position,
                label,
                recovered,
                restored,
                everywhere=None if at_once is None else at_once.recovered,
            )
        )
    return sorted(paths, key=lambda e: -e.strength)


def named_paths(paths, claim: float) -> list[PathFacts]:
    """The paths the report names: either view recovers at least `claim` of the gap."""
    return [path for path in paths if path.strength >= claim]


def path_chain(paths) -> list[PathFacts]:
    """The longest run of `paths` in series (each path's receiver the next one's sender), in the
    order the signal flows: the hops of a multi-hop circuit. Heads only send to later layers, so the
    search ends."""

    def longest(head: str, left: list) -> list:
        runs = [
            [path, *longest(path.receiver, [p for p in left if p is not path])] for path in left if path.sender == head
        ]
        return max(runs, key=len, default=[])

    return max((longest(path.sender, list(paths)) for path in paths), key=len, default=[])


@dataclass(frozen=True)
class CircuitSummary:
    model_name: str
    seed: int
    n_layers: int
    heldout: float  # held-out accuracy of the trained run
    nodes: tuple[str, ...] = ()  # circuit heads with their positions, e.g. 'L1H0@p14'
    edge: PathFacts | None = None  # the strongest path (paths[0])
    faithfulness: float | None = None
    note: str = ""  # why no circuit was traced, if none was, or why its paths were not
    summary: str = ""  # the report's sentence for this run
    paths: tuple[PathFacts, ...] = ()  # every head-to-head path measured, strongest first
    signature: MechanismSignature | None = None  # the mechanism up to relabelled heads (probes.circuits.signature)

    def to_dict(self) -> dict:
        plain = asdict(dataclasses.replace(self, signature=None))
        return {**plain, "signature": None if self.signature is None else self.signature.to_dict()}

    @classmethod
    def from_dict(cls, data: dict, where: str = CIRCUIT, fix: str = "trace the run again") -> "CircuitSummary":
        """A stored summary after one check of every field's type (UsageError); a missing field is a
        TypeError."""
        data = dict(data) if isinstance(data, dict) else data
        paths = data.pop(PATHS, []) if isinstance(data, dict) else []
        check_fields(data, SUMMARY_FIELDS, where, fix, nullable=NULLABLE)
        if not isinstance(paths, list):
            raise UsageError(f"{where}: {PATHS} must be a list of objects; {fix}")
        edge = data.get("edge")
        checked = [
            stored_edge(e, f"{where}: {name}", fix)
            for e, name in [(edge, "edge")] * (edge is not None) + [(p, PATHS) for p in paths]
        ]
        signature = data.get("signature")
        return cls(
            **{
                **data,
                "nodes": tuple(data.get("nodes", ())),
                "edge": checked[0] if edge else None,
                "paths": tuple(checked[1:] if edge else checked),
                "signature": None if signature is None else MechanismSignature.from_dict(signature, where, fix),
            }
        )


def stored_edge(data, where: str, fix: str) -> PathFacts:
    check_fields(data, EDGE_FIELDS, where, fix, nullable=("recovered", "restored", "everywhere"))
    return PathFacts(**data)


def summarise(analysis, summary: str) -> CircuitSummary:
    """The facts of a probes.report.run_analysis.RunAnalysis that name its circuit (its mechanism's
    signature among them); `summary` the report's sentence for it (probes.report.words.describe)."""
    base = dict(
        model_name=analysis.model_name,
        seed=analysis.seed,
        n_layers=analysis.spec.n_layers,
        heldout=analysis.accuracy.splits["heldout"].accuracy.value,
        summary=summary,
    )
    if analysis.circuit is None:
        return CircuitSummary(**base, note=analysis.note)
    paths = run_paths(analysis)
    return CircuitSummary(
        **base,
        nodes=analysis.circuit.describe(),
        edge=paths[0] if paths else None,
        paths=tuple(paths),
        faithfulness=analysis.circuit.faithfulness.recovered,
        note=analysis.note,
        signature=getattr(analysis, "mechanism", None),
    )


def run_paths(analysis) -> list[PathFacts]:
    """circuit_paths of a RunAnalysis (both views), positions named as its report names them."""
    return circuit_paths(analysis.paths or [], analysis.path_positions or [], lambda p: analysis.labels[p])


class LabelKind(StrEnum):
    """What a circuit label says was found (a StrEnum: files and tables show its value)."""

    PATH = "path"  # one or more named paths: the label is their mechanism
    NO_SINGLE_PATH = "no single path"  # paths measured, none recovers the claim
    ONE_BLOCK = "one block"  # no path measured: the circuit's heads do not compose
    HEADS_ONLY = "heads only"  # its heads traced, the paths between them not measured (CircuitSummary.note says why)
    UNTRACED = "untraced"  # no circuit traced


@dataclass(frozen=True)
class CircuitLabel:
    kind: LabelKind
    text: str  # what a census counts, e.g. 'K-composition L0H0->L1H0 + Q-composition L1H0->L2H0'

    @property
    def named(self) -> bool:
        return self.kind == LabelKind.PATH


def mechanism_text(paths) -> str:
    """Named paths as one mechanism, in the order the signal flows (sender layer, receiver layer,
    component), whatever order their strengths put them in."""

    def numbers(head: str) -> tuple[int, ...]:  # 'L1H0' -> (1, 0), without importing torch
        return tuple(int(n) for n in re.findall(r"\d+", head))

    def flow(path):
        return numbers(path.sender), numbers(path.receiver), path.component

    return " + ".join(path.mechanism for path in sorted(paths, key=flow))


def circuit_label(summary: CircuitSummary) -> CircuitLabel:
    """The report's naming rule: a path is named when either view of it (sender at every position,
    or at its best single position) recovers ReportSettings.path_claim of the gap; otherwise the
    label says what was found (its heads) and that no path was named. No position or token is part
    of a label: it names the mechanism."""
    from probes.settings import DEFAULT

    # Heads only: where the search pinned them is a position, which varies with the layout.
    heads = "+".join(dict.fromkeys(node.split("@")[0] for node in summary.nodes))
    if not summary.nodes:
        return CircuitLabel(LabelKind.UNTRACED, "no circuit traced")
    paths = summary.paths or ((summary.edge,) if summary.edge is not None else ())
    named = named_paths(paths, DEFAULT.path_claim)
    if named:
        kind = LabelKind.PATH
    else:
        kind = LabelKind.NO_SINGLE_PATH if paths else LabelKind.HEADS_ONLY if summary.note else LabelKind.ONE_BLOCK
    if summary.signature is not None:  # the mechanism up to relabelled heads: no head index in it
        return CircuitLabel(kind, summary.signature.text)
    if named:
        return CircuitLabel(kind, mechanism_text(named))
    if paths:
        return CircuitLabel(kind, f"no path carries it ({heads})")
    if kind is LabelKind.HEADS_ONLY:
        return CircuitLabel(kind, f"heads only, paths not measured ({heads})")
    return CircuitLabel(kind, f"{'one block' if summary.n_layers == 1 else 'within one block'} ({heads})")
