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
        checked = [c.certified for c in group if c.certified is not None]
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
                sum(c.unidentifiable for c in group),
                f"{mean(checked):.3f} ({sum(v == 1.0 for v in checked)}/{len(checked)} whole)" if checked else "-",
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
    "unidentifiable true edges",
    "certified",
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
    "unidentifiable",
    "certified",
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
        c.unidentifiable,
        certified(c),
        fixed(c.wall_s, 2),
        fixed(c.cpu_s, 2),
    ]


def certified(c) -> str:
    """A cell's certificate: the share of the domain's inputs its circuit keeps, of how many."""
    return "-" if c.certified is None else f"{c.certified:.3f} of {c.certified_inputs}"


def fails(c) -> bool:
    return c.auroc < FAILS_AUROC or c.recall < 1.0 or (c.certified is not None and c.certified < 1.0)


def failures(cells: list) -> list[list[str]]:
    """Per method and ablation, the models where it misses: AUROC on the identifiable truth below
    FAILS_AUROC, an identifiable true edge missing from its own circuit, or that circuit changing
    an answer somewhere on the model's whole domain (its certificate)."""
    rows = []
    for method, ablation in dict.fromkeys((c.method, c.ablation) for c in cells):
        bad = [c for c in cells if (c.method, c.ablation) == (method, ablation) and fails(c)]
        said = [
            f"{c.model} (AUROC {c.auroc:.2f}, recall {c.recall:.2f}"
            + ("" if c.certified is None else f", certified {c.certified:.3f}")
            + ")"
            for c in bad
        ]
        rows.append([method, ablation, len(bad), "; ".join(said) or "none"])
    return rows


def calibration(cells: list) -> tuple[str, list[list]]:
    """The exact oracle as the board's calibration: per ablation, how many models without redundancy
    it ranks perfectly on the identifiable truth, and each exception with its reason."""
    oracle = [c for c in cells if c.method == "oracle"]
    lines, rows = [], []
    for ablation in dict.fromkeys(c.ablation for c in oracle):
        plain = [c for c in oracle if c.ablation == ablation and not c.redundant]
        short = [c for c in plain if c.auroc < 1.0]
        lines.append(f"{ablation}: {len(plain) - len(short)} of {len(plain)} at 1.000")
        rows += [[ablation, c.model, c.family, fixed(c.auroc), c.unidentifiable, c.weakest] for c in short]
    redundant = sorted({c.model for c in oracle if c.redundant})
    text = (
        "The exact oracle (every edge knocked out alone) on the identifiable truth of every model without "
        f"redundancy: {'; '.join(lines)}. Left out: the {len(redundant)} models with redundancy "
        f"({', '.join(redundant) or 'none'}), whose branches each keep the answer alone, so no single-edge "
        "knock-out can rank them. Each exception below names its weakest true edge: a tie at 0 is an edge "
        "whose receiver's input moves under the ablation while the answer does not (a saturated read, or "
        "a planted truth stated for counterfactual ablation read under another)."
    )
    return text, rows


CALIBRATION_HEADERS = ["ablation", "model", "family", "oracle AUROC", "unidentifiable", "why below 1"]


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


SCORED_APART = (
    "Truths per ablation: a true edge whose receiver computes the same with the edge ablated alone as without, "
    "on every pair, is unidentifiable under that ablation (probes.circuits.identifiable; e.g. Tracr's length "
    "and position reads, since a counterfactual partner has the same length and positions: the compiled models "
    "are not causal, so pairs cannot differ in length); it is scored apart, neither true nor false (out of "
    "AUROC, precision and recall) and counted in 'unidentifiable'. Certified: the method's own circuit checked "
    "against the full model on every input of the model's domain under that ablation (probes.circuits.certificate; "
    "Tracr: every input at the compiled length, each with a partner from the domain): the share of inputs whose "
    "answer (top output at every position) it keeps, mean over the models with a domain ('whole': all kept); '-': "
    "no enumerable domain declared (planted, gate and trained models)."
)
FAILS_TEXT = (
    f"AUROC on the identifiable truth < {FAILS_AUROC}, an identifiable true edge missing from its circuit, or "
    "its circuit changing an answer on the model's domain"
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
        "faithful circuit). Truth f: the true circuit's faithfulness under that ablation. " + SCORED_APART,
        "",
        "## Methods",
        "",
    ]
    lines += table_lines(SUMMARY_HEADERS, summary_rows(cells))
    text, rows = calibration(cells)
    lines += ["", "## The exact oracle as calibration", "", text, ""] + table_lines(CALIBRATION_HEADERS, rows)
    lines += ["", f"## Where each method fails ({FAILS_TEXT})", ""]
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
        f"<p class='note'>Made by <code>{escape(command)}</code>. {escape(inventory(models))} "
        f"{escape(SCORED_APART)} Click a column's header to sort.</p><h2>Methods</h2>"
        + table(SUMMARY_HEADERS, summary_rows(cells))
        + f"<h2>The exact oracle as calibration</h2><p>{escape(calibration(cells)[0])}</p>"
        + table(CALIBRATION_HEADERS, calibration(cells)[1])
        + f"<h2>Where each method fails</h2><p>{escape(FAILS_TEXT)}</p>"
        + table(["method", "ablation", "models", "which"], failures(cells))
        + relations
        + "<h2>Every cell</h2>"
        + table(CELL_HEADERS, [cell_row(c) for c in cells])
    )
    return page("Ground-truth leaderboard", body)
