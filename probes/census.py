"""`toylens census SWEEP_DIR`: how often each circuit occurs, per model and grid point.

Counts the runs the sweep planned (its sweep.json), each checked before it is believed: its run
files (config.json, metrics.json, the weights' header), its settings against what the sweep planned
for it and its point.json, and its circuit.json against the run it describes (same run checksum,
weights, model, seed, depth and held-out accuracy). A run that fails a check is counted as
"unreadable" with its reason, never given another run's label. Every share is over the runs of its
(model, point) that finished, with a 95% Wilson interval. A run whose circuit was not named as a
path keeps its own label (what was found instead) and is counted, never dropped; a run with no
circuit.json (trained outside a sweep) is counted as "not traced". Runs under the folder that the
sweep did not plan are not counted: the census says how many it found and where. Runs trained
with weight snapshots also count, per step, how many seeds already name their final mechanism
(probes.circuits.mechanism_timeline). Needs no torch. This module reads and counts (typed results);
probes.report.outputs.census renders them and writes the census folder.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from common.cli import UsageError
from common.store import read_json
from common.stats import Interval, mean_interval, wilson
from probes.circuits.labels import CIRCUIT, NULLABLE, PATHS, SUMMARY_FIELDS, CircuitSummary, LabelKind, circuit_label
from probes.circuits.separation import merged_rows, part_profiles, separations
from probes.circuits.mechanism_timeline import (
    TIMELINE,
    MechanismTimeline,
    mechanism_timeline,
    read_timeline,
    require_list,
    wants_timeline,
)
from tasks.settings import StopReason
from tasks.training.sweeps import (
    FAILED,
    FIX,
    POINT,
    PlannedGroup,
    SweepManifest,
    check_signed,
    differences,
    identity_of,
    read_failed,
    read_manifest,
    read_point,
    signed,
)

NOT_TRACED = "not traced (no circuit.json)"
CIRCUIT_FIX = "rerun the sweep: it trains and traces that run again"


@dataclass(frozen=True)
class Share:
    label: str
    count: int
    share: Interval  # count / finished runs of the group, Wilson 95%


@dataclass(frozen=True)
class GroupCensus:
    model_name: str
    point: str
    values: dict  # the grid point's values
    finished: int  # runs counted below
    failed: int  # runs that failed twice (failed.json): not in any share
    heldout: dict  # held-out accuracy over seeds: mean [t 95%], min, quartiles, max
    unsolved: Share  # runs whose validation was never solved (not "collapsed": the report keeps
    # that word for its run-health flag, a constant output or train far below peers)
    never_learned: Share  # unsolved runs near two-candidate chance (probes.health), where the task names foils
    partly_learned: Share  # the other unsolved runs
    named: Share  # runs whose circuit the report names as a path
    unpathed: Share  # runs whose circuit is its heads only: the paths between them not measured (post-norm,
    # no residual stream), so "not named as a path" is no finding there
    circuits: tuple[Share, ...]  # every circuit label, most frequent first
    seeds: dict  # label -> seeds, so any share can be checked run by run
    path_recovered: dict  # label -> [min, median, max] share of the gap its runs' best path recovers
    unreadable: tuple = ()  # (seed, why) of planned runs whose files fail a check: not in any share
    not_finished: tuple = ()  # seeds planned but not finished (never run, or interrupted: rerun the sweep)
    timeline: MechanismTimeline | None = None  # runs trained with weight snapshots: when the mechanism is told
    parts: dict = field(default_factory=dict)  # label -> part -> heads -> seeds (who_plays): the heads of
    # each part of a mechanism, seed by seed
    separations: tuple = ()  # probes.circuits.separation.Separation: what told each mechanism row from the first
    merged: tuple = ()  # probes.circuits.separation.Merged: rows counted as one, their profiles within tolerance


@dataclass(frozen=True)
class Census:
    groups: tuple[GroupCensus, ...]
    others: tuple[str, ...]  # what was found under the folder but not counted, one line each


# ---- circuit.json: a run's circuit, tied to the run it describes ------------------------------

# paths: a list of objects (require_list), each checked by CircuitSummary.from_dict (`list` would mean strings)
CIRCUIT_FIELDS = {**SUMMARY_FIELDS, PATHS: object, "run_sha256": str, "weights_sha256": str}


def circuit_record(summary: CircuitSummary, config: dict) -> dict:
    """circuit.json for `summary` of the run whose config.json is `config`."""
    return signed({**summary.to_dict(), "run_sha256": config["run_sha256"], "weights_sha256": config["weights_sha256"]})


def read_circuit(run) -> CircuitSummary:
    """A run's circuit.json after its checks: types, checksum, and the run it describes is `run`."""
    path = run.path / CIRCUIT
    if not path.is_file():
        raise UsageError(f"{path} is not a file; {CIRCUIT_FIX}")
    data = check_signed(
        require_list(read_json(path, CIRCUIT_FIX), PATHS, str(path), CIRCUIT_FIX),
        CIRCUIT_FIELDS,
        str(path),
        CIRCUIT_FIX,
        nullable=NULLABLE,
    )
    recorded = {
        "run_sha256": data["run_sha256"],
        "weights_sha256": data["weights_sha256"],
        "model_name": data["model_name"],
        "seed": data["seed"],
        "n_layers": data["n_layers"],
        "heldout": data["heldout"],
    }
    actual = {
        "run_sha256": run.config["run_sha256"],
        "weights_sha256": run.config.get("weights_sha256"),
        "model_name": run.model_name,
        "seed": run.seed,
        "n_layers": run.spec.n_layers,
        "heldout": run.metrics["accuracy"]["heldout"],
    }
    differing = [key for key in recorded if recorded[key] != actual[key]]
    if differing:
        raise UsageError(
            f"{path} describes another run (different {', '.join(differing)}: copied from elsewhere, "
            f"or left from before the run was retrained); {CIRCUIT_FIX}"
        )
    try:
        return CircuitSummary.from_dict(
            {key: data[key] for key in (*SUMMARY_FIELDS, PATHS) if key in data}, str(path), CIRCUIT_FIX
        )
    except TypeError:  # an edge lacking a field
        raise UsageError(f"{path}: edge lacks a field; {CIRCUIT_FIX}") from None


def read_label(run) -> tuple:
    """(kind, label, share of the gap its best single path recovers or None, mechanism signature or None)."""
    if not (run.path / CIRCUIT).exists():
        return LabelKind.UNTRACED, NOT_TRACED, None, None
    summary = read_circuit(run)
    label = circuit_label(summary)
    return label.kind, label.text, summary.edge.strength if summary.edge else None, summary.signature


def heldout_distribution(values: list[float]) -> dict:
    if not values:
        return {}
    quartiles = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
    return {
        "mean": mean_interval(values).as_dict(),
        "min": min(values),
        "q1": quartiles[0],
        "median": quartiles[1],
        "q3": quartiles[2],
        "max": max(values),
        "n": len(values),
    }


# ---- which planned runs count ---------------------------------------------------------------


def checked_run(run_dir: Path, group: PlannedGroup, seed: int):
    """The finished run at `run_dir` with its label, after every check; UsageError naming the first
    that fails."""
    from tasks.training.runs import Run

    run = Run(run_dir)
    run.check()
    differing = differences(identity_of(run.config), group.identity) + (["seed"] if run.seed != seed else [])
    if differing:
        raise UsageError(
            f"{run_dir} was trained with other settings than the sweep planned (different "
            f"{', '.join(differing)}: retrained or replaced after the sweep); rerun the sweep with "
            "--overwrite for it"
        )
    return (run, *read_label(run))


def group_members(root: Path, group: PlannedGroup, point_error: str | None, others: list):
    """(finished members, failed count, unreadable (seed, why), not finished seeds) of a planned group."""
    from tasks.training.runs import METRICS

    members, failed, unreadable, not_finished = [], 0, [], []
    for seed in group.seeds:
        run_dir = root / group.point / group.model_name / f"seed{seed}"
        try:
            if point_error:
                raise UsageError(point_error)
            if (run_dir / METRICS).exists():
                members.append(checked_run(run_dir, group, seed))
                if (run_dir / FAILED).exists():
                    others.append(
                        f"{run_dir / FAILED} lies beside a finished run: left from an earlier attempt, "
                        "not counted as a failure"
                    )
            elif (run_dir / FAILED).exists():
                read_failed(run_dir)
                failed += 1
            else:
                not_finished.append(seed)
        except UsageError as error:
            unreadable.append((seed, str(error)))
    return members, failed, tuple(unreadable), tuple(not_finished)


def point_check(root: Path, point: str, values: dict) -> str | None:
    """Why the point's point.json cannot be believed (None: it can), read once per point."""
    try:
        recorded = read_point(root / point)
    except UsageError as error:
        return str(error)
    except FileNotFoundError:
        return f"{root / point / POINT} is missing; {FIX}"
    if recorded != values:
        return (
            f"{root / point / POINT} records grid values {json.dumps(recorded)}, but the sweep planned "
            f"{json.dumps(values)} there; {FIX}"
        )
    return None


def unplanned_runs(root: Path, manifest: SweepManifest) -> list[str]:
    from models.checkpoint import CONFIG

    planned = manifest.run_dirs(root)
    found = sorted(p.parent for p in root.rglob(CONFIG) if p.parent not in planned)
    if not found:
        return []
    return [
        f"{len(found)} run folder(s) under {root} that this sweep did not plan, not counted (e.g. {found[0]}: "
        "trained into this folder by another command)"
    ]


def take_census(runs_dir: Path) -> Census:
    root = Path(runs_dir)
    manifest = read_manifest(root)
    others = unplanned_runs(root, manifest)
    points = {g.point: point_check(root, g.point, g.values) for g in manifest.groups}
    groups = []
    for group in manifest.groups:
        members, failed, unreadable, not_finished = group_members(root, group, points[group.point], others)
        groups.append(
            group_census(
                group.model_name,
                group.point,
                group.values,
                members,
                failed,
                unreadable,
                not_finished,
                group_timeline(members),
            )
        )
    if not any(g.finished or g.unreadable for g in groups):
        raise UsageError(
            f"{root} holds no finished runs of its sweep yet; run the sweep (see each run's "
            f"{FAILED} for runs that failed)"
        )
    return Census(tuple(groups), tuple(others))


def group_census(
    model: str,
    point: str,
    values: dict,
    members: list,
    failed: int,
    unreadable: tuple = (),
    not_finished: tuple = (),
    timeline: MechanismTimeline | None = None,
) -> GroupCensus:
    members, merged = merged_rows(members)
    n, counts = len(members), Counter(label for _, _, label, *_ in members)
    seeds, recovered = defaultdict(list), defaultdict(list)
    for run, _, label, path_share, *_ in members:
        seeds[label].append(run.seed)
        if path_share is not None:
            recovered[label].append(path_share)
    unsolved = [run for run, *_ in members if run.metrics["stop_reason"] != StopReason.SOLVED]
    never = [run for run in unsolved if near_chance(run)]
    partly = [run for run in unsolved if run not in never]
    named = sum(kind == LabelKind.PATH for _, kind, *_ in members)
    unpathed = sum(kind == LabelKind.HEADS_ONLY for _, kind, *_ in members)
    return GroupCensus(
        model_name=model,
        point=point,
        values=values,
        finished=n,
        failed=failed,
        heldout=heldout_distribution([float(run.metrics["accuracy"]["heldout"]) for run, *_ in members]),
        unsolved=Share("unsolved (validation never solved)", len(unsolved), wilson(len(unsolved), n)),
        never_learned=Share(
            f"never learned (unsolved, near chance{accuracy_range(never)})", len(never), wilson(len(never), n)
        ),
        partly_learned=Share(
            f"partly learned (unsolved, above chance{accuracy_range(partly)})", len(partly), wilson(len(partly), n)
        ),
        named=Share("circuit named as a path", named, wilson(named, n)),
        unpathed=Share("heads only: paths not measured", unpathed, wilson(unpathed, n)),
        circuits=tuple(Share(label, count, wilson(count, n)) for label, count in counts.most_common()),
        seeds={label: sorted(s) for label, s in seeds.items()},
        path_recovered={label: [min(v), statistics.median(v), max(v)] for label, v in recovered.items()},
        unreadable=unreadable,
        not_finished=not_finished,
        timeline=timeline,
        parts=(parts := who_plays(members)),
        separations=separations(
            [k for k, _ in counts.most_common() if k in parts], parts, part_profiles(members, by_layer=True)
        ),
        merged=merged,
    )


def who_plays(members: list) -> dict:
    """label -> part -> heads -> seeds: which heads play each part of a mechanism in each seed
    (members that carry a signature: (run, kind, label, share, signature))."""
    out = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for run, _, label, _, *rest in members:
        signature = rest[0] if rest else None
        for part, heads in signature.heads if signature is not None else ():
            out[label][part]["+".join(heads)].append(run.seed)
    return {
        label: {part: {heads: sorted(s) for heads, s in by.items()} for part, by in parts.items()}
        for label, parts in out.items()
    }


def part_words(parts: dict) -> list[str]:
    """'L0 previous-token head: L0H0 in seeds 0, 2; L0H1 in seed 1', one per part (who_plays of one label)."""

    def seeds(s):
        return ("seed " if len(s) == 1 else "seeds ") + ", ".join(map(str, s))

    return [
        f"{part}: " + "; ".join(f"{heads} in {seeds(s)}" for heads, s in sorted(by.items(), key=lambda i: i[1]))
        for part, by in parts.items()
    ]


def group_timeline(members: list) -> MechanismTimeline | None:
    """The mechanism timeline of a group's finished runs that were trained with snapshots and whose
    final circuit was traced; a timeline.json that fails a check is listed, not counted."""
    timelines, unreadable, missing, every = {}, [], [], 0
    for run, *_ in members:
        if not (run.path / CIRCUIT).exists():
            continue
        summary = read_circuit(run)
        if not wants_timeline(run.config, summary):
            continue
        every = run.config["training"]["snapshot_every"]
        if not (run.path / TIMELINE).exists():
            missing.append(run.seed)
            continue
        try:
            timelines[run.seed] = read_timeline(run, circuit_label(summary))
        except UsageError as error:
            unreadable.append((run.seed, str(error)))
    return mechanism_timeline(timelines, every, tuple(unreadable), tuple(missing))


def near_chance(run) -> bool:
    """Held-out accuracy within ReportSettings.chance_margin of two-candidate chance, for a task whose
    held-out scored positions all name a foil (else chance is not known and nothing is near it)."""
    from probes.health import TWO_CANDIDATES
    from probes.settings import DEFAULT

    heldout = (
        run.metrics.get("evaluation", {}).get("splits", {}).get("heldout", {})
        if isinstance(run.metrics.get("evaluation"), dict)
        else {}
    )
    foil_rate = heldout.get("foil_rate") if isinstance(heldout, dict) else None
    if not isinstance(foil_rate, (int, float)):  # stored as null: the task names no foils
        return False
    return float(run.metrics["accuracy"]["heldout"]) <= TWO_CANDIDATES + DEFAULT.chance_margin


def accuracy_range(runs: list) -> str:
    """': held-out 73%-81%' over `runs`, or '' when there are none."""
    if not runs:
        return ""
    values = sorted(float(run.metrics["accuracy"]["heldout"]) for run in runs)
    return f": held-out {values[0]:.0%}" + (f"-{values[-1]:.0%}" if values[-1] != values[0] else "")
