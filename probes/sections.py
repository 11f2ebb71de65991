"""Extra report sections that appear when the runs' data call for them, never by task name:
head roles when the scored answers are induction-predictable, training dynamics when runs kept
weight snapshots. `python -m probes.circuit report` appends whatever `report_sections` returns."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from probes.report import jsonable, md_table

INDUCTION_SHARE = 0.5   # head roles are ranked when at least this share of answers is induction-predictable


@dataclass(frozen=True)
class Section:
    title: str
    markdown: str
    summary: list[str]      # lines for the printed summary
    data: dict              # JSON-able numbers behind the markdown


def pct(value: float) -> str:
    return f"{value:.1%}"


def head_roles_section(runs, out: Path) -> Section | None:
    from probes.dynamics import snapshot_point
    from probes.heads import induction_share, run_heads
    from probes.patching import spread_subset

    first = runs[0].batches()["heldout"]
    share = induction_share(first)
    if share < INDUCTION_SHARE:
        return None
    position_rows, role_rows, path_rows, summary, data = [], [], [], [], {"induction_share": share, "runs": []}
    for run in runs:
        model, heldout = run.load_model(), spread_subset(run.batches()["heldout"], 256)
        final = snapshot_point(model, heldout, int(run.metrics.get("steps", 0)))
        position_rows.append([run.model_name, run.seed, pct(final.scored_accuracy), f"{final.scored_loss:.2f}",
                              pct(final.other_accuracy), f"{final.other_loss:.2f}"])
        entry = {"model": run.model_name, "seed": run.seed, "final": asdict(final)}
        if run.config.get("spec", {}).get("attention") == "softmax":
            heads = run_heads(run)
            report = heads.report
            for role in ("previous_token", "induction", "duplicate_token", "copying", "direct_logit"):
                evidence = report.roles[role]
                top = evidence.ranking[0]
                role_rows.append([run.model_name, run.seed, role.replace("_", " "),
                                  ", ".join(f"{h} {evidence.scores[h]:.2f}" for h in evidence.ranking[:3]),
                                  f"{top}: {pct(report.ablated_accuracy[top])}",
                                  ", ".join(evidence.heads) or "none",
                                  "yes" if evidence.top_is_most_harmful else "no"])
            for p in heads.paths:
                path_rows.append([run.model_name, run.seed, f"{p.sender} -> {p.receiver}", p.component,
                                  pct(p.recovered), f"{p.attention_recovered:.2f}"])
            line = (f"{run.model_name} seed {run.seed}: previous-token head(s) {', '.join(heads.previous) or 'none'}, "
                    f"induction head(s) {', '.join(heads.induction) or 'none'} (baseline {pct(report.baseline_accuracy)}"
                    + "".join(f", ablating {h} -> {pct(report.ablated_accuracy[h])}"
                              for h in heads.previous + heads.induction) + ")")
            for component in ("k", "q", "v"):
                best = max((p for p in heads.paths if p.component == component), key=lambda p: p.recovered,
                           default=None)
                if best is not None:
                    line += f"; best {component.upper()} edge {best.sender} -> {best.receiver} recovers {pct(best.recovered)}"
            summary.append(line)
            entry["heads"] = asdict(heads)
        data["runs"].append(entry)
    parts = [f"{pct(share)} of scored answers are the unique token that followed an earlier copy of the "
             "current token, so heads are ranked for induction roles. Scores: attention on the role's "
             "target (previous token, earlier copy, token after the earlier copy) over rows that have one; "
             "copying = eigenvalue positivity of W_E W_OV W_U; direct logit = the head's direct effect on the "
             "answer logit. Each ranking is checked by mean-ablating heads on held-out sequences; a role's "
             "heads are the fewest top-ranked heads of its layer that cost 90% of ablating the whole layer.",
             "", "Accuracy and loss at the scored positions and at every other position (final weights):", "",
             md_table(["model", "seed", "scored acc", "scored loss", "other acc", "other loss"], position_rows)]
    if role_rows:
        parts += ["", "Head roles (top 3 by score; held-out scored accuracy with the top head ablated):", "",
                  md_table(["model", "seed", "role", "top by score", "top ablated", "role heads", "top hurts most"],
                           role_rows)]
    if path_rows:
        parts += ["", "Path patching from previous-token heads into induction heads' query, key, value "
                  "(share of the clean - corrupt gap recovered; attention recovered):", "",
                  md_table(["model", "seed", "edge", "input", "recovered", "attention recovered"], path_rows)]
    return Section("Head roles", "\n".join(parts), summary, jsonable(data))


def dynamics_section(runs, out: Path) -> Section | None:
    from probes.dynamics import has_snapshots, run_dynamics, write_dynamics

    results = [run_dynamics(run) for run in runs if has_snapshots(run)]
    if not results:
        return None
    figures = write_dynamics(results, Path(out) / "figures")
    rows, summary = [], []
    for d in results:
        last = d.points[-1]
        rows.append([d.model_name, d.seed, d.phase_change_step if d.phase_change_step is not None else "none",
                     f"{d.phase_change_interval}", f"{d.steepest_fall:.2f}",
                     f"{d.points[0].scored_loss:.2f} -> {last.scored_loss:.2f}", pct(last.scored_accuracy),
                     f"{last.other_loss:.2f}"])
        summary.append(f"{d.model_name} seed {d.seed}: phase change at step ~{d.phase_change_step} "
                       f"(scored loss {d.points[0].scored_loss:.2f} -> {last.scored_loss:.2f})"
                       if d.phase_change_step is not None else f"{d.model_name} seed {d.seed}: scored loss never fell")
    parts = ["Weight snapshots replayed on held-out sequences. The phase change is the midpoint of the "
             "snapshot interval where the loss at the scored positions falls fastest.", "",
             md_table(["model", "seed", "phase change", "interval", "fall /100 steps", "scored loss",
                       "final scored acc", "final other loss"], rows), ""]
    parts += [f"![dynamics {name}](figures/{path.name})" for name, path in figures.items()]
    return Section("Training dynamics", "\n".join(parts), summary,
                   jsonable({"runs": [asdict(d) for d in results]}))


PROVIDERS = (head_roles_section, dynamics_section)


def report_sections(runs, out: Path) -> list[Section]:
    return [section for provider in PROVIDERS if (section := provider(runs, out)) is not None]
