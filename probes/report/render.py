"""Terminal tables for probe results. Computing lives in the probe modules; this only formats."""

from __future__ import annotations

import math

from common.stats import Interval
from probes.report.words import pct, shuffle_text


def percent(interval: Interval) -> str:
    if math.isnan(interval.low):
        return f"{interval.value:6.1%}"
    return f"{interval.value:6.1%} [{interval.low:.1%}, {interval.high:.1%}]"


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def accuracy_table(models) -> str:
    headers = ["model", "seeds", "held-out (95% CI)", "foil (wrong answer)", "train", "held-out n/seed", "shuffle max|dlogit|"]
    rows = [[m.model_name, len(m.seeds), percent(m.heldout), pct(m.heldout_foil_rate.value, 1),
             percent(m.train), m.runs[0].splits["heldout"].n, shuffle_text(m.shuffle_max_logit_change)]
            for m in models]
    per_seed = [[m.model_name, r.seed, percent(r.splits["heldout"].accuracy), r.steps, by_group(r.splits["heldout"]),
                 health_text(m, r.seed)] for m in models for r in m.runs]
    return "\n".join([table(headers, rows), "", *health_lines(models),
                      "per seed (Wilson 95% CI over held-out scored positions, taken as independent):",
                      table(["model", "seed", "held-out", "steps", "held-out by group", "health"], per_seed)])


MAX_GROUPS_SHOWN = 6   # a task with more groups (e.g. one per sequence length) keeps them in summary.json


def by_group(split) -> str:
    groups = split.by_group
    if len(groups) < 2:
        return "-"
    if len(groups) > MAX_GROUPS_SHOWN:
        return f"{len(groups)} groups (summary.json)"
    return ", ".join(f"{name} {values['accuracy']['value']:.0%}" for name, values in groups.items())


def health_text(model, seed: int) -> str:
    """A run's health flags (collapsed, below chance, neither answer nor foil), '' when none."""
    return "; ".join(note for note in (model.collapsed.get(seed), model.suspect.get(seed)) if note)


def health_lines(models) -> list[str]:
    """Collapsed runs, the means without them, runs below chance, the off-by-one check and the
    shortcut audit; each line ends a paragraph."""
    from probes.health import family_audit, foil_blind_note, unpermuted_note

    lines = []
    for m in models:
        if m.collapsed:
            seeds = ", ".join(str(seed) for seed in m.collapsed)
            without = ("no seed left" if m.heldout_without_collapsed is None
                       else percent(m.heldout_without_collapsed).strip())
            lines.append(f"{m.model_name}: {len(m.collapsed)} of {len(m.seeds)} seeds collapsed (seed {seeds}); "
                         f"held-out mean with them {percent(m.heldout).strip()}, without them {without}")
        if m.suspect:
            lines.append(f"{m.model_name}: " + "; ".join(f"seed {seed} {note}" for seed, note in m.suspect.items()))
    check = foil_blind_note(models)
    if check is not None:
        lines.append(check)
    audit = family_audit(models)
    if audit is not None:
        lines.append(audit.words())
    unpermuted = unpermuted_note(models)
    if unpermuted is not None:
        lines.append(unpermuted)
    return [line + "\n" for line in lines]


def md_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])
