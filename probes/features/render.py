"""The markdown section for graded dictionaries: per run and hook, one table whose rows are the
planted variables and whose columns are the dictionaries (size d, sparsity k), each cell the best
feature's MCC and its decoder cosine; then the variables no feature recovers."""

from __future__ import annotations

from itertools import groupby

from probes.features.grade import DictionaryGrade

SCALES = ("MCC: 1 = the feature fires exactly where the variable holds, 0 = chance. cos: cosine of that "
          "feature's decoder direction to the variable's mean-difference direction (1 = along it). linear: MCC "
          "of the mean-difference direction itself, thresholded halfway between the classes (is the variable "
          "linearly present at this hook?). FVU: variance the dictionary does not rebuild (0 = exact, 1 = the mean).")


def section(grades: list[DictionaryGrade], title: str = "Features") -> list[str]:
    lines = [f"## {title}", "", SCALES, ""]
    for run, of_run in groupby(grades, key=lambda g: g.run):
        for hook, of_hook in groupby(list(of_run), key=lambda g: (g.config.kind, g.config.hook_in, g.config.hook_out)):
            lines += hook_lines(run, hook, list(of_hook))
    return lines


def hook_lines(run: str, hook: tuple, grades: list[DictionaryGrade]) -> list[str]:
    kind, hook_in, hook_out = hook
    where = hook_in if kind == "sae" else f"{hook_in} -> {hook_out}"
    first = grades[0]
    lines = [f"### {run}: {kind} at {where}", "",
             f"Graded on {first.split} ({first.rows} positions); recovered = MCC >= {first.threshold:g}.", "",
             "| dictionary | FVU | L0 | dead | recovered |", "|---|---|---|---|---|"]
    for g in grades:
        recovered = len(g.recoveries) - len(g.uncaptured)
        lines.append(f"| d={g.config.d_sae} k={g.config.k} | {g.fvu:.3f} | {g.l0:.1f} | {g.dead:.0%} | "
                     f"{recovered} of {len(g.recoveries)} |")
    lines += ["", "| variable | n+ / n | linear | " + " | ".join(f"d={g.config.d_sae} k={g.config.k}" for g in grades) + " |",
              "|---|---|---|" + "---|" * len(grades)]
    for row in zip(*(g.recoveries for g in grades)):
        r = row[0]
        cells = " | ".join(f"{x.mcc:.2f} (f{x.feature}, cos {x.cosine:.2f}, AUROC {x.auroc:.2f})" for x in row)
        lines.append(f"| {r.variable} | {r.positives} / {r.counted} | {r.linear_mcc:.2f} | {cells} |")
    missed = never_recovered(grades)
    lines += ["", ("Recovered by no dictionary here: " + ", ".join(missed) + ".") if missed
              else "Every variable is recovered by at least one dictionary here.", ""]
    return lines


def never_recovered(grades: list[DictionaryGrade]) -> list[str]:
    """Variables below the threshold in every dictionary, with whether they are linearly present."""
    out = []
    for row in zip(*(g.recoveries for g in grades)):
        if all(not x.mcc >= grades[0].threshold for x in row):
            present = "linearly present" if row[0].linear_mcc >= grades[0].threshold else "not linearly present"
            out.append(f"{row[0].variable} (best MCC {max(x.mcc for x in row):.2f}; {present}, linear {row[0].linear_mcc:.2f})")
    return out
