"""Report parts that appear when the runs' data call for them, never by task name: head roles when
the scored answers are induction-predictable, training dynamics when runs kept weight snapshots.
Each is a (measure, render) pair registered in probes.report.parts."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from probes.report.parts import Section
from probes.report.document import jsonable, md_table
from probes.report.words import pct as percent

INDUCTION_SHARE = 0.5   # head roles are ranked when at least this share of answers is induction-predictable
pct = partial(percent, digits=1)


@dataclass(frozen=True)
class RunRoles:
    model_name: str
    seed: int
    induction_share: float
    final: object                    # probes.dynamics.SnapshotPoint of the final weights
    heads: object = None             # probes.heads.RunHeads; None for uniform attention
    basis: str = ""                  # the examples the ablations and path patches were measured on


def measure_head_roles(context) -> RunRoles | None:
    from probes.dynamics import snapshot_point
    from probes.heads import induction_share, run_heads

    run = context.run
    share = induction_share(context.heldout)
    if share < INDUCTION_SHARE:
        return None
    final = snapshot_point(context.model, context.sample, int(run.metrics.get("steps", 0)))
    softmax = context.spec.get("attention") == "softmax"
    basis = (f"{len(context.sample)} of {len(context.heldout)} held-out sequences, means over "
             f"{len(context.reference)} of {len(context.batches['train'])} training sequences; path patches on "
             f"{min(context.settings.role_path_pairs, len(context.heldout))} held-out pairs")
    return RunRoles(run.model_name, run.seed, share, final, run_heads(context) if softmax else None, basis)


def role_line(run: RunRoles, claim: float) -> str:
    """One run's head roles and the paths between them, in a summary line; an edge is named as a
    path only when it recovers `claim` of the gap."""
    heads, report = run.heads, run.heads.report
    line = (f"{run.model_name} seed {run.seed}: previous-token head(s) {', '.join(heads.previous) or 'none'}, "
            f"induction head(s) {', '.join(heads.induction) or 'none'} (baseline {pct(report.baseline_accuracy)}"
            + "".join(f", ablating {h} -> {pct(report.ablated_accuracy[h])}"
                      for h in heads.previous + heads.induction) + ")")
    for component in ("k", "q", "v"):
        best = max((p for p in heads.paths if p.component == component), key=lambda p: p.recovered,
                   default=None)
        if best is not None and best.recovered >= claim:
            line += f"; {component.upper()} path {best.sender} -> {best.receiver} recovers {pct(best.recovered)}"
        elif best is not None:
            line += f"; no single {component.upper()} edge recovers {pct(claim)} (best {pct(best.recovered)})"
    joint = {p.component: p for p in heads.joint_paths}
    if joint:
        line += (f"; joint K path {joint['k'].sender} -> {joint['k'].receiver} recovers "
                 f"{pct(joint['k'].recovered)}, attention {joint['k'].attention_recovered:.2f} "
                 f"(Q {pct(joint['q'].recovered)}, V {pct(joint['v'].recovered)})")
    if heads.k_with_clean_values is not None:
        line += (f"; with clean values {pct(heads.k_with_clean_values.recovered)} "
                 f"(clean values alone {pct(heads.clean_values_alone.recovered)})")
    return line


def head_roles_section(measured: list[RunRoles], out: Path, settings) -> Section | None:
    from probes.heads import LAYER_SHARE

    position_rows, role_rows, path_rows, summary = [], [], [], []
    data = {"induction_share": measured[0].induction_share, "runs": []}
    for run in measured:
        final = run.final
        position_rows.append([run.model_name, run.seed, pct(final.scored_accuracy), f"{final.scored_loss:.2f}",
                              pct(final.other_accuracy), f"{final.other_loss:.2f}"])
        entry = {"model": run.model_name, "seed": run.seed, "final": asdict(final)}
        if run.heads is not None:
            heads = run.heads
            report = heads.report
            for role in ("previous_token", "induction", "duplicate_token", "copying", "direct_logit"):
                evidence = report.roles[role]
                top = evidence.ranking[0]
                role_rows.append([run.model_name, run.seed, role.replace("_", " "),
                                  ", ".join(f"{h} {evidence.scores[h]:.2f}" for h in evidence.ranking[:3]),
                                  f"{top}: {pct(report.ablated_accuracy[top])}",
                                  ", ".join(evidence.heads) or "none",
                                  "yes" if evidence.top_is_most_harmful else "no"])
            with_values = [p for p in (heads.k_with_clean_values, heads.clean_values_alone) if p is not None]
            for kind, paths in (("edge", heads.paths), ("joint", heads.joint_paths),
                                ("joint, clean values", with_values)):
                for p in paths:
                    where = "" if p.positions is None else f" ({p.where})"
                    path_rows.append([run.model_name, run.seed, kind, f"{p.sender}{where} -> {p.receiver}", p.component,
                                      pct(p.recovered), f"{p.attention_recovered:.2f}"])
            summary.append(role_line(run, settings.path_claim))
            entry["heads"] = asdict(heads)
        data["runs"].append(entry)
    parts = [f"{pct(data['induction_share'])} of scored answers are the unique token that followed an earlier copy of the "
             "current token, so heads are ranked for induction roles. Scores: attention on the role's "
             "target (previous token, earlier copy, token after the earlier copy) over rows that have one; "
             "copying = eigenvalue positivity of W_E W_OV W_U; direct logit = the head's direct effect on the "
             f"answer logit. Each ranking is checked by mean-ablating heads ({measured[0].basis}); a role's "
             f"heads are the fewest top-ranked heads of its layer that cost {percent(LAYER_SHARE)} of ablating the whole layer.",
             "", "Accuracy and loss at the scored positions and at every other position (final weights):", "",
             md_table(["model", "seed", "scored acc", "scored loss", "other acc", "other loss"], position_rows)]
    if role_rows:
        parts += ["", "Head roles (top 3 by score; held-out scored accuracy with the top head ablated):", "",
                  md_table(["model", "seed", "role", "top by score", "top ablated", "role heads", "top hurts most"],
                           role_rows)]
    if path_rows:
        parts += ["", "Path patching from previous-token heads into induction heads' query, key, value "
                  "(share of the clean - corrupt gap recovered; attention recovered). An edge is one sender "
                  "into one receiver; the joint path sends the summed writes of every previous-token head "
                  "into that input of every induction head at once (attention recovered weighted by each "
                  "receiver's clean - corrupt attention gap). The counterfactual shuffles the first half, "
                  "so the token an induction head copies differs too: the joint K path is shown again with "
                  "the induction heads' values from the clean run, and with those clean values alone "
                  "(no sender position patched):", "",
                  md_table(["model", "seed", "path", "heads", "input", "recovered", "attention recovered"],
                           path_rows)]
    parts += ["", *(f"- {line}" for line in summary)]
    cells = {(run.model_name, run.seed): {"roles": role_cell(run)} for run in measured if run.heads is not None}
    return Section("Head roles", "\n".join(parts), summary, jsonable(data), cells=cells)


def role_cell(run: RunRoles) -> str:
    heads = run.heads
    return f"prev {'+'.join(heads.previous) or 'none'}, ind {'+'.join(heads.induction) or 'none'}"


def measure_dynamics(context):
    from probes.dynamics import has_snapshots, run_dynamics

    run = context.run
    return run_dynamics(run, context.settings.dynamics_rows, context.model) if has_snapshots(run) else None


def dynamics_section(results: list, out: Path, settings) -> Section | None:
    from probes.dynamics import MIN_ADVANTAGE, write_dynamics

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
                       if d.phase_change_step is not None else
                       f"{d.model_name} seed {d.seed}: no phase change (the scored positions never became better "
                       f"predicted than the rest; scored loss {d.points[0].scored_loss:.2f} -> {last.scored_loss:.2f})")
    parts = [f"Weight snapshots replayed on {settings.dynamics_rows} evenly spread held-out sequences (all when "
             "there are fewer). The phase change is the midpoint of the "
             "snapshot interval where the loss at the scored positions falls fastest relative to the loss "
             f"at the other positions; none unless the scored loss ends {MIN_ADVANTAGE} nats below it.", "",
             md_table(["model", "seed", "phase change", "interval", "fall /100 steps", "scored loss",
                       "final scored acc", "final other loss"], rows), ""]
    parts += [f"![dynamics {name}](figures/{path.name})" for name, path in figures.items()]
    parts += ["", *(f"- {line}" for line in summary)]
    cells = {(d.model_name, d.seed): {"phase change": "none" if d.phase_change_step is None
                                      else f"step ~{d.phase_change_step}"} for d in results}
    return Section("Training dynamics", "\n".join(parts), summary,
                   jsonable({"runs": [asdict(d) for d in results]}), cells=cells)
