"""Training dynamics: replay a run's weight snapshots (run_dir/snapshots/step{N}.safetensors) on a
fixed held-out batch and follow, step by step, the loss at the scored positions against the loss
at every other position, and each head's induction and previous-token scores. The phase change is
where the scored loss falls fastest, relative to the other positions, between snapshots.

For the induction task the scored positions are the repeated half and the others are the first
half, whose tokens are random: a model can only ever guess them (loss ~ln(vocabulary)).

Its table, figures and command are in probes.report.dynamics.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from common.cli import UsageError
from common.jsonfiles import short
from models import Model

SNAPSHOT_FILE = re.compile(r"^step(\d+)\.safetensors$")
ROWS = 128  # held-out sequences each snapshot is replayed on
JSON = "dynamics.json"
SNAPSHOT_FIX = "retrain the run to rewrite its snapshots"


@dataclass(frozen=True)
class SnapshotPoint:
    step: int
    scored_loss: float
    other_loss: float  # every real position that is not scored
    scored_accuracy: float
    other_accuracy: float
    induction: list[list[float]]  # [layer][head]
    previous_token: list[list[float]]


@dataclass(frozen=True)
class Dynamics:
    model_name: str
    seed: int
    path: str
    points: list[SnapshotPoint]
    phase_change_step: int | None  # midpoint of the steepest fall of scored minus other loss
    phase_change_interval: tuple[int, int] | None
    steepest_fall: float  # scored minus other loss, fall per 100 steps over that interval


def snapshot_files(run_dir: Path) -> list[tuple[int, Path]]:
    """(step, path) of every weight snapshot, by step. Each file must record the step its name
    gives (one renamed from another step's file, or `step05` beside `step5`, would be replayed as a
    step whose weights it does not hold) and be the one training wrote there (the folder's manifest
    vouches for it): a snapshot copied from another run would be replayed as this run's."""
    from common.ownership import MANIFEST, owned
    from common.store import load_tensors
    from tasks.training.loop import SNAPSHOTS

    folder = Path(run_dir) / SNAPSHOTS
    found = (
        sorted((int(m[1]), path) for path in folder.glob("step*.safetensors") if (m := SNAPSHOT_FILE.match(path.name)))
        if folder.is_dir()
        else []
    )
    for step, path in found:
        _, recorded = load_tensors(path, SNAPSHOT_FIX, header_only=True)
        if recorded != {"step": step} or path.name != f"step{step}.safetensors":
            raise UsageError(
                f"{path} records {short(recorded)}, not the step {step} of its name (renamed or "
                f"copied from another snapshot); {SNAPSHOT_FIX}"
            )
        if not owned(path):
            raise UsageError(
                f"{path} is not the snapshot training wrote there (no {MANIFEST} vouches for its content: "
                f"copied from another run, or edited); {SNAPSHOT_FIX}"
            )
    return found


def has_snapshots(run) -> bool:
    return len(snapshot_files(run.path)) >= 2


def position_masks(batch):
    """[n, width] masks over the model's input positions: real ones, and scored ones."""
    import torch

    real = batch.real_positions()
    scored = torch.zeros_like(real)
    scored[batch.example_index, batch.positions] = True
    return real, scored


def snapshot_point(model: Model, batch, step: int) -> SnapshotPoint:
    import torch

    from models.bridge import device_of
    from probes.heads import attention_scores

    batch = batch.to(device_of(model))
    with torch.no_grad():
        logits = model(batch.inputs)
    targets = batch.tokens[:, 1:]
    loss = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    correct = (logits.argmax(-1) == targets).float()
    real, scored = position_masks(batch)
    other = real & ~scored
    scores = attention_scores(model, batch)
    return SnapshotPoint(
        step=step,
        scored_loss=loss[scored].mean().item(),
        other_loss=loss[other].mean().item(),
        scored_accuracy=correct[scored].mean().item(),
        other_accuracy=correct[other].mean().item(),
        induction=scores["induction"].tolist(),
        previous_token=scores["previous_token"].tolist(),
    )


MIN_ADVANTAGE = 0.5  # nats the scored positions must end below the rest for a phase change to exist


def phase_change(points: list[SnapshotPoint]) -> tuple[int | None, tuple[int, int] | None, float]:
    """(midpoint step, interval, fall per 100 steps) of the steepest fall of the scored loss relative
    to the loss at the other positions: in the first steps both fall together to the unigram loss,
    which is not the scored positions learning anything (measured: it made the bag of words'
    "phase change" step 25). None when the scored positions never end MIN_ADVANTAGE below the rest."""
    if len(points) < 2 or points[-1].other_loss - points[-1].scored_loss < MIN_ADVANTAGE:
        return None, None, 0.0
    falls = [
        (((a.scored_loss - a.other_loss) - (b.scored_loss - b.other_loss)) / (b.step - a.step), (a.step, b.step))
        for a, b in zip(points, points[1:])
    ]
    rate, interval = max(falls)
    if rate <= 0:
        return None, None, 0.0
    return (interval[0] + interval[1]) // 2, interval, 100 * rate


def run_dynamics(run, rows: int = ROWS, model: Model = None) -> Dynamics:
    """Replay every snapshot of `run` on `rows` evenly spread held-out sequences, in `model` (the
    run's, already loaded, is given back with its own weights) or a freshly loaded one."""
    from models.checkpoint import load_weights
    from tasks.data import spread_subset

    files = snapshot_files(run.path)
    if len(files) < 2:
        raise UsageError(
            f"{run.path} has fewer than two weight snapshots; train with "
            "snapshot_every > 0 (the task's default_training can turn it on)"
        )
    model = model if model is not None else run.load_model()
    own = {name: value.clone() for name, value in model.state_dict().items()}
    batch = spread_subset(run.batches()["heldout"], rows)
    points = []
    try:
        for step, path in files:
            load_weights(model, path, fix=SNAPSHOT_FIX)
            model.eval()
            points.append(snapshot_point(model, batch, step))
    finally:
        model.load_state_dict(own)
    change, interval, fall = phase_change(points)
    return Dynamics(run.model_name, run.seed, str(run.path), points, change, interval, fall)


def runs_dynamics(runs_dir: Path) -> list[Dynamics]:
    from tasks.training.runs import find_runs

    return [run_dynamics(run) for run in find_runs(runs_dir) if has_snapshots(run)]
