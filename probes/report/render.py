"""Terminal tables for probe results. Computing lives in the probe modules; this only formats."""

from __future__ import annotations

import math
from typing import Sequence

from common.stats import Interval
from probes.accuracy import pooled
from probes.report.words import pct, shuffle_text
from models import Model


def percent(interval: Interval) -> str:
    if math.isnan(interval.low):
        return f"{interval.value:6.1%}"
    return f"{interval.value:6.1%} [{interval.low:.1%}, {interval.high:.1%}]"


def table(headers: list[str], rows: Sequence[Sequence[object]], width: int | None = None) -> str:
    """Columns padded to their longest cell (each cell printed with str); with `width`, a last cell that would pass it continues
    on rows of its own under that column (the other columns are short: model, seed, numbers)."""
    if width is not None:
        rows = folded_last_column(headers, rows, width)
    from common.cli import printable

    rows = [[printable(str(c)) for c in row] for row in rows]  # group and token names are a plugin's
    widths = [max(len(str(c)) for c in column) for column in zip(headers, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    # No trailing blanks: the last column padded to its longest cell made every row that long.
    return "\n".join(line(cells).rstrip() for cells in [headers, ["-" * w for w in widths], *rows])


def folded_last_column(headers: list[str], rows: Sequence[Sequence[object]], width: int) -> list[list]:
    import textwrap

    start = sum(max(len(str(c)) for c in column) + 2 for column in zip(headers[:-1], *(row[:-1] for row in rows)))
    room = max(width - start, 20)
    folded: list[list] = []
    for row in rows:
        pieces = textwrap.wrap(str(row[-1]), room) or [""]
        folded += [[*row[:-1], pieces[0]], *([""] * (len(row) - 1) + [piece] for piece in pieces[1:])]
    return folded


WIDTH = 120  # terminal lines are at most this long: prose is folded, long health notes go under the table


def accuracy_table(models) -> str:
    headers = [
        "model",
        "seeds",
        "held-out",
        "pooled Wilson 95%",
        "seed range",
        "foil",
        "train",
        "n/seed",
        "shuffle max|dlogit|",
    ]
    rows = [
        [
            m.model_name,
            len(m.seeds),
            f"{m.heldout.value:.1%}",
            wilson_text(pooled(m.runs)),
            seed_range(m),
            pct(m.heldout_foil_rate.value, 1),
            f"{m.train.value:.1%}",
            m.runs[0].splits["heldout"].n,
            shuffle_text(m.shuffle_max_logit_change),
        ]
        for m in models
    ]
    per_seed = [
        [
            m.model_name,
            r.seed,
            percent(r.splits["heldout"].accuracy),
            r.steps,
            by_group(r.splits["heldout"]),
            health_flags(m, r.seed),
        ]
        for m in models
        for r in m.runs
    ]
    legend = (
        "held-out: mean over seeds; pooled Wilson 95%: over every seed's held-out scored positions together "
        "(how well the examples pin that mean down, not how another seed would do: the seed range shows "
        "that); foil: the share answering the foil (wrong answer); train: mean over seeds"
    )
    return "\n".join(
        [
            fold(legend),
            table(headers, rows, WIDTH),
            "",
            *(fold(line) + "\n" for line in health_lines(models)),
            "per seed (Wilson 95% CI over held-out scored positions, taken as independent):",
            table(["model", "seed", "held-out", "steps", "held-out by group", "health"], per_seed, WIDTH),
            *seed_notes(models),
        ]
    )


def fold(line: str, width: int = WIDTH) -> str:
    """A prose line folded to `width`, its continuation lines indented."""
    import textwrap

    return textwrap.fill(line.strip(), width, subsequent_indent="  ", break_on_hyphens=False)


def wilson_text(interval: Interval) -> str:
    return "-" if math.isnan(interval.low) else f"[{interval.low:.1%}, {interval.high:.1%}]"


def seed_range(model: Model) -> str:
    values = [r.splits["heldout"].accuracy.value for r in model.runs]
    low, high = f"{min(values):.1%}", f"{max(values):.1%}"
    return low if low == high else f"{low}-{high}"


def seeds_text(model: Model, runs) -> str:
    """A mean over these seeds in words that mean something at 3 seeds: 'k/n seeds' and the pooled interval."""
    values = [r.splits["heldout"].accuracy.value for r in runs]
    if not values:
        return "no seed left"
    mean = sum(values) / len(values)
    return f"{mean:.1%} ({len(runs)}/{len(model.seeds)} seeds, pooled Wilson {wilson_text(pooled(runs))})"


def health_flags(model: Model, seed: int) -> str:
    """A run's health in a word or two for the per-seed table; the notes follow the table (seed_notes)."""
    flags = []
    if seed in model.collapsed:
        flags.append("collapsed")
    suspect = model.suspect.get(seed, "")
    if "below two-candidate chance" in suspect:
        flags.append("below chance")
    if "neither answer nor foil" in suspect:
        flags.append("neither answer nor foil")
    if seed in model.budget_limited:
        flags.append("budget-limited")
    return ", ".join(flags) or "ok"


def seed_notes(models) -> list[str]:
    """Why each run collapsed, folded, under the per-seed table (in it the notes padded every row
    to the longest; the other notes are in the lines above the table already)."""
    notes = [fold(f"{m.model_name} seed {seed}: {note}") for m in models for seed, note in m.collapsed.items()]
    return ["", "health notes:", *notes] if notes else []


MAX_GROUPS_SHOWN = 6  # a task with more groups (e.g. one per sequence length) keeps them in summary.json


def by_group(split) -> str:
    groups = split.by_group
    if len(groups) < 2:
        return "-"
    if len(groups) > MAX_GROUPS_SHOWN:
        return f"{len(groups)} groups (summary.json)"
    return ", ".join(f"{name} {values['accuracy']['value']:.0%}" for name, values in groups.items())


def health_text(model: Model, seed: int) -> str:
    """A run's health flags (collapsed, below chance, neither answer nor foil, budget-limited), ''
    when none."""
    budget = model.budget_limited.get(seed)
    notes = (model.collapsed.get(seed), model.suspect.get(seed), budget and f"budget-limited: {budget}")
    return "; ".join(note for note in notes if note)


def health_lines(models) -> list[str]:
    """Collapsed runs, the means without them, runs below chance, the off-by-one check and the
    shortcut audit; each line ends a paragraph."""
    from probes.health import family_audit, foil_blind_note, unpermuted_note

    lines = []
    for m in models:
        if m.collapsed:
            seeds = ", ".join(str(seed) for seed in m.collapsed)
            kept = [r for r in m.runs if r.seed not in m.collapsed]
            lines.append(
                f"{m.model_name}: {len(m.collapsed)} of {len(m.seeds)} seeds collapsed (seed {seeds}); "
                f"held-out mean with them {seeds_text(m, m.runs)}, without them {seeds_text(m, kept)}"
            )
        if m.suspect:
            lines.append(f"{m.model_name}: " + "; ".join(f"seed {seed} {note}" for seed, note in m.suspect.items()))
        if m.budget_limited:
            lines.append(budget_line(m))
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


def budget_line(model: Model) -> str:
    """Which seeds stopped at or near their step budget, and why: what is said of them rests on the budget."""
    by_reason: dict[str, list[int]] = {}
    for seed, reason in model.budget_limited.items():
        by_reason.setdefault(reason, []).append(seed)
    reasons = "; ".join(f"seed {', '.join(map(str, seeds))} {reason}" for reason, seeds in by_reason.items())
    return (
        f"{model.model_name}: {len(model.budget_limited)} of {len(model.seeds)} seeds budget-limited ({reasons}); "
        "their accuracy and circuits may be the budget's, not the model's: rerun with more --steps before "
        "reading them as the model's"
    )


def md_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])
