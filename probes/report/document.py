"""The circuit report rendered: the accuracy part and the circuit part (each run's tables), the
header naming every basis and scale, report.md and report.json (every number the markdown shows,
and the ReportSettings they were measured with). Measuring lives in probes.report.run_analysis and the
other parts (probes.report.parts lists them); this only renders."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from common.atomic import atomic_write, write_json
from models.components import HeadSet
from probes.ablation import Ablation
from probes.report.parts import Section, jsonable
from probes.report.render import md_table
from probes.settings import ReportSettings
from probes.report.words import describe, pct, seed_agreement, shuffle_text, token_share

if TYPE_CHECKING:
    from probes.accuracy import RunAccuracy


# ---- the accuracy part ---------------------------------------------------------------------


@dataclass(frozen=True)
class AccuracyEntry:
    accuracy: RunAccuracy
    vocabulary: list[str]


def measure_accuracy_part(context) -> AccuracyEntry:
    return AccuracyEntry(context.accuracy, context.vocabulary)


def render_accuracy(entries: list[AccuracyEntry], out: Path, settings: ReportSettings) -> Section:
    from probes.accuracy import model_accuracy
    from probes.report.render import health_lines, health_text

    names = list(dict.fromkeys(e.accuracy.model_name for e in entries))
    vocabulary = entries[0].vocabulary
    models = [
        model_accuracy([e.accuracy for e in entries if e.accuracy.model_name == name], vocabulary) for name in names
    ]
    rows = []
    for m in models:
        for r in m.runs:
            split = r.splits["heldout"]
            rows.append(
                [
                    m.model_name,
                    r.seed,
                    f"{split.accuracy.value:.1%} [{split.accuracy.low:.0%}, {split.accuracy.high:.0%}]",
                    split.n,
                    pct(split.foil_rate, 1),
                    f"{r.splits['train'].accuracy.value:.1%}",
                    shuffle_text(r.shuffle_max_logit_change),
                    health_text(m, r.seed),
                ]
            )
    health = [line.strip() for line in health_lines(models)]
    text = (
        "Held-out accuracy on every held-out scored position (n per run), as measured after training; "
        "the shuffle test permutes the prefix of 256 evenly spread held-out examples 4 times.\n\n"
        + md_table(
            [
                "model",
                "seed",
                "held-out (Wilson 95%)",
                "n",
                "wrong answer (foil)",
                "train",
                "shuffle max abs dlogit",
                "health",
            ],
            rows,
        )
        + "".join(f"\n\n{line}" for line in health)
    )
    from probes.report.summary import accuracy_cells

    return Section(
        "Accuracy, shuffle test and run health",
        text,
        health,
        jsonable(models),
        cells=accuracy_cells(models),
        notes=health,
    )


# ---- the circuit part ----------------------------------------------------------------------


def ablation_table(analysis) -> str:
    """Rows: none, each head, each whole layer, then each MLP; a column per ablation method."""
    methods = list(analysis.ablations)
    results = {
        method: [*analysis.ablations[method], *(analysis.mlp_ablations or {}).get(method, [])] for method in methods
    }
    by_target = {method: {(r.heads, r.mlps): r for r in results[method]} for method in methods}
    targets = [(r.heads, r.mlps) for r in results[Ablation.MEAN]]
    groups = sorted(by_target[Ablation.MEAN][(), ()].by_group)
    rows = []
    for heads in targets:
        row = [by_target[Ablation.MEAN][heads].label]
        for method in methods:
            r = by_target[method][heads]
            row.append(f"{pct(r.accuracy)} / {r.logit_diff:+.2f} / {pct(r.top_share)}")
        row += [pct(by_target[Ablation.MEAN][heads].by_group[g]["accuracy"]) for g in groups]
        rows.append(row)
    headers = (
        ["ablated"] + [f"{m}: acc / logit diff / top prediction" for m in methods] + [f"mean, {g}" for g in groups]
    )
    return md_table(headers, rows)


def patching_table(analysis, top: int = 8) -> str:
    """The strongest single head outputs; cells that cannot change a scored logit (never run, so
    exactly the counterfactual run) are left out rather than shown as a 0% row."""
    p = analysis.patching
    recovered = p.recovered(p.head_out)
    cells = [
        (float(recovered[l, pos, h]), l, pos, h)
        for l in range(recovered.shape[0])
        for pos in range(recovered.shape[1])
        for h in range(recovered.shape[2])
        if float(p.head_out[l, pos, h]) != p.corrupt.metric
    ]
    cells.sort(key=lambda c: -abs(c[0]))
    rows = [
        [f"L{l}H{h}", analysis.labels[pos], pct(value), pct(float(p.restored_share(p.head_out_restored[l, pos, h])))]
        for value, l, pos, h in cells[:top]
    ]
    return md_table(["head", "position", "recovered", "answers restored"], rows)


def path_table(patches, patching, top: int = 10) -> str:
    patches = sorted(patches, key=lambda x: -abs(x.recovered))[:top]
    rows = [
        [
            p.sender,
            p.where,
            p.receiver,
            p.component.upper(),
            pct(p.recovered),
            pct(patching.restored_share(p.restored)),
            f"{p.attention_moved:.2f}",
        ]
        for p in patches
    ]
    return md_table(
        [
            "sender",
            "at",
            "receiver",
            "input",
            "recovered",
            "answers restored",
            "receiver attention moved (TV: 0 = the counterfactual run's, 1 = disjoint)",
        ],
        rows,
    )


def composition_table(analysis) -> str:
    c = analysis.composition
    n_layers, n_heads = analysis.spec.n_layers, analysis.spec.n_heads
    rows = []
    for sl in range(n_layers):
        for sh in range(n_heads):
            for rl in range(sl + 1, n_layers):
                for rh in range(n_heads):
                    rows.append(
                        [f"L{sl}H{sh}", f"L{rl}H{rh}"]
                        + [
                            f"{c.score(k, (sl, sh), (rl, rh)):.3f} ({c.ratio(k, (sl, sh), (rl, rh)):.1f}x)"
                            for k in "QKV"
                        ]
                    )
    baseline = ", ".join(f"{k} {c.baseline_mean[k]:.3f} +- {c.baseline_std[k]:.3f}" for k in "QKV")
    return (
        md_table(["sender", "receiver", "Q (x random)", "K (x random)", "V (x random)"], rows)
        + f"\n\nRandom-weight baseline ({c.baseline_draws} draws): {baseline}."
    )


def circuit_section(analysis, settings: ReportSettings) -> str:
    c = analysis.circuit
    f = c.faithfulness
    trace = "; ".join(
        f"{HeadSet(heads)} -> {normalised:.2f} ({pct(recovered)})" for heads, recovered, normalised in c.trace
    )
    knockout = ", ".join(f"{h} {r.normalised:.2f} ({pct(r.recovered)})" for h, r in c.knockout.items())
    ablated = analysis.circuit_ablation
    groups = ", ".join(f"{g} {pct(v['accuracy'])}" for g, v in ablated.by_group.items())
    return "\n".join(
        [
            f"- nodes: {', '.join(c.describe())}"
            + (" (every head output that can reach the scored logits)" if c.upstream else ""),
            f"- faithfulness (outside mean-ablated, clean input): {f.normalised:.2f} null scale "
            f"({pct(f.recovered)} of the gap; metric {f.metric:+.2f}, empty circuit {f.empty:+.2f}, clean {f.clean:+.2f}, "
            f"counterfactual {f.corrupt:+.2f}); answer beats foil at {pct(f.accuracy)} of scored positions"
            + ("; 1 by construction" if c.upstream else ""),
            f"- heads at every position: {c.head_faithfulness.normalised:.2f} null scale ({pct(c.head_faithfulness.recovered)})",
            f"- knockout (full model minus one head), null scale (gap share): {knockout}",
            f"- search trace, null scale (gap share; the search stops at {pct(settings.circuit_target)} of the gap): {trace}",
            f"- mean-ablating the circuit's heads on the ablation rows: {pct(ablated.accuracy)} accuracy, "
            f"{token_share(ablated, analysis.vocabulary)}, logit difference {ablated.logit_diff:+.2f} (per group: {groups})",
        ]
    )


def run_section(analysis, settings: ReportSettings) -> str:
    title = f"### {analysis.model_name} seed {analysis.seed}"
    words = describe(analysis, settings, analysis.vocabulary)
    if analysis.patching is None:
        return f"{title}\n\n{words}"
    b, p = analysis.basis, analysis.patching
    parts = [title, "", words, ""]
    if analysis.figure:
        parts += [f"![{analysis.model_name} seed {analysis.seed}]({analysis.figure})", ""]
    parts += [
        f"Head ablation on {b.ablation} of {b.heldout} held-out examples (mean and resample over "
        f"{b.reference} of {b.train} training rows); accuracy / mean answer - foil logit / share of the "
        "most common prediction:",
        "",
        ablation_table(analysis),
        "",
    ]
    patched = (
        f"Activation patching on {p.pairs} held-out pairs ({p.metric}; clean {p.clean.metric:+.2f}, "
        f"counterfactual {p.corrupt.metric:+.2f}; the answer beats the foil at {pct(p.clean.restored)} / "
        f"{pct(p.corrupt.restored)} of scored positions)"
    )
    if analysis.circuit is None:
        # Not traced because the gap is too small (analysis.note): no head's share of it is shown.
        return "\n".join(parts + [patched + ".", "", analysis.note])
    parts += [patched + ", strongest single head outputs:", "", patching_table(analysis), ""]
    if analysis.paths:
        parts += [
            f"Path patches, sender at every position (the summary names a path when this patch or the "
            f"sender's best single position below recovers {settings.path_claim:.0%} of the gap):",
            "",
            path_table(analysis.paths, p),
            "",
        ]
    if analysis.path_positions:
        parts += [
            "Path patches between circuit heads, sender at one position:",
            "",
            path_table(analysis.path_positions, p),
            "",
        ]
    if analysis.composition is not None:
        parts += ["Composition scores:", "", composition_table(analysis), ""]
    return "\n".join(parts + ["Circuit:", "", circuit_section(analysis, settings)])


def run_json(analysis, settings: ReportSettings) -> dict:
    out = jsonable(dataclasses.replace(analysis, vocabulary=None, mechanism=None))
    out["mechanism"] = None if analysis.mechanism is None else analysis.mechanism.to_dict()  # its stored form
    out["summary"] = describe(analysis, settings, analysis.vocabulary)
    if analysis.patching is not None:
        p = analysis.patching
        for name in ("head_out", "head_all", "resid_pre"):
            out["patching"][f"{name}_recovered"] = jsonable(p.recovered(getattr(p, name)))
    return out


def render_circuits(analyses: list, out: Path, settings: ReportSettings) -> Section:
    from probes.report.summary import circuit_across_seeds, circuit_cells

    agreement = seed_agreement(analyses, settings)
    summary = [describe(a, settings, a.vocabulary) for a in analyses] + agreement
    text = "\n\n".join([*(run_section(a, settings) for a in analyses), *agreement])
    return Section(
        "Runs",
        text,
        summary,
        [run_json(a, settings) for a in analyses],
        cells={(a.model_name, a.seed): circuit_cells(a, settings) for a in analyses},
        across_seeds=circuit_across_seeds(analyses, settings),
    )


# ---- the report as a whole -----------------------------------------------------------------

APPENDIX = "## Appendix"  # report.md's story ends here


def header(analysis, settings: ReportSettings) -> str:
    """Where every number comes from and what its scale means; `analysis`: a traced RunAnalysis."""
    lines = [
        "Every number is measured per run on the examples named here (each run's section repeats them); "
        "the thresholds are ReportSettings, recorded in report.json."
    ]
    if analysis is not None:
        b = analysis.basis
        lines += [
            f"- Ablation (every ablation table and sentence): {b.ablation} of {b.heldout} held-out examples "
            f"(evenly spread; all when the split is smaller than {settings.ablation_rows}); mean and resample "
            f"ablation replace a head's output by its per-position mean over (a row of) {b.reference} of {b.train} "
            "training examples. Embeddings are never ablated; MLPs are mean- and zero-ablated in the section "
            "'MLPs and where the answer appears'.",
            f"- Patching, path patching, circuit search, faithfulness and knockouts: {b.pairs} evenly spread held-out "
            f"counterfactual pairs (clean = example, counterfactual = its partner; metric: {analysis.patching.metric}).",
            "- Gap scale ('recovered', '% of the gap'): (m - m(counterfactual)) / (m(clean) - m(counterfactual)); "
            "0 = the counterfactual run, 1 = the clean run. Used for patches into the counterfactual run. "
            "'Answers restored' is the same scale for the share of scored positions whose answer beats the foil: "
            "0 = the counterfactual run's own rate, 1 = the clean run's.",
            "- Null scale (faithfulness, knockouts, search trace): (m(C) - m(empty)) / (m(clean) - m(empty)), as "
            "the MIB benchmark normalises; the empty circuit mean-ablates every head on the clean input, so 0 = "
            "the signal is gone and 1 = the full model. On the gap scale a model that has lost the signal reads "
            "~50% when the counterfactual mirrors the clean input, so verdicts on heads and blocks read the null "
            "scale or the logit difference left; the circuit search alone stops on the gap scale, at "
            f"{pct(settings.circuit_target)}, far above that ~50%. A circuit "
            "that keeps every head output able to reach the scored logits has faithfulness 1 by construction; "
            "the report says so instead of reporting it as a finding.",
        ]
    lines += [
        f"- Verdicts: a block or head is 'needed' when ablating it loses at least "
        f"{pct(settings.needed_accuracy_drop)} accuracy or keeps less than {pct(settings.needed_logit_share)} of "
        f"the answer - foil logit difference, 'unused' when it loses at most {pct(settings.unused_accuracy_drop)} "
        f"and keeps at least {pct(settings.unused_logit_share)} of it, else 'partly used'. A head-to-head path is "
        f"named when its path patch, the sender's write at every position or at one position, recovers at least "
        f"{pct(settings.path_claim)} of the gap; a head is "
        f"described at the positions where patching its output recovers at least {pct(settings.matters)} of it.",
        f"- Run health: a run predicting one token at {pct(settings.collapse_top_share)} or more of held-out "
        f"scored positions, or whose train accuracy is below {settings.collapse_train_ratio:g} x its peers' "
        "median, is flagged as collapsed and model means are shown with and without it; a run more than "
        f"{pct(settings.chance_margin)} below the 50% of picking the answer or the foil at random, or predicting "
        f"neither at {pct(settings.neither_share)} of them, is flagged too.",
    ]
    return "\n".join(lines)


def markdown(task: str, sections: dict, stories: list, analysis, settings: ReportSettings, finding=None) -> str:
    """The finding (probes.report.finding), the summary tables, the bases, each run's story
    (probes.report.story), then the parts' sections as the appendix: a reader stops before it;
    every number stays in it."""
    from probes.report.finding import finding_markdown
    from probes.report.story import story_markdown
    from probes.report.summary import markdown_lines, summary_of

    text = [
        f"# Circuit report: {task}",
        "",
        *finding_markdown(finding),
        "## Summary",
        "",
        "One table per model, a row per seed (each run's mechanism and evidence are in its section below).",
        "",
        *markdown_lines(summary_of(sections)),
        "",
        "## Bases and scales",
        "",
        header(analysis, settings),
        "",
    ]
    if stories:
        text += ["## Mechanisms", "", story_markdown(stories), ""]
    text += [
        APPENDIX,
        "",
        "The parts' sections in full: every table, every position's detail, each run's whole sentence.",
        "",
    ]
    for section in sections.values():
        text += [f"## {section.title}", "", section.markdown, ""]
    return "\n".join(text)


def write_report(measured: list, sections: dict, out: Path, task: str, settings: ReportSettings) -> Path:
    """report.md and report.json in `out` from the rendered parts (probes.report.parts.render_parts)."""
    out = Path(out)
    analysis = next(
        (m.results["runs"] for m in measured if getattr(m.results.get("runs"), "patching", None) is not None), None
    )
    write_json(
        out / "report.json",
        {
            "task": task,
            "settings": dataclasses.asdict(settings),
            "summary": [line for s in sections.values() for line in s.summary],
            **{key: section.data for key, section in sections.items()},
        },
    )
    from probes.report.story import run_story

    from probes.report.finding import drawn_finding

    stories = [run_story(m, settings) for m in measured if m.results.get("runs") is not None]
    text = markdown(task, sections, stories, analysis, settings, drawn_finding(measured, settings, out))
    atomic_write(out / "report.md", lambda path: Path(path).write_text(text))
    return out / "report.md"
