"""The report's features part: where `toylens features RUNS_DIR` stored dictionaries for a run, their
grades against the task's planted variables on the held-out split and, for each variable a feature
recovers, the roles its strongest activations sit at (probes.features.stored). A run without stored
dictionaries has no features section; the report never trains one."""

from __future__ import annotations

from pathlib import Path

from probes.features.render import SCALES, circuit_lines, hook_lines
from probes.features.stored import SHOWN, TOP, RunFeatures
from probes.report.parts import RunContext, Section, jsonable
from probes.settings import ReportSettings


def measure_features(context: RunContext) -> RunFeatures | None:
    from probes.features.stored import features_folder, stored_features

    if not features_folder(context.run).is_dir():
        return None  # before context.model: a run without dictionaries loads nothing for this part
    return stored_features(context.run, context.model, context.heldout, context.vocabulary)


def recovered_words(found: RunFeatures) -> str:
    variables = {r.variable for g in found.grades for r in g.recoveries}
    recovered = {e.variable for e in found.examples}
    return (
        f"{found.run}: {len(found.grades)} stored dictionaries (the runs folder's {found.folder}) recover "
        f"{len(recovered)} of the "
        f"{len(variables)} planted variables at MCC >= {found.grades[0].threshold:g} on the held-out split"
    )


def roles_text(roles) -> str:
    return ", ".join(f"{role} {count}" for role, count in roles)


def example_rows(found: RunFeatures) -> list[str]:
    lines = [
        f"| dictionary | reads | variable | feature | MCC | roles of its {TOP} strongest activations | "
        f"tokens at its {SHOWN} strongest |",
        "|---|---|---|---|---|---|---|",
    ]
    for e in found.examples:
        lines.append(
            f"| {e.dictionary} | {e.hook} | {e.variable} | f{e.feature} | {e.mcc:.2f} | {roles_text(e.roles)} | "
            f"{', '.join(e.tokens)} |"
        )
    return lines


def render_features(results: list[RunFeatures], out: Path, settings: ReportSettings) -> Section:
    from itertools import groupby

    lines = [SCALES, ""]
    for found in results:
        lines += [f"### {found.run}", "", recovered_words(found) + ".", ""]
        by_hook = groupby(found.grades, key=lambda g: (g.config.kind, g.config.hook_in, g.config.hook_out))
        for hook, of_hook in by_hook:
            lines += hook_lines(found.run, hook, list(of_hook), heading="####")
        if found.examples:
            lines += example_rows(found) + [""]
        if found.traced is not None:
            lines += circuit_lines(found.traced, heading="####")
    return Section(
        "Features (stored dictionaries)",
        "\n".join(lines),
        [recovered_words(found) for found in results],
        jsonable(results),
    )
