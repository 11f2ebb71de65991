"""The report of a circuit traced on any bridge (probes.circuits.scaled): report.md and report.json.
Every number says what it was measured on (the task's held-out pairs, n) and its scale."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from common.atomic import atomic_write, write_json
from probes.settings import DEFAULT

TOP = 15  # units listed in report.md (report.json holds every one)


def report_lines(result, task: str, preflight_line: str) -> list[str]:
    ranked, gap = result.ranked, result.clean - result.corrupt
    lines = [
        f"# {task} on {result.about.name}",
        "",
        f"- Preflight: {preflight_line}",
        f"- Measured on: task {task}'s held-out pairs (clean prompt, counterfactual partner), n = {result.pairs}; "
        f"metric: mean answer - foil logit, clean {result.clean:.4g}, counterfactual {result.corrupt:.4g} "
        f"(gap {gap:.4g}).",
        f"- Method: {ranked.method} over {len(ranked.names)} {ranked.unit}s"
        + (f" ({len(ranked.verified)} verified exactly)" if ranked.agreement is not None else "")
        + f"; {result.forwards} forwards, {result.seconds:.1f} s, process peak memory {result.peak_rss_mib:.0f} MiB.",
    ]
    if abs(gap) < DEFAULT.min_gap:
        lines.append(
            f"- The gap is below {DEFAULT.min_gap:g} logit: the model barely tells the answer from the foil, so the "
            "effects below are small and the faithfulness ratios are noise (the circuit report traces no circuit here)."
        )
    if ranked.agreement is not None:
        lines.append(
            f"- Attribution vs exact effect over the verified {ranked.unit}s: Spearman {ranked.agreement:.3f}."
        )
    lines += ["", f"## Largest effects ({ranked.unit} given its counterfactual value alone; change of the metric)", ""]
    lines += [f"| {ranked.unit} | effect | exact |", "|---|---|---|"]
    lines += [
        f"| {name} | {value:.4g} | {'yes' if name in ranked.verified else 'no (attribution)'} |"
        for name, value in result.top(TOP)
    ]
    lines += [
        "",
        "## Faithfulness of the top-k (0 = counterfactual run, 1 = clean run)",
        "",
        "| k | faithfulness |",
        "|---|---|",
    ]
    lines += [f"| {k} | {value:.3f} |" for k, value in result.curve]
    return lines + search_lines(result.searched) + [""]


def search_lines(searched) -> list[str]:
    """The joint search's circuit (probes.circuits.scaled.Searched), or nothing when it was skipped."""
    if searched is None:
        return []
    reached = "reaches" if searched.faithfulness >= searched.target else "does not reach"
    lines = [
        "",
        f"## Joint search over the top {searched.allowed} edges of the ranking",
        "",
        f"{len(searched.edges)} edges kept, faithfulness {searched.faithfulness:.3f} (0 = counterfactual run, 1 = clean "
        f"run; every edge outside them given its counterfactual value), which {reached} the target "
        f"{searched.target:g}; {searched.sets} edge sets measured on the exact oracle.",
        "",
    ]
    return (
        lines
        + [f"- {name}" for name in searched.edges[:TOP]]
        + ([f"- ... and {len(searched.edges) - TOP} more (report.json)"] if len(searched.edges) > TOP else [])
    )


def write_outside_report(result, task: str, preflight, folder: Path) -> list[Path]:
    """report.md and report.json into `folder` (a staging folder the caller publishes)."""
    line = f"passed, {len(preflight.checks)} checks, {preflight.forwards} forwards, {preflight.seconds:.1f} s"
    markdown, data = Path(folder) / "report.md", Path(folder) / "report.json"
    text = "\n".join(report_lines(result, task, line))
    atomic_write(markdown, lambda temp: Path(temp).write_text(text))
    write_json(data, {"task": task, "preflight": line, "circuit": dataclasses.asdict(result)})
    return [markdown, data]
