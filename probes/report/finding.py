"""The report's first screen, the finding: (a) the ladder, each model's held-out accuracy per seed
with its Wilson 95% interval, bag of words included; (b) for the simplest model that solves the
task, each circuit head's attention from the scored position over the tokens of one example and
of its counterfactual partner; (c) the mechanism in a few sentences of role words, each with its
number and a link to its evidence. Read from the typed results the report's parts measured
(probes.report.parts.MeasuredRun); report.md and report.html render the same Finding."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from probes.report.words import pct
from probes.settings import ReportSettings

FIGURE = "figures/finding-ladder.png"  # relative to the report folder


@dataclass(frozen=True)
class Rung:
    model_name: str
    seed: int
    heldout: float  # held-out accuracy, every held-out scored position
    low: float  # its Wilson 95% interval
    high: float
    n: int


@dataclass(frozen=True)
class HeadRow:
    head: str  # e.g. 'L0H0'
    role: str  # the signature's part it plays, in role words
    clean: tuple[float, ...]  # attention from the scored position onto each token of the example up to it
    corrupt: tuple[float, ...]  # ... of its counterfactual partner


@dataclass(frozen=True)
class Finding:
    ladder: tuple[Rung, ...]
    solver: str | None  # 'model seed k': the simplest model whose runs all solved, its first seed
    sentences: tuple[tuple[str, tuple | None], ...]  # (sentence, its evidence: (model, seed), None: the accuracy)
    clean_tokens: tuple[str, ...] = ()
    corrupt_tokens: tuple[str, ...] = ()
    heads: tuple[HeadRow, ...] = ()


def finding_of(measured: list, settings: ReportSettings) -> Finding | None:
    """None when no run measured its accuracy."""
    rungs = [ladder_rung(m) for m in measured if m.results.get("accuracy") is not None]
    if not rungs:
        return None
    order = list(dict.fromkeys(r.model_name for r in rungs))
    solved = [
        name
        for name in order
        if all(solves(m.results["accuracy"].accuracy) for m in measured if m.model_name == name)
        and any(getattr(m.results.get("runs"), "circuit", None) is not None for m in measured if m.model_name == name)
    ]
    run = next((m for m in measured if solved and m.model_name == solved[0] and m.results["runs"].circuit), None)
    if run is None:
        why = "no model's runs all solved the task with a traced circuit, so no mechanism is shown here"
        return Finding(tuple(rungs), None, ((why + ".", None),))
    analysis = run.results["runs"]
    title = f"{run.model_name} seed {run.seed}"
    heads = head_rows(analysis)
    return Finding(
        tuple(rungs),
        title,
        tuple(mechanism_sentences(run, analysis, settings)),
        tuple(analysis.pair.clean_tokens[: analysis.pair.position + 1]) if analysis.pair else (),
        tuple(analysis.pair.corrupt_tokens[: analysis.pair.position + 1]) if analysis.pair else (),
        heads,
    )


def solves(accuracy) -> bool:
    """Training stopped with validation solved; for a run not trained by toylens (no stop reason
    recorded), held-out accuracy at the default stop rule's accuracy instead."""
    from tasks.settings import StopReason, TrainSettings

    if accuracy.stop_reason:
        return accuracy.stop_reason == StopReason.SOLVED
    return accuracy.splits["heldout"].accuracy.value >= TrainSettings().stop_accuracy


def ladder_rung(measured) -> Rung:
    split = measured.results["accuracy"].accuracy.splits["heldout"]
    a = split.accuracy
    return Rung(measured.model_name, measured.seed, a.value, a.low, a.high, split.n)


def head_rows(analysis) -> tuple[HeadRow, ...]:
    """The circuit's heads (by the signature's parts where it has them), their attention on the pair."""
    from models.components import Head

    pair, mechanism = analysis.pair, analysis.mechanism
    if pair is None:
        return ()
    played = {h: part for part, names in (mechanism.heads if mechanism else ()) for h in names}
    names = list(played) or [str(h) for h in analysis.circuit.heads]
    rows = []
    for name in sorted(names, key=lambda n: (Head.parse(n).layer, Head.parse(n).head)):
        h = Head.parse(name)
        rows.append(
            HeadRow(
                name,
                played.get(name, "not in the signature"),
                tuple(round(float(v), 2) for v in pair.clean[h.layer, h.head, : pair.position + 1]),
                tuple(round(float(v), 2) for v in pair.corrupt[h.layer, h.head, : pair.position + 1]),
            )
        )
    return tuple(rows)


def mechanism_sentences(run, analysis, settings: ReportSettings) -> list[tuple[str, tuple | None]]:
    """Two or three sentences in role words, each with its number and its evidence's anchor."""
    from probes.report.story import circuit_line

    anchor = (run.model_name, run.seed)
    split = run.results["accuracy"].accuracy.splits["heldout"]
    out: list[tuple[str, tuple | None]] = [
        (
            f"The simplest model that solves the task is {run.model_name} (seed {run.seed}: held-out accuracy "
            f"{pct(split.accuracy.value, 1)}, Wilson 95% [{pct(split.accuracy.low)}, {pct(split.accuracy.high)}], "
            f"n = {split.n}).",
            None,
        )
    ]
    mechanism = analysis.mechanism
    if mechanism is not None and mechanism.heads:
        profiles = dict(mechanism.profiles)
        parts = []
        for part, heads in mechanism.heads:
            masses = dict(profiles.get(part, ()))
            parts.append(f"{part} ({', '.join(heads)}; {role_numbers(part, masses)})")
        joined = f"; they connect as {mechanism.text}" if mechanism.edges else ""
        out.append((f"Its heads by role: {'; '.join(parts)}{joined}.", anchor))
    out.append((circuit_line(analysis, settings), anchor))
    return out


def drawn_finding(measured: list, settings: ReportSettings, out: Path) -> Finding | None:
    """finding_of, its ladder drawn at `out` / FIGURE."""
    finding = finding_of(measured, settings)
    if finding is not None:
        draw_ladder(finding, Path(out) / FIGURE)  # its atomic write makes the folder (a full disk: one line)
    return finding


def role_numbers(part: str, masses: dict) -> str:
    """The masses a part's role word was read from: each group's largest for a role that depends
    on the group, else the largest of all (said to be no named role's where the part has none);
    for a role set, its profile inside it ('decaying from inside_0: inside_0 0.46, ...')."""
    from probes.circuits.roles import region_profile

    groups: dict[str, tuple[str, float]] = {}
    for key, mass in masses.items():
        if key.startswith("(") and " / " in part:
            group = key[1 : key.index(")")]
            if mass > groups.get(group, ("", -1.0))[1]:
                groups[group] = (key[key.index(")") + 2 :], mass)
    if groups:
        return " / ".join(f"{role} {mass:.2f} ({group})" for group, (role, mass) in sorted(groups.items()))
    top = max(((r, m) for r, m in masses.items() if not r.startswith("(")), key=lambda item: item[1], default=None)
    if top is None:
        return "no profile stored"
    inside = region_profile(top[0], masses)  # a role set's profile inside it, slot by slot
    return (
        f"{top[0]} {top[1]:.2f}"
        + (f", {inside}" if inside else "")
        + (", the largest, not twice every rival" if "unnamed role" in part else "")
    )


def draw_ladder(finding: Finding, path: Path) -> None:
    """Each run's held-out accuracy with its Wilson 95% interval, models in the family's order."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from probes.report.figures import save

    order = list(dict.fromkeys(r.model_name for r in finding.ladder))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 + 1.3 * len(order)), 3.2))
    for x, name in enumerate(order):
        rungs = [r for r in finding.ladder if r.model_name == name]
        for i, r in enumerate(rungs):
            offset = x + (i - (len(rungs) - 1) / 2) * 0.12
            ax.errorbar(offset, r.heldout, yerr=[[r.heldout - r.low], [r.high - r.heldout]], fmt="o", color="C0")
    ax.set_xticks(range(len(order)), order, rotation=20, ha="right")
    ax.set_xlim(-0.5, len(order) - 0.5)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("held-out accuracy")
    ax.set_title("held-out accuracy, a dot per seed (Wilson 95%)", fontsize=9)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)


# ---- rendering --------------------------------------------------------------------------------

INTRO = (
    "Held-out accuracy of every run (a dot per seed, its Wilson 95% interval as the bar; 0.5 is picking "
    "the answer or the foil at random where the task names foils), then, for the simplest model that "
    "solves the task, what its circuit's heads read, then its mechanism."
)


def attention_rows(finding: Finding, corrupt: bool) -> tuple[list[str], list[list[str]]]:
    """Header and rows of one sentence's table: a head per row, a token per column."""
    tokens = finding.corrupt_tokens if corrupt else finding.clean_tokens
    header = ["head (role)", *[f"{i} {t}" for i, t in enumerate(tokens)]]
    rows = []
    for h in finding.heads:
        masses = h.corrupt if corrupt else h.clean
        top = max(range(len(masses)), key=masses.__getitem__) if masses else -1
        rows.append(
            [f"{h.head} ({h.role})", *[f"**{m:.2f}**" if i == top else f"{m:.2f}" for i, m in enumerate(masses)]]
        )
    return header, rows


def md_anchor(run: tuple | None) -> str:
    """report.md's heading for a run's story ('### model seed k'), or the accuracy section."""
    return "accuracy-shuffle-test-and-run-health" if run is None else f"{run[0]}-seed-{run[1]}".lower()


def html_anchor(run: tuple | None) -> str:
    """report.html's panel for a run (assets/report.js reads '#run=ID'), or the summary."""
    from probes.report.outputs.html_data import run_id

    return "summary" if run is None else f"run={run_id(*run)}"


def finding_markdown(finding: Finding | None) -> list[str]:
    from probes.report.render import md_table

    if finding is None:
        return []
    text = ["## The finding", "", INTRO, "", f"![held-out accuracy per model and seed]({FIGURE})", ""]
    text += [f"- {s} ([evidence](#{md_anchor(run)}))" for s, run in finding.sentences] + [""]
    if finding.heads:
        text += [
            f"What each circuit head of {finding.solver} reads: its attention from the scored position over "
            "the tokens of one held-out example and of its counterfactual partner (1 = all of the head's "
            "attention on that token; the largest in bold).",
            "",
        ]
        for corrupt, name in ((False, "Example"), (True, "Its counterfactual partner")):
            header, rows = attention_rows(finding, corrupt)
            text += [f"{name}:", "", md_table(header, rows), ""]
    return text


def finding_html(finding: Finding | None, figure: Path | None) -> str:
    from common.html import escape, image_uri, table

    if finding is None:
        return ""
    body = [f'<h2 id="finding">The finding</h2><p class="note">{escape(INTRO)}</p>']
    if figure is not None and figure.is_file():
        body.append(f'<img alt="held-out accuracy per model and seed" src="{image_uri(figure)}">')
    body.append(
        "<ul>"
        + "".join(
            f'<li>{escape(s)} <a href="#{escape(html_anchor(run))}">evidence</a></li>' for s, run in finding.sentences
        )
        + "</ul>"
    )
    for corrupt, name in ((False, "Example"), (True, "Its counterfactual partner")):
        if finding.heads:
            header, rows = attention_rows(finding, corrupt)
            body.append(f'<p class="note">{escape(name)}: attention from the scored position</p>')
            body.append(table(header, [[cell.replace("**", "") for cell in row] for row in rows]))
    return f'<section id="finding-block" class="panel">{"".join(body)}</section>'
