"""The markdown section for graded dictionaries: per run and hook, one table whose rows are the
planted variables and whose columns are the dictionaries (size d, sparsity k), each cell the best
feature's MCC and its decoder cosine; then the variables no feature recovers; then each traced
run's feature circuit beside its head/MLP-level edges."""

from __future__ import annotations

from itertools import groupby

from probes.features.grade import DictionaryGrade

SCALES = (
    "MCC: 1 = the feature fires exactly where the variable holds, 0 = chance. cos: cosine of that "
    "feature's decoder direction to the variable's mean-difference direction (1 = along it). linear: "
    "held-out MCC of a logistic-regression probe on the same activations (fit on half the graded positions, "
    "scored on the other half: is the variable linearly present at this hook?). FVU: variance the dictionary does not rebuild (0 = exact, 1 = the mean)."
)


def section(grades: list[DictionaryGrade], title: str = "Features", traced=(), made_by: str = "") -> list[str]:
    """`traced`: the runs' feature circuits (measure.TracedRun), after the tables."""
    lines = [f"## {title}", ""] + ([made_by, ""] if made_by else []) + [SCALES, ""]
    for run, of_run in groupby(grades, key=lambda g: g.run):
        for hook, of_hook in groupby(list(of_run), key=lambda g: (g.config.kind, g.config.hook_in, g.config.hook_out)):
            lines += hook_lines(run, hook, list(of_hook))
    for one in traced:
        lines += circuit_lines(one)
    return lines


def hook_lines(run: str, hook: tuple, grades: list[DictionaryGrade], heading: str = "###") -> list[str]:
    kind, hook_in, hook_out = hook
    where = hook_in if kind == "sae" else f"{hook_in} -> {hook_out}"
    first = grades[0]
    lines = [
        f"{heading} {run}: {kind} at {where}",
        "",
        f"Graded on {first.split} ({first.rows} positions); recovered = MCC >= {first.threshold:g}.",
        "",
        "| dictionary | FVU | L0 | dead | recovered |",
        "|---|---|---|---|---|",
    ]
    for g in grades:
        recovered = len(g.recoveries) - len(g.uncaptured)
        lines.append(
            f"| d={g.config.d_sae} k={g.config.k} | {g.fvu:.3f} | {g.l0:.1f} | {g.dead:.0%} | "
            f"{recovered} of {len(g.recoveries)} |"
        )
    lines += [
        "",
        "| variable | n+ / n | linear | " + " | ".join(f"d={g.config.d_sae} k={g.config.k}" for g in grades) + " |",
        "|---|---|---|" + "---|" * len(grades),
    ]
    for row in zip(*(g.recoveries for g in grades)):
        r = row[0]
        cells = " | ".join(f"{x.mcc:.2f} (f{x.feature}, cos {x.cosine:.2f}, AUROC {x.auroc:.2f})" for x in row)
        lines.append(f"| {r.variable} | {r.positives} / {r.counted} | {r.linear_mcc:.2f} | {cells} |")
    missed = never_recovered(grades)
    lines += [
        "",
        ("Recovered by no dictionary here: " + ", ".join(missed) + ".")
        if missed
        else "Every variable is recovered by at least one dictionary here.",
        "",
    ]
    return lines


def never_recovered(grades: list[DictionaryGrade]) -> list[str]:
    """Variables below the threshold in every dictionary, with whether they are linearly present."""
    out = []
    for row in zip(*(g.recoveries for g in grades)):
        if all(not x.mcc >= grades[0].threshold for x in row):
            present = "linearly present" if row[0].linear_mcc >= grades[0].threshold else "not linearly present"
            out.append(
                f"{row[0].variable} (best MCC {max(x.mcc for x in row):.2f}; {present}, linear {row[0].linear_mcc:.2f})"
            )
    return out


def circuit_lines(traced, top: int = 8, heading: str = "###") -> list[str]:
    """The feature circuit of one run (probes.features.measure.TracedRun) beside its head/MLP-level
    edges, both from the exact oracle on the same pairs."""
    c = traced.circuit
    gap = c.gap
    where = ", ".join(f"MLP{layer}" for layer in sorted(c.mlp_logits))
    lines = [
        f"{heading} {c.run}: feature circuit (transcoders {c.dictionaries[0]} at {where})",
        "",
        f"Measured on {c.pairs} held-out counterfactual pairs; metric: answer - foil logit at the scored "
        f"position, mean {c.clean_metric:.2f} clean and {c.other_metric:.2f} on the counterfactual (gap "
        f"{gap:.2f}). Edges are direct effects by exact patching (probes.features.circuit): a share is the "
        "edge's metric change over the gap (100% = patching that edge alone moves the metric all the way); "
        "a feature -> feature edge is the receiving feature's activation change, mean over the scored positions.",
        "",
        f"With every transcoder and its error node spliced in, the logits differ from the model's by at most "
        f"{c.spliced_error:.1e}. Without the error nodes the gap is {c.features_only_gap:.2f} "
        f"({share(c.features_only_gap, gap)} of the model's): what the transcoders alone carry.",
        "",
        f"Head/MLP-level edges (the oracle's, same pairs, top {len(c.head_edges)} by size):",
        "",
    ]
    lines += [f"- {edge}: {value:+.0%}" for edge, value in c.head_edges]
    lines += [
        "",
        "How each MLP -> logits edge splits into its features' and error node's edges (the sum need not "
        "equal the whole: the final norm is not linear):",
        "",
        "| MLP -> logits | oracle, whole MLP | its features, summed | its error node | features + error |",
        "|---|---|---|---|---|",
    ]
    logits = c.effect[:, -1]
    for layer, whole in sorted(c.mlp_logits.items()):
        parts = [i for i, node in enumerate(c.senders) if node.layer == layer]
        features = float(sum(logits[i] for i in parts if c.senders[i].feature is not None))
        error = float(sum(logits[i] for i in parts if c.senders[i].feature is None))
        lines.append(
            f"| MLP{layer} | {share(whole, gap)} | {share(features, gap)} | {share(error, gap)} | "
            f"{share(features + error, gap)} |"
        )
    lines += [
        "",
        f"Feature -> logits edges, top {top} by size (EAP: the gradient estimate of the same edge):",
        "",
        "| sender | exact | EAP | reads as (best planted variable, MCC on held-out) |",
        "|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in logit_rows(traced, top)]
    within = c.effect[:, :-1].nan_to_num(0.0)
    if within.numel():
        lines += [
            "",
            f"Feature -> feature edges, top {top} by size:",
            "",
            "| sender | receiver | activation change | sender reads as | receiver reads as |",
            "|---|---|---|---|---|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in feature_edge_rows(traced, top)]
    return lines + [""]


def feature_edge_rows(traced, top: int = 8) -> list[list[str]]:
    """The feature -> feature edges, largest first: sender, receiver, the receiver's activation
    change, what each reads as."""
    c = traced.circuit
    within = c.effect[:, :-1].nan_to_num(0.0)
    rows = []
    for flat in within.abs().flatten().argsort(descending=True)[:top].tolist() if within.numel() else []:
        s, r = divmod(flat, within.shape[1])
        rows.append(
            [
                str(c.senders[s]),
                str(c.receivers[r]),
                f"{float(within[s, r]):+.2f}",
                reads_as(traced, c.senders[s]),
                reads_as(traced, c.receivers[r]),
            ]
        )
    return rows


def logit_rows(traced, top: int = 8) -> list[list[str]]:
    """The feature -> logits edges, largest first: sender, exact share, EAP's, what it reads as."""
    c = traced.circuit
    logits = c.effect[:, -1]
    return [
        [
            str(c.senders[i]),
            share(float(logits[i]), c.gap),
            share(float(c.attribution[i]), c.gap),
            reads_as(traced, c.senders[i]),
        ]
        for i in logits.abs().argsort(descending=True)[:top].tolist()
    ]


def share(value: float, gap: float) -> str:
    return f"{value / gap:+.0%}" if gap else "n/a"


def reads_as(traced, node) -> str:
    if node.feature is None:
        return "(error node: what the transcoder does not rebuild)"
    name, mcc = traced.matches[node.layer][node.feature]
    return f"{name} ({mcc:.2f})"
