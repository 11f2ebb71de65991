"""A run's circuit as the report names it, kept as plain facts (circuit.json), and the label a
census counts.

The label is computed from the stored facts, not from the report's sentence, so when the report's
rule for naming a path changes (its claim threshold), `circuit_label` follows it without retracing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from common.jsonfiles import check_fields

CIRCUIT = "circuit.json"
# circuit.json's fields and their types: a stored file is checked before a census counts it.
EDGE_FIELDS = {"sender": str, "receiver": str, "component": str, "position": int, "position_label": str,
               "recovered": float, "restored": float}
SUMMARY_FIELDS = {"model_name": str, "seed": int, "n_layers": int, "heldout": float, "nodes": list, "edge": dict,
                  "faithfulness": float, "note": str, "summary": str}


@dataclass(frozen=True)
class PathFacts:
    """The circuit's best single-position path patch (probes.report.words.best_edges), in the
    stored form of circuit.json (heads by name)."""

    sender: str
    receiver: str
    component: str          # q | k | v
    position: int           # the sender position patched
    position_label: str     # e.g. 'p14 the' (probes.attention.position_labels)
    recovered: float        # share of the clean - counterfactual gap the path alone closes
    restored: float         # share of scored answers it restores


@dataclass(frozen=True)
class CircuitSummary:
    model_name: str
    seed: int
    n_layers: int
    heldout: float                  # held-out accuracy of the trained run
    nodes: tuple[str, ...] = ()     # circuit heads with their positions, e.g. 'L1H0@p14'
    edge: PathFacts | None = None
    faithfulness: float | None = None
    note: str = ""                  # why no circuit was traced, if none was
    summary: str = ""               # the report's sentence for this run

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict, where: str = CIRCUIT, fix: str = "trace the run again") -> "CircuitSummary":
        """A stored summary after one check of every field's type (UsageError); a missing field is a
        TypeError."""
        check_fields(data, SUMMARY_FIELDS, where, fix, nullable=("edge", "faithfulness"))
        edge = data.get("edge")
        if edge is not None:
            check_fields(edge, EDGE_FIELDS, f"{where}: edge", fix)
        return cls(**{**data, "nodes": tuple(data.get("nodes", ())), "edge": PathFacts(**edge) if edge else None})


@dataclass(frozen=True)
class CircuitLabel:
    kind: str    # 'path' | 'no single path' | 'one block' | 'untraced'
    text: str    # what a census counts, e.g. 'Q-composition L0H0->L1H0 at p14 the'

    @property
    def named(self) -> bool:
        return self.kind == "path"


def circuit_label(summary: CircuitSummary) -> CircuitLabel:
    """The report's naming rule: a path is named only when it recovers ReportSettings.path_claim of
    the gap; otherwise the label says what was found (its heads) and that no path was named."""
    from probes.settings import DEFAULT

    heads = "+".join(summary.nodes)
    if not summary.nodes:
        return CircuitLabel("untraced", "no circuit traced")
    edge = summary.edge
    if edge is not None and edge.recovered >= DEFAULT.path_claim:
        return CircuitLabel("path", f"{edge.component.upper()}-composition {edge.sender}->{edge.receiver} "
                                    f"at {edge.position_label}")
    if edge is not None:
        return CircuitLabel("no single path", f"no single path carries it ({heads})")
    return CircuitLabel("one block", f"{'one block' if summary.n_layers == 1 else 'within one block'} ({heads})")
