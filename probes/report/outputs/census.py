"""The census rendered: the summary lines, census.md, census.html and their figures, and the
census folder they are written into (replaced only while unchanged). What they show is counted by
probes.census."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from common.cli import UsageError
from common.store import as_read_back, read_json
from probes.census import Census, GroupCensus, Share, part_words
from probes.circuits.mechanism_timeline import PREDICTABLE, MechanismTimeline
from tasks.training.sweeps import FAILED, check_signed, signed

TIMELINE_FIGURE = "census-timeline.png"  # written only when some group has a mechanism timeline
CENSUS_FILES = ("census.md", "census.png", "census.html", TIMELINE_FIGURE)  # census.json records their checksums


def share_text(share: Share) -> str:
    i = share.share
    return f"{share.count}/{i.n} = {i.value:.0%} [{i.low:.0%}, {i.high:.0%}]"


def not_counted(g: GroupCensus) -> str:
    parts = (
        [f"{g.failed} failed twice"]
        + ([f"{len(g.unreadable)} unreadable"] if g.unreadable else [])
        + ([f"{len(g.not_finished)} not finished"] if g.not_finished else [])
    )
    return ", ".join(parts)


def path_shares(g: GroupCensus) -> tuple[Share, ...]:
    """The runs named as a path, and, where some run's paths were not measured, those."""
    return (g.named, g.unpathed) if g.unpathed.count else (g.named,)


def summary_lines(census: Census) -> list[str]:
    lines = []
    for g in census.groups:
        h = g.heldout
        if not g.finished:
            lines.append(f"{g.model_name} @ {g.point}: no finished runs ({not_counted(g)})")
        else:
            lines.append(
                f"{g.model_name} @ {g.point}: {g.finished} runs ({not_counted(g)}); held-out median "
                f"{h['median']:.1%} (min {h['min']:.1%}); {share_text(g.unsolved)} unsolved "
                f"({g.never_learned.count} never learned, {g.partly_learned.count} partly); "
                f"{share_text(g.named)} named as a path"
                + (f" ({share_text(g.unpathed)} heads only: paths not measured)" if g.unpathed.count else "")
            )
        for s in g.circuits:
            lines += [f"  {share_text(s)}  {s.label}"] + [
                f"    {words}" for words in part_words(g.parts.get(s.label, {}))
            ]
        lines += [f"  {line}" for line in separation_words(g)]
        lines += [f"  unreadable, not counted: seed {seed}: {why}" for seed, why in g.unreadable]
        if g.timeline is not None:
            lines.append(f"  over training: {timeline_sentence(g.timeline)}")
            lines += [f"  timeline unreadable, not counted: seed {seed}: {why}" for seed, why in g.timeline.unreadable]
    return lines + [f"also found: {line}" for line in census.others]


def intro() -> str:
    from probes.settings import DEFAULT

    return (
        "Per model and grid point, over the runs of the sweep that finished: each share is count / finished runs "
        "with a 95% Wilson interval. A circuit is named as a path only as the report names it: a path patch, the "
        f"sender's write at every position or at one position, recovers at least {DEFAULT.path_claim:.0%} of the clean - counterfactual gap "
        "(0 = the path alone restores nothing, 1 = all of it); other runs are labelled by what was found. "
        "Unsolved: validation never solved (stopped stalled or out of budget); of those, never learned: held-out "
        f"accuracy within {DEFAULT.chance_margin:.0%} of the 50% of picking the answer or the foil at random (tasks "
        "that name foils), partly learned: the rest. A label names a mechanism, never positions or tokens: a run "
        "traced with a mechanism signature is labelled by it (heads by layer and measured role, MLPs by layer, "
        "edges between them; relabelling heads within a layer leaves it unchanged), so one mechanism over seeds "
        "is one row whatever its heads are numbered, and the heads playing each part are listed per seed; a run "
        "traced before signatures keeps its label by paths and heads. Held-out accuracy: the "
        "task's held-out split. Unreadable: a run whose files fail a check (listed with the reason, not "
        "counted)."
    )


def markdown(census: Census, figure: str | None, timeline_figure: str | None = None) -> str:
    out = ["# Circuit census", "", intro(), ""]
    if figure:
        out += [f"![mechanism share per grid point]({figure})", ""]
    for g in census.groups:
        h = g.heldout
        out += [
            f"## {g.model_name} @ {g.point}",
            "",
            f"grid values: {json.dumps(g.values) if g.values else '(none)'}; {g.finished} finished runs, "
            f"{not_counted(g)} (not counted)",
            "",
        ]
        out += [f"- unreadable, seed {seed}: {why}" for seed, why in g.unreadable] + ([""] if g.unreadable else [])
        if not g.finished:
            continue
        out += [
            f"held-out accuracy over seeds: mean {h['mean']['value']:.1%} [{h['mean']['low']:.1%}, "
            f"{h['mean']['high']:.1%}] (t 95%), min {h['min']:.1%}, quartiles {h['q1']:.1%} / "
            f"{h['median']:.1%} / {h['q3']:.1%}, max {h['max']:.1%}",
            "",
            "| circuit | runs | share [95% CI] | best path recovers (min / median / max) | seeds |",
            "|---|---|---|---|---|",
        ]
        for s in (*g.circuits, *path_shares(g), g.unsolved, g.never_learned, g.partly_learned):
            seeds = ", ".join(map(str, g.seeds.get(s.label, []))) or "-"
            path = " / ".join(f"{v:.0%}" for v in g.path_recovered.get(s.label, [])) or "-"
            i = s.share
            out.append(
                f"| {s.label} | {s.count}/{i.n} | {i.value:.1%} [{i.low:.1%}, {i.high:.1%}] | {path} | {seeds} |"
            )
        out.append("")
        out += parts_markdown(g)
        if g.timeline is not None:
            out += timeline_markdown(g.timeline, timeline_figure)
    if census.others:
        out += ["## Found but not counted", ""] + [f"- {line}" for line in census.others] + [""]
    return "\n".join(out)


def parts_markdown(g: GroupCensus) -> list[str]:
    """Per mechanism, which heads play each of its parts in which seeds (its signature's parts)."""
    out = []
    for s in g.circuits:
        words = part_words(g.parts.get(s.label, {}))
        if words:
            out += [f"Heads playing each part of **{s.label}**:", ""] + [f"- {w}" for w in words] + [""]
    told = separation_words(g)
    return out + (
        ["Rows merged and what separated the rest:", ""] + [f"- {line}" for line in told] + [""] if told else []
    )


def separation_words(g: GroupCensus) -> list[str]:
    """One line per row merged into another (profiles within tolerance), then per mechanism row after
    the most frequent: what told it apart (docs/census.md)."""
    told = [f"'{sep.label}' is told from '{sep.reference}' by {sep.text}" for sep in g.separations]
    return [m.text for m in g.merged] + told


def draw(census: Census, path: Path) -> None:
    """Stacked bars: per (point, model), each circuit label's share of the finished runs."""
    import pandas as pd

    from common.figure import Figure

    rows = [
        {"group": f"{g.model_name}\n{g.point}", "label": s.label, "share": s.share.value}
        for g in census.groups
        for s in g.circuits
    ]
    fig = Figure(figsize=(1.2 * len({row["group"] for row in rows}) + 3, 4.5))
    ax = fig.subplots()
    if rows:
        wide = pd.DataFrame(rows).pivot_table(index="group", columns="label", values="share", fill_value=0, sort=False)
        wide.plot(kind="bar", stacked=True, ax=ax, width=0.7, colormap="tab20")
        ax.legend(title="circuit", fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1))
    else:
        ax.text(0.5, 0.5, "no finished run could be counted (see census.md)", ha="center", transform=ax.transAxes)
    ax.set_ylabel("share of finished runs (0 = none, 1 = all)")
    ax.set_ylim(0, 1)
    ax.set_xlabel("")
    ax.tick_params(axis="x", rotation=0)
    ax.set_title("circuit share per model and grid point", fontsize=10)
    fig.savefig(path, dpi=110, format="png", bbox_inches="tight")


def census_html(census: Census, figure: Path | None, timeline_figure: Path | None = None) -> str:
    """census.md's tables as one self-contained page (sortable tables, the figure inline)."""
    from common.html import escape, image_uri, page, table

    body = [f'<p class="note">{escape(intro())}</p>']
    if figure is not None:
        body.append(f'<img alt="circuit share per model and grid point" src="{image_uri(figure)}">')
    for g in census.groups:
        h = g.heldout
        if not g.finished:
            body.append(
                f"<h2>{escape(g.model_name)} @ {escape(g.point)}</h2>"
                f'<p class="note">no finished runs ({escape(not_counted(g))})</p>'
            )
            continue
        body.append(
            f"<h2>{escape(g.model_name)} @ {escape(g.point)}</h2>"
            f'<p class="note">grid values: {escape(json.dumps(g.values) if g.values else "(none)")}; '
            f"{g.finished} finished runs, {g.failed} failed twice (not counted); held-out accuracy over seeds: "
            f"mean {h['mean']['value']:.1%} [{h['mean']['low']:.1%}, {h['mean']['high']:.1%}] (t 95%), "
            f"min {h['min']:.1%}, median {h['median']:.1%}, max {h['max']:.1%}</p>"
        )
        rows = [
            [
                s.label,
                s.count,
                s.share.n,
                f"{s.share.value:.1%}",
                f"[{s.share.low:.1%}, {s.share.high:.1%}]",
                " / ".join(f"{v:.0%}" for v in g.path_recovered.get(s.label, [])) or "-",
                ", ".join(map(str, g.seeds.get(s.label, []))) or "-",
            ]
            for s in (*g.circuits, *path_shares(g), g.unsolved)
        ]
        body.append(
            table(
                ["circuit", "runs", "of", "share", "95% CI", "best path recovers (min / median / max)", "seeds"], rows
            )
        )
        body += [
            f"<p>Heads playing each part of <b>{escape(label)}</b>:</p><ul>"
            + "".join(f"<li>{escape(words)}</li>" for words in part_words(parts))
            + "</ul>"
            for label, parts in g.parts.items()
            if parts
        ]
        told = separation_words(g)
        if told:
            body.append(
                "<p>Rows merged and what separated the rest:</p><ul>"
                + "".join(f"<li>{escape(t)}</li>" for t in told)
                + "</ul>"
            )
        if g.timeline is not None:
            body.append(timeline_html(g.timeline, timeline_figure))
    return page("Circuit census", "".join(body))


# ---- the mechanism over training (runs trained with weight snapshots) ----------------------------


def timeline_note(t: MechanismTimeline) -> str:
    return (
        f"Runs trained with a weight snapshot every {t.snapshot_steps} steps: at each snapshot, then at the final "
        "weights, the circuit is measured and labelled by the same rule as the final circuit above (search, path "
        "patches, the naming claim), on that step's own clean - counterfactual gap; a step whose gap is below the "
        "minimum to trace names no circuit. Agreement at a step: the share of seeds whose label there is their "
        "final label (0 = none, 1 = all), 95% Wilson interval over seeds; a seed whose training had already "
        "ended counts with its final weights, which agree by construction, so the share over the seeds still "
        f"training is shown beside it. Told from step X: agreement stays >= {PREDICTABLE:.0%} at every measured step "
        "from X on."
    )


def told_text(t: MechanismTimeline, step: int | None, training: bool) -> str:
    whose = "the seeds still training" if training else f"all {t.runs} seeds"
    if step is None:
        rows = [r for r in t.steps if (r.training if training else r.agree).n]
        best = max(rows, key=lambda r: (r.training if training else r.agree).value)
        i = best.training if training else best.agree
        return (
            f"on {whose}, not predictable before the end: agreement never stays >= {PREDICTABLE:.0%} (highest "
            f"{round(i.value * i.n)}/{i.n} = {i.value:.0%} [{i.low:.0%}, {i.high:.0%}] at step {best.step})"
        )
    row = t.at(step)
    assert row is not None  # a told-from step is one of the timeline's own steps (first_lasting)
    i = row.training if training else row.agree
    stopped = "" if training else f"; {row.stopped} of them had stopped training by then"
    return (
        f"on {whose}, told from step {step}: {round(i.value * i.n)}/{i.n} = {i.value:.0%} name their final "
        f"mechanism there (95% CI [{i.low:.0%}, {i.high:.0%}]{stopped})"
    )


def timeline_sentence(t: MechanismTimeline) -> str:
    if not t.runs:
        return (
            f"No timeline could be counted ({len(t.unreadable)} unreadable, {len(t.missing)} missing: "
            "rerun the sweep to trace their snapshots)"
        )
    settled, ended = sorted(t.settled.values()), sorted(t.final_steps.values())
    lead = sorted(t.final_steps[seed] - step for seed, step in t.first_traced.items())
    i = t.first_traced_final
    missing = f"; {len(t.missing)} run(s) trained with snapshots have no timeline.json" if t.missing else ""
    told = told_text(t, t.predictable_from, False)
    return (
        f"{told[0].upper()}{told[1:]}; {told_text(t, t.predictable_while_training, True)}. "
        f"At the first step whose gap was large enough to trace a circuit, {round(i.value * i.n)}/{i.n} = "
        f"{i.value:.0%} of the seeds named their final mechanism (95% CI [{i.low:.0%}, {i.high:.0%}]); that step "
        f"came a median {median(lead)} steps before the seed's training ended (range {lead[0]}-{lead[-1]}). "
        f"Each seed's label settles (stays its final one) at median step {median(settled)} (range "
        f"{settled[0]}-{settled[-1]}); training ended at median step {median(ended)} (range "
        f"{ended[0]}-{ended[-1]}){missing}"
    )


def median(values: list[int]) -> str:
    from statistics import median as middle

    return f"{middle(values):g}"


def timeline_rows(t: MechanismTimeline) -> list[list]:
    def cell(i) -> str:
        return f"{i.value:.0%} [{i.low:.0%}, {i.high:.0%}]" if i.n else "-"

    return [
        [
            r.step,
            f"{r.agreeing}/{r.agree.n}",
            cell(r.agree),
            r.stopped,
            f"{round(r.training.value * r.training.n) if r.training.n else 0}/{r.training.n}",
            cell(r.training),
        ]
        for r in t.steps
    ]


TIMELINE_HEADER = [
    "step",
    "seeds naming their final mechanism",
    "share [95% CI]",
    "of them stopped by then",
    "still training: naming it",
    "share [95% CI]",
]


def timeline_markdown(t: MechanismTimeline, figure: str | None) -> list[str]:
    out = ["### When the final mechanism can be told", "", timeline_note(t), "", f"**{timeline_sentence(t)}.**", ""]
    out += [f"- timeline unreadable, seed {seed}: {why}" for seed, why in t.unreadable] + ([""] if t.unreadable else [])
    if not t.runs:
        return out
    if figure:
        out += [f"![agreement with the final mechanism per step]({figure})", ""]
    out += ["| " + " | ".join(TIMELINE_HEADER) + " |", "|" + "---|" * len(TIMELINE_HEADER)]
    out += ["| " + " | ".join(map(str, row)) + " |" for row in timeline_rows(t)]
    return out + [""]


def timeline_html(t: MechanismTimeline, figure: Path | None) -> str:
    from common.html import escape, image_uri, table

    parts = [
        "<h3>When the final mechanism can be told</h3>",
        f'<p class="note">{escape(timeline_note(t))}</p>',
        f"<p><b>{escape(timeline_sentence(t))}.</b></p>",
    ]
    parts += [f'<p class="note">timeline unreadable, seed {seed}: {escape(why)}</p>' for seed, why in t.unreadable]
    if t.runs:
        if figure is not None:
            parts.append(f'<img alt="agreement with the final mechanism per step" src="{image_uri(figure)}">')
        parts.append(table(TIMELINE_HEADER, timeline_rows(t)))
    return "".join(parts)


def draw_timeline(census: Census, path: Path) -> None:
    """Per group with a timeline: agreement with the final mechanism against the step, with its
    95% Wilson band, over all seeds and over the seeds still training, beside the share of seeds
    that had stopped (whose agreement is by construction)."""
    from common.figure import Figure

    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.subplots()
    for g in census.groups:
        t = g.timeline
        if t is None or not t.runs:
            continue
        steps = [r.step for r in t.steps]
        (line,) = ax.plot(
            steps, [r.agree.value for r in t.steps], marker=".", label=f"{g.model_name} @ {g.point}: all {t.runs} seeds"
        )
        ax.fill_between(
            steps, [r.agree.low for r in t.steps], [r.agree.high for r in t.steps], color=line.get_color(), alpha=0.2
        )
        live = [r for r in t.steps if r.training.n]
        ax.plot(
            [r.step for r in live],
            [r.training.value for r in live],
            linestyle="--",
            color=line.get_color(),
            label=f"{g.model_name} @ {g.point}: seeds still training",
        )
        ax.plot(
            steps,
            [r.stopped / t.runs for r in t.steps],
            color=line.get_color(),
            alpha=0.45,
            linewidth=3,
            label=f"{g.model_name} @ {g.point}: share of seeds stopped (they agree by construction)",
        )
        if t.predictable_from is not None:
            ax.axvline(t.predictable_from, color=line.get_color(), linestyle=":", linewidth=1)
    ax.axhline(PREDICTABLE, color="grey", linewidth=0.8, linestyle=":")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("training step")
    ax.set_ylabel("share of seeds naming their final mechanism\n(0 = none, 1 = all; band: 95% Wilson)")
    ax.set_title(
        f"when the final mechanism can be told (dotted: {PREDICTABLE:.0%}, and the step it is told from)", fontsize=9
    )
    ax.legend(fontsize=7, loc="center right")
    fig.savefig(path, dpi=110, format="png", bbox_inches="tight")


# ---- the census folder: written whole, replaced only while unchanged ---------------------------

CENSUS_JSON = "census.json"
CENSUS_FIX = "move the census folder away (toylens never replaces a file it cannot prove it wrote unchanged)"


def check_census_folder(out: Path) -> None:
    """Refuse, before any work, to replace a census folder unless each of its files is the one the
    last census wrote (census.json records their SHA-256 and its own): a file recreated or edited
    since is the user's now."""
    from common.jsonfiles import sha256_file

    out = Path(out)
    present = [name for name in (CENSUS_JSON, *CENSUS_FILES) if (out / name).exists()]
    if not present:
        return
    if CENSUS_JSON not in present:
        raise UsageError(f"{out} holds {present[0]} but no {CENSUS_JSON} recording what toylens wrote; {CENSUS_FIX}")
    data = check_signed(
        read_json(out / CENSUS_JSON, CENSUS_FIX),
        {"groups": object, "others": list, "files": dict},
        str(out / CENSUS_JSON),
        CENSUS_FIX,
    )
    for name in present[1:]:
        if not (out / name).is_file() or sha256_file(out / name) != data["files"].get(name):
            raise UsageError(f"{out / name} was changed or replaced after the census wrote it; {CENSUS_FIX}")


def write_census(census: Census, out: Path) -> Path:
    from common.atomic import atomic_write, publish_folder, staging, write_json
    from common.jsonfiles import sha256_file
    from common.ownership import check_publishable

    out = Path(out)
    check_census_folder(out)
    check_publishable(out, "census folder")
    with staging(out) as staged:
        atomic_write(staged / "census.png", lambda temp: draw(census, Path(temp)))
        timeline = any(g.timeline is not None and g.timeline.runs for g in census.groups)
        if timeline:
            atomic_write(staged / TIMELINE_FIGURE, lambda temp: draw_timeline(census, Path(temp)))
        text = markdown(census, "census.png", TIMELINE_FIGURE if timeline else None) + "\n"
        atomic_write(staged / "census.md", lambda temp: Path(temp).write_text(text))
        page = census_html(census, staged / "census.png", staged / TIMELINE_FIGURE if timeline else None)
        atomic_write(staged / "census.html", lambda temp: Path(temp).write_text(page))
        files = {name: sha256_file(staged / name) for name in CENSUS_FILES if (staged / name).exists()}
        # Signed as it will be read back: JSON turns a dict's int keys (seeds) into strings, which sort otherwise.
        record = as_read_back(
            {"groups": [asdict(g) for g in census.groups], "others": list(census.others), "files": files}
        )
        write_json(staged / CENSUS_JSON, signed(record))
        publish_folder(staged, out)
    return out / "census.md"


def check_census_files(runs_dir: Path, out: Path | None = None) -> None:
    """Refuse, before any work (a sweep checks before training), a record the census would count
    that is malformed or that toylens did not write (a user's failed.json), or a census file it
    would replace that is the user's (a census.md toylens wrote, deleted, and saved again by hand)."""
    from common.ownership import not_ours, owned

    check_census_folder(Path(out or Path(runs_dir) / "census"))
    for path in sorted(Path(runs_dir).rglob(FAILED)) if Path(runs_dir).is_dir() else []:
        if not owned(path):
            raise not_ours(path)
