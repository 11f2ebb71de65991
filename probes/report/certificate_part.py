"""The report's certificate part: each traced run's edge circuit (the oracle ranking's smallest
faithful circuit, the edge part's) checked against the full model on every input of the task's
declared domain (probes.circuits.certificate), beside its faithfulness on the report's pairs: a
circuit can hold on the pairs and still change answers elsewhere in the domain."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from probes.report.parts import RunContext, Section, jsonable
from probes.settings import ReportSettings

if TYPE_CHECKING:
    from probes.circuits.certificate import Certificate

SHOWN = 2  # failing inputs quoted in a run's sentence (report.json lists the certificate's few)


@dataclass(frozen=True)
class CertificateRun:
    model_name: str
    seed: int
    pairs: int
    faithfulness: float  # the circuit's, on the report's pairs (null scale)
    certificate: Certificate


def measure_certificate(context: RunContext) -> CertificateRun | None:
    from probes.circuits.certificate import certify, task_inputs
    from probes.report.edge_part import traceable

    if not traceable(context.spec) or context.heldout.counterfactual is None:
        return None
    domain = context.run.task.domain()
    found = context.edge_circuit
    if domain is None or found.circuit.edges is None or not context.settings.traces(found.oracle.gap):
        return None
    inputs = task_inputs(context.run.task, domain)
    certificate = certify(context.model, context.edge_graph, found.circuit.edges, inputs)
    return CertificateRun(
        context.run.model_name, context.run.seed, found.pairs, found.circuit.faithfulness.normalised, certificate
    )


def sentence(run: CertificateRun) -> str:
    c = run.certificate
    held = (
        f"{run.model_name} seed {run.seed}: the edge circuit ({c.edges} edges, the oracle ranking's) holds on "
        f"{run.pairs} pairs ({run.faithfulness:.0%} of the gap); "
    )
    deviation = (
        f"metric deviation worst {c.worst:.2f}, mean {c.mean:.3f} (the full model's mean |metric| {c.scale:.2f}); "
        f"{c.checked} inputs checked in {c.seconds:.1f} s wall, {c.cpu_seconds:.1f} s CPU"
    )
    examples = "; ".join(f'"{f.text}"' for f in c.failures[:SHOWN])
    if c.certified:
        verdict = f"certified on all {c.size} inputs ({c.described}): every answer kept"
    elif c.exhaustive:
        verdict = f"fails on {c.failing} of {c.size} inputs ({c.described}; e.g. {examples})"
    else:
        verdict = (
            f"on a uniform sample of {c.checked} of {c.size} inputs ({c.described}; an estimate, not a "
            f"certificate) fails on {c.failing}, so on at most {c.failing_bound:.1%} of the domain (95% upper "
            "bound)" + (f" (e.g. {examples})" if c.failures else "")
        )
    return held + verdict + "; " + deviation


def render_certificates(results: list[CertificateRun], out: Path, settings: ReportSettings) -> Section | None:
    lines = [sentence(run) for run in results]
    text = (
        "Each traced run's edge circuit checked against the full model on every input of the task's domain "
        "(every edge outside the circuit given its counterfactual write, each input with its own partner; an "
        "answer is kept when the circuit's top token is the full model's at every scored position; the metric "
        "is patching's: answer - foil logit, or the answer's log-prob where the task gives no foil):\n\n"
        + "\n".join(f"- {line}" for line in lines)
    )
    data = [
        {
            "model_name": run.model_name,
            "seed": run.seed,
            "pairs": run.pairs,
            "faithfulness": run.faithfulness,
            "certified": run.certificate.certified,
            "failing": run.certificate.failing,
            "share_kept": run.certificate.share,
            "failing_bound": run.certificate.failing_bound,
            **jsonable(run.certificate),
        }
        for run in results
    ]
    return Section("Certificates", text, lines, data)
