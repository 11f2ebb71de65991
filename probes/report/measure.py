"""The report's parts in the order report.md shows them, each run's measurement of all of them (one
model load, in the report's workers), and their rendering over all runs. Adding a probe to the
report means adding one Part here."""

from __future__ import annotations

from pathlib import Path

from probes.report import certificate_part, document, edge_part, feature_part, run_analysis, sections, sublayer_part
from probes.report.outputs import examples as example_part
from probes.report.parts import MeasuredRun, Part, RunContext, Section
from probes.settings import DEFAULT, ReportSettings


def parts() -> list[Part]:
    """The report's parts, in the order report.md shows them."""
    return [
        Part("accuracy", document.measure_accuracy_part, document.render_accuracy),
        Part("runs", run_analysis.analyse_run, document.render_circuits),
        Part("edge_circuits", edge_part.measure_edge_circuit, edge_part.render_edge_circuits),
        Part("certificates", certificate_part.measure_certificate, certificate_part.render_certificates),
        Part("sublayers", sublayer_part.measure_sublayers, sublayer_part.render_sublayers),
        Part("head_roles", sections.measure_head_roles, sections.head_roles_section),
        Part("dynamics", sections.measure_dynamics, sections.dynamics_section),
        Part("features", feature_part.measure_features, feature_part.render_features),
        Part("examples", example_part.measure_examples, example_part.render_examples),
    ]


def measure_run(run, out: Path | None, settings: ReportSettings = DEFAULT, device: str | None = None) -> MeasuredRun:
    """Every part's measurement of one run, sharing one model load (run in the report's workers)."""
    context = RunContext(run, None if out is None else Path(out), settings, device)
    return MeasuredRun(run.model_name, run.seed, dict(measure_each(context)))


def measure_each(context: RunContext):
    """(part key, its measure's result) for each part in turn, computed as it is asked for (so a
    caller can time each part: benchmarks/report_cost.py)."""
    for part in parts():
        yield part.key, part.measure(context)


def render_parts(measured: list[MeasuredRun], out: Path, settings: ReportSettings = DEFAULT) -> dict[str, Section]:
    """Part key -> its Section, for the parts some run measured something for (in PARTS order)."""
    return {key: section for key, section in render_each(measured, out, settings) if section is not None}


def render_each(measured: list[MeasuredRun], out: Path, settings: ReportSettings = DEFAULT):
    """(key, Section or None) for each part and then the views section, rendered as it is asked for."""
    for part in parts():
        results = [m.results[part.key] for m in measured if m.results.get(part.key) is not None]
        yield part.key, part.render(results, Path(out), settings) if results else None
    yield "views", views_section(measured, settings)


def views_section(measured: list[MeasuredRun], settings: ReportSettings) -> Section | None:
    """Per run with both, the head view's named paths against the edge oracle's head-to-head edges
    (probes.report.words.views_agree): the same or each difference with both numbers."""
    from probes.report.words import views_agree

    found = [
        (m, views_agree(m.results["runs"], m.results["edge_circuits"].result, settings))
        for m in measured
        if getattr(m.results.get("runs"), "circuit", None) is not None
        and m.results.get("edge_circuits") is not None
        and settings.traces(m.results["edge_circuits"].result.oracle.gap)
    ]
    if not found:
        return None
    lines = [f"{m.model_name} seed {m.seed}: {agreement.words}" for m, agreement in found]
    text = (
        "The summary's paths (path patching: the sender's clean write restored into the counterfactual run, "
        "at every position and at one position) against the edge circuit's head-to-head edges (the exact "
        "oracle: one edge given its counterfactual write), both at the claim of "
        f"{settings.path_claim:.0%} of the gap:\n\n" + "\n".join(f"- {line}" for line in lines)
    )
    return Section(
        "Head view and edge view",
        text,
        lines,
        [
            {
                "model_name": m.model_name,
                "seed": m.seed,
                "agree": a.agree,
                "head_view": list(a.head_view),
                "edge_view": list(a.edge_view),
                "head_circuit": list(a.head_circuit),
                "edge_senders": list(a.edge_senders),
            }
            for m, a in found
        ],
    )
