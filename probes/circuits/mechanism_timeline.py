"""Which mechanism a run's circuit names at each weight snapshot, and from which step the final
mechanism can be told over seeds.

A sweep run trained with snapshots (`--snapshot-every N`) keeps `timeline.json` beside its
`circuit.json`: at every snapshot step, then at the final weights, the same circuit facts
`circuit.json` stores (probes.circuits.labels.CircuitSummary), measured on that step's weights by
the same rule (probes.report.run_analysis). The mechanism at a step is `circuit_label` of that
step's facts alone: the final label never enters an early step's classification. The record is
signed and tied to its run like `circuit.json` (docs/reliability-sweeps.md), each step to the
SHA-256 of the weights file it was measured on, and its final entry must name the label
`circuit.json` names (the two were measured on the same weights by the same rule, so they differ
only when one was altered). Needs no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from common.cli import UsageError
from common.jsonfiles import check_fields, sha256_file, short
from common.store import read_json
from common.stats import Interval, wilson
from probes.circuits.labels import CIRCUIT, CircuitLabel, CircuitSummary, circuit_label

TIMELINE = "timeline.json"
TIMELINE_FIX = "rerun the sweep: it traces that run's snapshots again"
PREDICTABLE = 0.9  # agreement with the final mechanism from which it counts as told
ENTRY_FIELDS = {"step": int, "file": str, "weights_sha256": str, "gap": float, "circuit": dict}
# snapshots: a list of ENTRY_FIELDS objects, checked by require_list then one by one (`list` would mean strings)
TIMELINE_FIELDS = {"run_sha256": str, "weights_sha256": str, "model_name": str, "seed": int, "snapshots": object}


def require_list(data, name: str, where: str, fix: str):
    """`data`, after refusing a `name` field that is not a list (before check_fields, whose `object`
    type only says "known field")."""
    if isinstance(data, dict) and name in data and not isinstance(data[name], list):
        raise UsageError(f"{where}: {name} must be a list of objects, got {short(data[name])}; {fix}")
    return data


@dataclass(frozen=True)
class SnapshotCircuit:
    step: int
    file: str  # the weights measured, inside the run folder (a snapshot; the run's weights last)
    weights_sha256: str  # of that file
    gap: float  # clean - counterfactual metric on the run's pairs at this step
    summary: CircuitSummary

    @property
    def label(self) -> CircuitLabel:
        return circuit_label(self.summary)

    def to_dict(self) -> dict:
        return {
            "step": self.step,
            "file": self.file,
            "weights_sha256": self.weights_sha256,
            "gap": self.gap,
            "circuit": self.summary.to_dict(),
        }


def timeline_record(entries: list[SnapshotCircuit], config: dict) -> dict:
    """timeline.json for the run whose config.json is `config`."""
    from tasks.training.sweeps import signed

    return signed(
        {
            "run_sha256": config["run_sha256"],
            "weights_sha256": config["weights_sha256"],
            "model_name": config["model_name"],
            "seed": config["seed"],
            "snapshots": [entry.to_dict() for entry in entries],
        }
    )


def wants_timeline(config: dict, final: CircuitSummary) -> bool:
    """A run keeps a timeline when it was trained with snapshots and its final circuit was traced
    (a run with no final circuit has no mechanism to tell early)."""
    training = config.get("training")
    return isinstance(training, dict) and bool(training.get("snapshot_every")) and bool(final.nodes)


def read_timeline(run, final: CircuitLabel) -> tuple[SnapshotCircuit, ...]:
    """A run's timeline.json after its checks (UsageError naming the first that fails): checksum,
    the run it describes, steps from 0 to the run's last in order, each step's weights file present
    and unchanged, the last the run's own weights, naming `final` (circuit.json's label)."""
    from tasks.training.sweeps import check_signed

    path = run.path / TIMELINE
    where = str(path)
    data = check_signed(
        require_list(read_json(path, TIMELINE_FIX), "snapshots", where, TIMELINE_FIX),
        TIMELINE_FIELDS,
        where,
        TIMELINE_FIX,
    )
    recorded = {key: data[key] for key in ("run_sha256", "weights_sha256", "model_name", "seed")}
    actual = {
        "run_sha256": run.config["run_sha256"],
        "weights_sha256": run.config.get("weights_sha256"),
        "model_name": run.model_name,
        "seed": run.seed,
    }
    differing = [key for key in recorded if recorded[key] != actual[key]]
    if differing:
        raise UsageError(
            f"{where} describes another run (different {', '.join(differing)}: copied from elsewhere, "
            f"or left from before the run was retrained); {TIMELINE_FIX}"
        )
    if not data["snapshots"]:
        raise UsageError(f"{where}: snapshots is empty; {TIMELINE_FIX}")
    entries = tuple(stored_entry(entry, run, f"{where}: snapshot {i}") for i, entry in enumerate(data["snapshots"]))
    steps = [entry.step for entry in entries]
    if steps[0] != 0 or steps != sorted(set(steps)) or steps[-1] != run.metrics.get("steps"):
        raise UsageError(
            f"{where}: steps {steps[:3]}...{steps[-1:]} must rise from 0 to the run's last step "
            f"({run.metrics.get('steps')}); {TIMELINE_FIX}"
        )
    if entries[-1].weights_sha256 != run.config.get("weights_sha256"):
        raise UsageError(f"{where}: its last step was not measured on the run's own weights; {TIMELINE_FIX}")
    if entries[-1].label != final:
        raise UsageError(
            f"{where} names {entries[-1].label.text!r} at the final weights, but {CIRCUIT} names "
            f"{final.text!r} (measured on the same weights by the same rule: one was altered); "
            f"{TIMELINE_FIX}"
        )
    return entries


def stored_entry(data, run, where: str) -> SnapshotCircuit:
    check_fields(data, ENTRY_FIELDS, where, TIMELINE_FIX)
    if set(data) != set(ENTRY_FIELDS):
        raise UsageError(f"{where} lacks field(s) {sorted(set(ENTRY_FIELDS) - set(data))}; {TIMELINE_FIX}")
    name = PurePosixPath(data["file"])
    if name.is_absolute() or ".." in name.parts or not name.parts:
        raise UsageError(f"{where}: file {data['file']!r} is not a path inside the run folder; {TIMELINE_FIX}")
    weights = Path(run.path) / name
    if not weights.is_file() or sha256_file(weights) != data["weights_sha256"]:
        raise UsageError(f"{where}: the weights it was measured on ({weights}) are missing or changed; {TIMELINE_FIX}")
    try:
        summary = CircuitSummary.from_dict(data["circuit"], where, TIMELINE_FIX)
    except TypeError:  # a field missing
        raise UsageError(f"{where}: its circuit lacks a field; {TIMELINE_FIX}") from None
    if (summary.model_name, summary.seed) != (run.model_name, run.seed):
        raise UsageError(f"{where}: its circuit describes {summary.model_name} seed {summary.seed}; {TIMELINE_FIX}")
    return SnapshotCircuit(data["step"], data["file"], data["weights_sha256"], data["gap"], summary)


# ---- over seeds: from which step the final mechanism can be told --------------------------------


@dataclass(frozen=True)
class StepAgreement:
    step: int
    agree: Interval  # seeds whose mechanism at this step is their final one, Wilson 95% over seeds
    agreeing: int
    stopped: int  # of those seeds, the ones whose training had ended by this step (their
    # mechanism is then their final one by construction)
    training: Interval  # the same share over the seeds still training at this step


@dataclass(frozen=True)
class MechanismTimeline:
    """A group's seeds with a timeline: agreement with the final mechanism at every step any of
    them was measured at. A seed is, at step s, at its latest measured step <= s."""

    runs: int
    steps: tuple[StepAgreement, ...]
    predictable_from: int | None  # first step from which `agree` stays >= PREDICTABLE; None: never
    predictable_while_training: int | None  # the same on the seeds still training (steps with none skipped)
    settled: dict  # seed -> step from which its mechanism stays its final one
    final_steps: dict  # seed -> its last training step
    first_traced: dict  # seed -> first step whose gap was large enough to trace a circuit
    first_traced_final: Interval  # seeds whose circuit at that first step is their final one
    snapshot_steps: int  # steps between snapshots (the runs' snapshot_every)
    unreadable: tuple = ()  # (seed, why): timeline.json fails a check, not counted
    missing: tuple = ()  # seeds trained with snapshots whose timeline.json is absent

    def at(self, step: int) -> StepAgreement | None:
        return next((s for s in self.steps if s.step == step), None)


def label_at(entries: tuple[SnapshotCircuit, ...], step: int) -> CircuitLabel:
    return [entry for entry in entries if entry.step <= step][-1].label


def settled_step(entries: tuple[SnapshotCircuit, ...]) -> int:
    final = entries[-1].label
    index = len(entries) - 1
    while index > 0 and entries[index - 1].label == final:
        index -= 1
    return entries[index].step


def first_lasting(steps: list[int], shares: list[float]) -> int | None:
    """The first step before the last from which every share (NaN: no seeds, skipped) is >=
    PREDICTABLE; None when there is none. The last step is left out: every seed has ended by then,
    so all name their final mechanism by construction."""
    first = None
    for step, value in zip(steps[:-1], shares[:-1]):
        if math.isnan(value):
            continue
        if value >= PREDICTABLE:
            first = step if first is None else first
        else:
            first = None
    return first


def mechanism_timeline(
    timelines: dict, snapshot_steps: int, unreadable: tuple = (), missing: tuple = ()
) -> MechanismTimeline | None:
    """`timelines`: seed -> its checked entries (read_timeline). None when no seed has one."""
    if not timelines:
        return (
            None
            if not (unreadable or missing)
            else MechanismTimeline(
                0, (), None, None, {}, {}, {}, wilson(0, 0), snapshot_steps, tuple(unreadable), tuple(missing)
            )
        )
    grid = sorted({entry.step for entries in timelines.values() for entry in entries})
    # At the latest the final entry: a run keeps a timeline only when its final circuit was traced.
    first = {seed: next((e for e in entries if e.summary.nodes), entries[-1]) for seed, entries in timelines.items()}
    rows = []
    for step in grid:
        agree = {seed: label_at(entries, step) == entries[-1].label for seed, entries in timelines.items()}
        stopped = {seed for seed, entries in timelines.items() if entries[-1].step <= step}
        training = [seed for seed in timelines if seed not in stopped]
        agreeing = sum(agree.values())
        rows.append(
            StepAgreement(
                step,
                wilson(agreeing, len(agree)),
                agreeing,
                len(stopped),
                wilson(sum(agree[s] for s in training), len(training)),
            )
        )
    return MechanismTimeline(
        runs=len(timelines),
        steps=tuple(rows),
        predictable_from=first_lasting(grid, [r.agree.value for r in rows]),
        predictable_while_training=first_lasting(grid, [r.training.value for r in rows]),
        settled={seed: settled_step(entries) for seed, entries in sorted(timelines.items())},
        final_steps={seed: entries[-1].step for seed, entries in sorted(timelines.items())},
        first_traced={seed: entry.step for seed, entry in sorted(first.items())},
        first_traced_final=wilson(
            sum(entry.label == timelines[seed][-1].label for seed, entry in first.items()), len(first)
        ),
        snapshot_steps=snapshot_steps,
        unreadable=tuple(unreadable),
        missing=tuple(missing),
    )
