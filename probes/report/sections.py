"""Report parts that appear when the runs' data call for them, never by task name: head roles when
the scored answers are induction-predictable, training dynamics when runs kept weight snapshots.
Each is a (measure, render) pair registered in probes.report.parts."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from models.components import Head, HeadSet
from models.spec import Attention
from probes.report.parts import Section, jsonable
from probes.report.render import md_table
from probes.report.words import pct as percent

if TYPE_CHECKING:
    from collections.abc import Callable

    from probes.circuits.path_patching import PathPatch
    from probes.circuits.timeline import CircuitTimeline
    from probes.dynamics import Dynamics, SnapshotPoint
    from probes.heads import HeadReport

INDUCTION_SHARE = 0.5  # head roles are ranked when at least this share of answers is induction-predictable
pct = partial(percent, digits=1)


@dataclass(frozen=True)
class RunHeads:
    """One run's head roles and, between its previous-token and induction heads, path patching
    through the receiver's query, key and value inputs: edge by edge, and jointly (every chosen
    previous-token head into every induction head at once, since redundant induction heads each
    recover only part of the gap alone)."""

    model_name: str
    seed: int
    report: HeadReport
    previous: list[Head]  # previous-token heads below the induction layer
    induction: list[Head]
    paths: list  # probes.circuits.path_patching.PathPatch, q/k/v per sender-receiver pair
    joint_paths: list  # PathPatch, q/k/v: all `previous` heads -> all `induction` heads
    # The joint K path with the induction heads' values from the clean run, and the same with no
    # sender position patched (clean values alone): what the K path adds once the copied tokens
    # are the clean ones (induction's counterfactual changes them, so K alone cannot restore them).
    k_with_clean_values: PathPatch | None = None
    clean_values_alone: PathPatch | None = None


def run_heads(context) -> RunHeads:
    """Head roles of one run, on the report's ablation rows and reference (a probes.report.parts.RunContext)."""
    from tasks.data import spread_subset
    from probes.circuits.path_patching import COMPONENTS, PathTarget, path_patch_many
    from probes.ablation import Ablation
    from probes.heads import head_report

    run, model, heldout = context.run, context.model, context.heldout
    report = head_report(model, context.sample, Ablation.MEAN, context.reference)
    induction = report.roles["induction"]
    below = [h for h in report.roles["previous_token"].ranking if h.layer < induction.layer]
    chosen = [h for h in report.roles["previous_token"].heads if h in below] or below[:1]
    edges = [
        PathTarget(HeadSet([s]), None, HeadSet([r]), c) for s in chosen for r in induction.heads for c in COMPONENTS
    ]
    senders, receivers = HeadSet(sorted(chosen)), HeadSet(sorted(induction.heads))
    joint = [PathTarget(senders, None, receivers, c) for c in COMPONENTS] if edges else []
    with_values = (
        [
            PathTarget(senders, None, receivers, "k", clean_values=True),
            PathTarget(senders, (), receivers, "k", clean_values=True),
        ]
        if edges
        else []
    )
    pairs = spread_subset(heldout, context.settings.role_path_pairs)
    paths = path_patch_many(model, pairs, edges + joint + with_values) if edges else []
    n_edges, n_joint = len(edges), len(joint)
    no_values: list[PathPatch | None] = [None, None]
    return RunHeads(
        run.model_name,
        run.seed,
        report,
        chosen,
        induction.heads,
        paths[:n_edges],
        paths[n_edges : n_edges + n_joint],
        *(paths[n_edges + n_joint :] or no_values),
    )


@dataclass(frozen=True)
class RunRoles:
    model_name: str
    seed: int
    induction_share: float
    final: SnapshotPoint  # of the final weights
    heads: RunHeads | None = None  # None for uniform attention
    basis: str = ""  # the examples the ablations and path patches were measured on


def measure_head_roles(context) -> RunRoles | None:
    from probes.dynamics import snapshot_point
    from probes.heads import induction_share

    run = context.run
    share = induction_share(context.heldout)
    if share < INDUCTION_SHARE:
        return None
    final = snapshot_point(context.model, context.sample, int(run.metrics.get("steps", 0)))
    softmax = context.spec.attention == Attention.SOFTMAX
    basis = (
        f"{len(context.sample)} of {len(context.heldout)} held-out sequences, means over "
        f"{len(context.reference)} of {len(context.batches['train'])} training sequences; path patches on "
        f"{min(context.settings.role_path_pairs, len(context.heldout))} held-out pairs"
    )
    return RunRoles(run.model_name, run.seed, share, final, run_heads(context) if softmax else None, basis)


def names(heads: list[Head]) -> str:
    return ", ".join(map(str, heads)) or "none"


def role_line(run: RunRoles, claim: float) -> str:
    """One run's head roles and the paths between them, in a summary line; an edge is named as a
    path only when it recovers `claim` of the gap."""
    heads = run.heads
    assert heads is not None, "a summary line is written only for a run whose head roles were measured"
    report = heads.report
    line = (
        f"{run.model_name} seed {run.seed}: previous-token head(s) {names(heads.previous)}, "
        f"induction head(s) {names(heads.induction)} (baseline {pct(report.baseline_accuracy)}"
        + "".join(f", ablating {h} -> {pct(report.ablated_accuracy[h])}" for h in heads.previous + heads.induction)
        + ")"
    )
    for component in ("k", "q", "v"):
        best = max((p for p in heads.paths if p.component == component), key=lambda p: p.recovered, default=None)
        if best is not None and best.recovered >= claim:
            line += f"; {component.upper()} path {best.sender} -> {best.receiver} recovers {pct(best.recovered)}"
        elif best is not None:
            line += f"; no single {component.upper()} edge recovers {pct(claim)} (best {pct(best.recovered)})"
    joint = {p.component: p for p in heads.joint_paths}
    if joint:
        line += (
            f"; joint K path {joint['k'].sender} -> {joint['k'].receiver} recovers "
            f"{pct(joint['k'].recovered)}, attention {joint['k'].attention_recovered:.2f} "
            f"(Q {pct(joint['q'].recovered)}, V {pct(joint['v'].recovered)})"
        )
    if heads.k_with_clean_values is not None:
        assert heads.clean_values_alone is not None, "run_heads measures the two together"
        line += (
            f"; with clean values {pct(heads.k_with_clean_values.recovered)} "
            f"(clean values alone {pct(heads.clean_values_alone.recovered)})"
        )
    return line


def head_roles_section(measured: list[RunRoles], out: Path, settings) -> Section | None:
    from probes.heads import LAYER_SHARE

    position_rows, role_rows, path_rows, summary = [], [], [], []
    data: dict[str, Any] = {"induction_share": measured[0].induction_share, "runs": []}
    for run in measured:
        final = run.final
        position_rows.append(
            [
                run.model_name,
                run.seed,
                pct(final.scored_accuracy),
                f"{final.scored_loss:.2f}",
                pct(final.other_accuracy),
                f"{final.other_loss:.2f}",
            ]
        )
        entry = {"model": run.model_name, "seed": run.seed, "final": asdict(final)}
        if run.heads is not None:
            heads = run.heads
            report = heads.report
            for role in ("previous_token", "induction", "duplicate_token", "copying", "direct_logit"):
                evidence = report.roles[role]
                top = evidence.ranking[0]
                role_rows.append(
                    [
                        run.model_name,
                        run.seed,
                        role.replace("_", " "),
                        ", ".join(f"{h} {evidence.scores[h]:.2f}" for h in evidence.ranking[:3]),
                        f"{top}: {pct(report.ablated_accuracy[top])}",
                        names(evidence.heads),
                        "yes" if evidence.top_is_most_harmful else "no",
                    ]
                )
            with_values = [p for p in (heads.k_with_clean_values, heads.clean_values_alone) if p is not None]
            for kind, paths in (
                ("edge", heads.paths),
                ("joint", heads.joint_paths),
                ("joint, clean values", with_values),
            ):
                for p in paths:
                    where = "" if p.positions is None else f" ({p.where})"
                    path_rows.append(
                        [
                            run.model_name,
                            run.seed,
                            kind,
                            f"{p.sender}{where} -> {p.receiver}",
                            p.component,
                            pct(p.recovered),
                            f"{p.attention_recovered:.2f}",
                        ]
                    )
            summary.append(role_line(run, settings.path_claim))
            entry["heads"] = jsonable(heads)
        data["runs"].append(entry)
    parts = [
        f"{pct(data['induction_share'])} of scored answers are the unique token that followed an earlier copy of the "
        "current token, so heads are ranked for induction roles. Scores: attention on the role's "
        "target (previous token, earlier copy, token after the earlier copy) over rows that have one; "
        "copying = eigenvalue positivity of W_E W_OV W_U; direct logit = the head's direct effect on the "
        f"answer logit. Each ranking is checked by mean-ablating heads ({measured[0].basis}); a role's "
        f"heads are the fewest top-ranked heads of its layer that cost {percent(LAYER_SHARE)} of ablating the whole layer.",
        "",
        "Accuracy and loss at the scored positions and at every other position (final weights):",
        "",
        md_table(["model", "seed", "scored acc", "scored loss", "other acc", "other loss"], position_rows),
    ]
    if role_rows:
        parts += [
            "",
            "Head roles (top 3 by score; held-out scored accuracy with the top head ablated):",
            "",
            md_table(
                ["model", "seed", "role", "top by score", "top ablated", "role heads", "top hurts most"], role_rows
            ),
        ]
    if path_rows:
        parts += [
            "",
            "Path patching from previous-token heads into induction heads' query, key, value "
            "(share of the clean - corrupt gap recovered; attention recovered). An edge is one sender "
            "into one receiver; the joint path sends the summed writes of every previous-token head "
            "into that input of every induction head at once (attention recovered weighted by each "
            "receiver's clean - corrupt attention gap). The counterfactual shuffles the first half, "
            "so the token an induction head copies differs too: the joint K path is shown again with "
            "the induction heads' values from the clean run, and with those clean values alone "
            "(no sender position patched):",
            "",
            md_table(["model", "seed", "path", "heads", "input", "recovered", "attention recovered"], path_rows),
        ]
    parts += ["", *(f"- {line}" for line in summary)]
    cells = {(run.model_name, run.seed): {"roles": role_cell(run)} for run in measured if run.heads is not None}
    return Section("Head roles", "\n".join(parts), summary, jsonable(data), cells=cells)


def role_cell(run: RunRoles) -> str:
    heads = run.heads
    assert heads is not None, "a cell is made only for a run whose head roles were measured"
    return f"prev {HeadSet(heads.previous) or 'none'}, ind {HeadSet(heads.induction) or 'none'}"


@dataclass(frozen=True)
class RunDynamics:
    dynamics: Dynamics
    timeline: CircuitTimeline | None  # multi-block runs with counterfactual pairs and a found circuit


def measure_dynamics(context) -> RunDynamics | None:
    from probes.dynamics import has_snapshots, run_dynamics

    run = context.run
    if not has_snapshots(run):
        return None
    return RunDynamics(run_dynamics(run, context.settings.dynamics_rows, context.model), measure_timeline(context))


def measure_timeline(context) -> CircuitTimeline | None:
    """The final model's edge circuit (the edge part's, RunContext.edge_circuit) replayed at every
    snapshot, then the final weights."""
    from models.checkpoint import load_weights
    from probes.circuits.timeline import circuit_timeline
    from probes.dynamics import snapshot_files
    from probes.report.edge_part import traceable

    if not traceable(context.spec) or context.heldout.counterfactual is None:
        return None
    model, graph, final = context.model, context.edge_graph, context.edge_circuit
    if not context.settings.traces(final.oracle.gap) or final.circuit.edges is None:
        return None
    own = {name: value.clone() for name, value in model.state_dict().items()}
    fix = "retrain the run to rewrite its snapshots"
    snapshots: list[tuple[int, Callable]] = [
        (step, lambda m, path=path: load_weights(m, path, fix=fix)) for step, path in snapshot_files(context.run.path)
    ]
    snapshots.append((int(context.run.metrics["steps"]), lambda m: m.load_state_dict(own)))
    try:
        return circuit_timeline(model, context.pairs, graph, final.circuit.edges, snapshots, context.settings)
    finally:
        model.load_state_dict(own)


def timeline_line(run: RunDynamics) -> str | None:
    """When the circuit's head -> head edges entered, against the phase change."""
    timeline, d = run.timeline, run.dynamics
    if timeline is None:
        return None
    composing = [e for e in timeline.edges if isinstance(e.sender, Head) and isinstance(e.receiver.node, Head)]
    shown = composing or list(timeline.edges)
    words = ", ".join(f"{e} at step {timeline.entered(e)} (stable from {timeline.stable(e)})" for e in shown[:6])
    phase = f"phase change at step ~{d.phase_change_step}" if d.phase_change_step is not None else "no phase change"
    kind = "head -> head edges" if composing else "edges"
    return (
        f"{d.model_name} seed {d.seed}: of its final {len(timeline.edges)}-edge circuit, the {kind} entered "
        f"(half their final effect): {words}; {phase}"
    )


def dynamics_section(measured: list[RunDynamics], out: Path, settings) -> Section | None:
    from probes.dynamics import MIN_ADVANTAGE
    from probes.report.dynamics import timeline_figure, write_dynamics

    results = [run.dynamics for run in measured]
    figures = write_dynamics(results, Path(out) / "figures")
    rows, summary = [], []
    for d in results:
        last = d.points[-1]
        rows.append(
            [
                d.model_name,
                d.seed,
                d.phase_change_step if d.phase_change_step is not None else "none",
                f"{d.phase_change_interval}",
                f"{d.steepest_fall:.2f}",
                f"{d.points[0].scored_loss:.2f} -> {last.scored_loss:.2f}",
                pct(last.scored_accuracy),
                f"{last.other_loss:.2f}",
            ]
        )
        summary.append(
            f"{d.model_name} seed {d.seed}: phase change at step ~{d.phase_change_step} "
            f"(scored loss {d.points[0].scored_loss:.2f} -> {last.scored_loss:.2f})"
            if d.phase_change_step is not None
            else f"{d.model_name} seed {d.seed}: no phase change (the scored positions never became better "
            f"predicted than the rest; scored loss {d.points[0].scored_loss:.2f} -> {last.scored_loss:.2f})"
        )
    parts = [
        f"Weight snapshots replayed on {settings.dynamics_rows} evenly spread held-out sequences (all when "
        "there are fewer). The phase change is the midpoint of the "
        "snapshot interval where the loss at the scored positions falls fastest relative to the loss "
        f"at the other positions; none unless the scored loss ends {MIN_ADVANTAGE} nats below it.",
        "",
        md_table(
            [
                "model",
                "seed",
                "phase change",
                "interval",
                "fall /100 steps",
                "scored loss",
                "final scored acc",
                "final other loss",
            ],
            rows,
        ),
        "",
    ]
    parts += [f"![dynamics {name}](figures/{path.name})" for name, path in figures.items()]
    parts += ["", *(f"- {line}" for line in summary)]
    timed = [run for run in measured if run.timeline is not None]
    if timed:
        parts += ["", timeline_intro(settings), ""]
        for run in timed:
            line = timeline_line(run)
            assert line is not None, "a timed run has a timeline"
            summary.append(line)
            figure = timeline_figure(run.timeline, run.dynamics, Path(out) / "figures")
            parts += [
                f"- {line}",
                "",
                f"![circuit timeline {run.dynamics.model_name} seed {run.dynamics.seed}](figures/{figure.name})",
                "",
            ]
    data = {"runs": [asdict(d) for d in results], "timelines": [timeline_json(run) for run in timed]}
    cells = {
        (d.model_name, d.seed): {
            "phase change": "none" if d.phase_change_step is None else f"step ~{d.phase_change_step}"
        }
        for d in results
    }
    return Section("Training dynamics", "\n".join(parts), summary, jsonable(data), cells=cells)


def timeline_intro(settings) -> str:
    from probes.circuits.timeline import ENTERS, STABLE

    return (
        "When the circuit formed: each run's final edge circuit (the exact oracle's smallest top-k set reaching "
        f"{percent(settings.circuit_target)} of the gap, on the report's counterfactual pairs) replayed at every "
        "weight snapshot and the final weights. An edge's effect alone is divided by the final model's clean - "
        "counterfactual gap (0 = it moves nothing, 1 = as much as the final model's whole gap; early snapshots "
        f"have almost no gap of their own). It has entered at the first snapshot reaching {percent(ENTERS)} of "
        f"its final effect and is stable from the first snapshot after which it stays within {percent(STABLE)} "
        "of it."
    )


def timeline_json(run: RunDynamics) -> dict:
    t = run.timeline
    assert t is not None, "only timed runs are written"
    return {
        "model": run.dynamics.model_name,
        "seed": run.dynamics.seed,
        "steps": list(t.steps),
        "gap": list(t.gap),
        "faithfulness": list(t.faithfulness),
        "edges": [
            {"edge": str(e), "effect": t.effect[:, i].tolist(), "entered": t.entered(e), "stable": t.stable(e)}
            for i, e in enumerate(t.edges)
        ],
        "phase_change_step": run.dynamics.phase_change_step,
    }
