"""The leaderboard's pages from its cells and relation grades: leaderboard.md's tables and the same
tables in a sortable leaderboard.html (toylens.leaderboard runs the cells and writes both)."""

from __future__ import annotations

from statistics import mean

GATE_AUROC = 0.95  # the bar for the joint search and masks on the OR/AND models
FAMILIES = ("planted", "gate", "tracr", "trained")  # probes.circuits.leaderboard.Truth.family, in the summary's order
FAILS_AUROC = 0.95  # a cell below this AUROC, or missing a true edge from its circuit, is listed as a failure


RELATION_HEADERS = ["model", "planted", "components", "named", "the logic says", "shares alone right"]


def relation_rows(grades: list) -> list[list]:
    def right(value):
        return "-" if value is None else "yes" if value else "no"

    return [
        [g.model, g.kind, ", ".join(g.components), "yes" if g.named else "no", g.found, right(g.shares)] for g in grades
    ]


def relations_summary(grades: list) -> str:
    kinds = dict.fromkeys(g.kind for g in grades)
    by_kind = ", ".join(
        f"{kind} {sum(g.named for g in grades if g.kind == kind)}/{sum(g.kind == kind for g in grades)}"
        for kind in kinds
    )
    return (
        f"The relation labels (probes.circuits.logic on each gate model's true circuit, counterfactual pairs; "
        f"graded by probes.circuits.truth.relations) name {sum(g.named for g in grades)} of the {len(grades)} "
        f"planted relations ({by_kind})."
    )


def fixed(value, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def summary_rows(cells: list) -> list[list[str]]:
    """Per method and ablation: means over the models (AUROC also over the OR/AND models and per family)."""
    rows = []
    keys = list(dict.fromkeys((c.method, c.ablation) for c in cells))
    for method, ablation in keys:
        group = [c for c in cells if (c.method, c.ablation) == (method, ablation)]
        gates = [c.auroc for c in group if c.gate]
        family = {f: [c.auroc for c in group if c.family == f] for f in FAMILIES}
        found = [c.smallest / c.true_edges for c in group if c.smallest is not None]
        rows.append(
            [
                method,
                ablation,
                len(group),
                fixed(mean(c.auroc for c in group)),
                fixed(mean(gates) if gates else None),
                *(fixed(mean(v) if v else None) for v in family.values()),
                fixed(mean(c.cpr for c in group)),
                fixed(mean(c.cmd for c in group)),
                fixed(mean(found) if found else None, 2),
                len(group) - len(found),
                fixed(mean(c.precision for c in group)),
                fixed(mean(c.recall for c in group)),
                fixed(sum(c.wall_s for c in group), 1),
                fixed(sum(c.cpu_s for c in group), 1),
            ]
        )
    return rows


SUMMARY_HEADERS = [
    "method",
    "ablation",
    "models",
    "AUROC",
    "AUROC on OR/AND",
    "AUROC planted",
    "AUROC gates",
    "AUROC Tracr",
    "AUROC trained",
    "CPR",
    "CMD",
    "smallest / true size",
    "no faithful top-k",
    "precision",
    "recall",
    "wall s",
    "CPU s",
]
CELL_HEADERS = [
    "model",
    "family",
    "method",
    "ablation",
    "edges",
    "true edges",
    "AUROC",
    "CPR",
    "CMD",
    "smallest faithful",
    "own circuit",
    "from",
    "precision",
    "recall",
    "own circuit f",
    "truth f",
    "wall s",
    "CPU s",
]


def cell_row(c) -> list:
    return [
        c.model,
        c.family,
        c.method,
        c.ablation,
        c.edges,
        c.true_edges,
        fixed(c.auroc),
        fixed(c.cpr),
        fixed(c.cmd),
        "-" if c.smallest is None else c.smallest,
        c.circuit,
        c.circuit_from,
        fixed(c.precision),
        fixed(c.recall),
        fixed(c.circuit_faithfulness),
        fixed(c.truth_faithfulness),
        fixed(c.wall_s, 2),
        fixed(c.cpu_s, 2),
    ]


def failures(cells: list) -> list[list[str]]:
    """Per method and ablation, the models where it misses: AUROC below FAILS_AUROC or a true edge
    missing from its own circuit."""
    rows = []
    for method, ablation in dict.fromkeys((c.method, c.ablation) for c in cells):
        bad = [
            c
            for c in cells
            if (c.method, c.ablation) == (method, ablation) and (c.auroc < FAILS_AUROC or c.recall < 1.0)
        ]
        rows.append(
            [
                method,
                ablation,
                len(bad),
                "; ".join(f"{c.model} (AUROC {c.auroc:.2f}, recall {c.recall:.2f})" for c in bad) or "none",
            ]
        )
    return rows


def inventory(models: list[str]) -> str:
    from probes.circuits.leaderboard import truth_models

    registered = truth_models()
    counts = {}
    for name in models:
        counts[registered[name].family] = counts.get(registered[name].family, 0) + 1
    tracr = [m for m, entry in registered.items() if entry.family == "tracr"]
    families = ", ".join(f"{n} {f}" for f, n in counts.items())
    return (
        f"{len(models)} ground-truth models here ({families}); {len(registered)} registered, {len(tracr)} of "
        f"them the stored Tracr fixtures ({', '.join(tracr) or 'none'})."
    )


def markdown(cells: list, grades: list, models: list[str], seconds: float, computed: int, command: str) -> str:
    total = sum(c.wall_s for c in cells)
    lines = [
        "# Ground-truth leaderboard",
        "",
        f"Made by `{command}`; every number below is that command's, from the stored cells. Regenerate "
        "this page rather than edit it. Truths: probes/circuits/truth (planted.py, gates.py, tracr.py, trained.py); "
        "scores: probes/circuits/leaderboard.py. " + inventory(models),
        "",
        f"This run: {computed} of {len(cells)} cells computed, {seconds:.0f} s wall; the methods' own time over "
        f"all cells sums to {total:.0f} s (the recorded runs, curves and smallest circuits are not counted in "
        "it).",
        "",
        "AUROC: recovering the true edges by |score|. CPR/CMD: MIB's areas over the top-k circuits. "
        "Smallest / true size: the fewest top-ranked edges reaching 90% faithfulness over the true circuit's "
        "edges. Precision/recall: of the method's own circuit (a pruner's kept edges, else its smallest "
        "faithful circuit). Truth f: the true circuit's faithfulness under that ablation (the truths are "
        "stated for counterfactual ablation).",
        "",
        "## Methods",
        "",
    ]
    lines += table_lines(SUMMARY_HEADERS, summary_rows(cells))
    lines += ["", f"## Where each method fails (AUROC < {FAILS_AUROC} or a true edge missing from its circuit)", ""]
    lines += table_lines(["method", "ablation", "models", "which"], failures(cells))
    if grades:
        lines += ["", "## Relation labels", "", relations_summary(grades), ""]
        lines += table_lines(RELATION_HEADERS, relation_rows(grades))
    lines += ["", "## Every cell", ""] + table_lines(CELL_HEADERS, [cell_row(c) for c in cells])
    return "\n".join(lines) + "\n"


def table_lines(headers: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)] + [
        "| " + " | ".join(str(v).replace("|", "\\|") for v in row) + " |" for row in rows
    ]


def html_page(cells: list, grades: list, models: list[str], command: str) -> str:
    from common.html import escape, page, table

    relations = (
        f"<h2>Relation labels</h2><p>{escape(relations_summary(grades))}</p>"
        + table(RELATION_HEADERS, relation_rows(grades))
        if grades
        else ""
    )
    body = (
        f"<p class='note'>Made by <code>{escape(command)}</code>. {escape(inventory(models))} Click a column's "
        "header to sort.</p><h2>Methods</h2>"
        + table(SUMMARY_HEADERS, summary_rows(cells))
        + "<h2>Where each method fails</h2>"
        + table(["method", "ablation", "models", "which"], failures(cells))
        + relations
        + "<h2>Every cell</h2>"
        + table(CELL_HEADERS, [cell_row(c) for c in cells])
    )
    return page("Ground-truth leaderboard", body)
