"""Terminal tables for probe results. Computing lives in the probe modules; this only formats."""

from __future__ import annotations

import math

from probes.stats import Interval


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
    rows = [[m.model_name, len(m.seeds), percent(m.heldout), f"{m.heldout_foil_rate.value:.1%}",
             percent(m.train), m.runs[0].splits["heldout"].n, f"{m.shuffle_max_logit_change:.1e}"]
            for m in models]
    per_seed = [[m.model_name, r.seed, percent(r.splits["heldout"].accuracy), r.steps, by_group(r.splits["heldout"])]
                for m in models for r in m.runs]
    return (table(headers, rows) + "\n\nper seed (Wilson 95% CI over held-out examples):\n"
            + table(["model", "seed", "held-out", "steps", "held-out by group"], per_seed))


MAX_GROUPS_SHOWN = 6   # a task with more groups (e.g. one per sequence length) keeps them in summary.json


def by_group(split) -> str:
    groups = split.by_group
    if len(groups) < 2:
        return "-"
    if len(groups) > MAX_GROUPS_SHOWN:
        return f"{len(groups)} groups (summary.json)"
    return ", ".join(f"{name} {values['accuracy']['value']:.0%}" for name, values in groups.items())
