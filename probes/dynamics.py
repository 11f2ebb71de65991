"""Training dynamics: replay a run's weight snapshots (run_dir/snapshots/step{N}.safetensors) on a
fixed held-out batch and follow, step by step, the loss at the scored positions against the loss
at every other position, and each head's induction and previous-token scores. The phase change is
where the scored loss falls fastest, relative to the other positions, between snapshots.

For the induction task the scored positions are the repeated half and the others are the first
half, whose tokens are random: a model can only ever guess them (loss ~ln(vocabulary)).

`python -m probes.dynamics RUNS_DIR` prints the phase-change step per run and writes
RUNS_DIR/dynamics.json and one figure per model (dynamics_<model>.png).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path

from common.cli import Parser, UsageError, run_cli
from models.components import Head

SNAPSHOT_FILE = re.compile(r"^step(\d+)\.safetensors$")
ROWS = 128          # held-out sequences each snapshot is replayed on
JSON = "dynamics.json"


@dataclass(frozen=True)
class SnapshotPoint:
    step: int
    scored_loss: float
    other_loss: float               # every real position that is not scored
    scored_accuracy: float
    other_accuracy: float
    induction: list[list[float]]    # [layer][head]
    previous_token: list[list[float]]


@dataclass(frozen=True)
class Dynamics:
    model_name: str
    seed: int
    path: str
    points: list[SnapshotPoint]
    phase_change_step: int | None   # midpoint of the steepest fall of scored minus other loss
    phase_change_interval: tuple[int, int] | None
    steepest_fall: float            # scored minus other loss, fall per 100 steps over that interval


def snapshot_files(run_dir: Path) -> list[tuple[int, Path]]:
    from tasks.training import SNAPSHOTS

    folder = Path(run_dir) / SNAPSHOTS
    found = [(int(m[1]), path) for path in folder.glob("step*.safetensors")
             if (m := SNAPSHOT_FILE.match(path.name))] if folder.is_dir() else []
    return sorted(found)


def has_snapshots(run) -> bool:
    return len(snapshot_files(run.path)) >= 2


def position_masks(batch):
    """[n, width] masks over the model's input positions: real ones, and scored ones."""
    import torch

    real = batch.real_positions()
    scored = torch.zeros_like(real)
    scored[batch.example_index, batch.positions] = True
    return real, scored


def snapshot_point(model, batch, step: int) -> SnapshotPoint:
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


MIN_ADVANTAGE = 0.5    # nats the scored positions must end below the rest for a phase change to exist


def phase_change(points: list[SnapshotPoint]) -> tuple[int | None, tuple[int, int] | None, float]:
    """(midpoint step, interval, fall per 100 steps) of the steepest fall of the scored loss relative
    to the loss at the other positions: in the first steps both fall together to the unigram loss,
    which is not the scored positions learning anything (measured: it made the bag of words'
    "phase change" step 25). None when the scored positions never end MIN_ADVANTAGE below the rest."""
    if len(points) < 2 or points[-1].other_loss - points[-1].scored_loss < MIN_ADVANTAGE:
        return None, None, 0.0
    falls = [(((a.scored_loss - a.other_loss) - (b.scored_loss - b.other_loss)) / (b.step - a.step), (a.step, b.step))
             for a, b in zip(points, points[1:])]
    rate, interval = max(falls)
    if rate <= 0:
        return None, None, 0.0
    return (interval[0] + interval[1]) // 2, interval, 100 * rate


def run_dynamics(run, rows: int = ROWS, model=None) -> Dynamics:
    """Replay every snapshot of `run` on `rows` evenly spread held-out sequences, in `model` (the
    run's, already loaded, is given back with its own weights) or a freshly loaded one."""
    from models.checkpoint import load_weights
    from tasks.data import spread_subset

    files = snapshot_files(run.path)
    if len(files) < 2:
        raise UsageError(f"{run.path} has fewer than two weight snapshots; train with "
                         "snapshot_every > 0 (the task's default_training can turn it on)")
    model = model if model is not None else run.load_model()
    own = {name: value.clone() for name, value in model.state_dict().items()}
    batch = spread_subset(run.batches()["heldout"], rows)
    points = []
    try:
        for step, path in files:
            load_weights(model, path, fix="retrain the run to rewrite its snapshots")
            model.eval()
            points.append(snapshot_point(model, batch, step))
    finally:
        model.load_state_dict(own)
    step, interval, fall = phase_change(points)
    return Dynamics(run.model_name, run.seed, str(run.path), points, step, interval, fall)


def runs_dynamics(runs_dir: Path) -> list[Dynamics]:
    from tasks.runs import find_runs

    return [run_dynamics(run) for run in find_runs(runs_dir) if has_snapshots(run)]


# Rendering --------------------------------------------------------------------------------------

def dynamics_table(results: list[Dynamics]) -> str:
    from probes.report.render import table

    rows = []
    for d in results:
        first, last = d.points[0], d.points[-1]
        rows.append([d.model_name, d.seed, d.phase_change_step if d.phase_change_step is not None else "none",
                     f"{first.scored_loss:.2f} -> {last.scored_loss:.2f}",
                     f"{last.scored_accuracy:.1%}", f"{last.other_loss:.2f}", f"{last.other_accuracy:.1%}",
                     f"{max(max(r) for r in last.induction):.2f}"])
    return table(["model", "seed", "phase change", "scored loss", "scored acc", "other loss", "other acc",
                  "best induction score"], rows)


def dynamics_frame(results: list[Dynamics]):
    """Long-form pandas frame: one row per (run, step, curve)."""
    import pandas as pd

    rows = []
    for d in results:
        for p in d.points:
            base = {"model": d.model_name, "seed": d.seed, "step": p.step}
            rows.append({**base, "panel": "loss", "curve": "scored positions", "value": p.scored_loss})
            rows.append({**base, "panel": "loss", "curve": "other positions", "value": p.other_loss})
            for role, scores in (("induction", p.induction), ("previous_token", p.previous_token)):
                for layer, row in enumerate(scores):
                    for head, value in enumerate(row):
                        rows.append({**base, "panel": role, "curve": str(Head(layer, head)), "value": value})
    return pd.DataFrame(rows)


def plot_dynamics(results: list[Dynamics]):
    """One row per seed: losses, induction scores, previous-token scores over steps; a dashed line
    at the detected phase change. `results` are the runs of one model."""
    import seaborn as sns  # here, not in probes.report.figures: 0.7 s of import the other figures do without

    from matplotlib.figure import Figure

    frame = dynamics_frame(results)
    panels = [("loss", "loss (nats)"), ("induction", "induction score"), ("previous_token", "previous-token score")]
    fig = Figure(figsize=(13, 2.8 * len(results)))
    axes = fig.subplots(len(results), len(panels), squeeze=False)
    for row, d in enumerate(results):
        for col, (panel, label) in enumerate(panels):
            ax = axes[row, col]
            data = frame[(frame.seed == d.seed) & (frame.model == d.model_name) & (frame.panel == panel)]
            sns.lineplot(data=data, x="step", y="value", hue="curve", ax=ax, marker="o", markersize=3)
            if d.phase_change_step is not None:
                ax.axvline(d.phase_change_step, color="gray", linestyle="--", linewidth=1)
            ax.set_ylabel(label)
            ax.set_title(f"{d.model_name} seed {d.seed}" + (f": phase change ~{d.phase_change_step}"
                                                           if col == 0 and d.phase_change_step else ""))
            ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return fig


def write_dynamics(results: list[Dynamics], out: Path) -> dict[str, Path]:
    """dynamics.json and one figure per model in `out`; returns {model: figure path}."""
    from common.atomic import write_json
    from probes.report.figures import save

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / JSON, {"runs": [asdict(d) for d in results]})
    figures = {}
    for name in dict.fromkeys(d.model_name for d in results):
        fig = plot_dynamics([d for d in results if d.model_name == name])
        figures[name] = out / f"dynamics_{name}.png"
        save(fig, figures[name])
    return figures


def dynamics_command(runs_dir: Path) -> None:
    results = runs_dynamics(runs_dir)
    if not results:
        raise UsageError(f"no run under {runs_dir} has weight snapshots; train with snapshot_every > 0")
    print(dynamics_table(results))
    figures = write_dynamics(results, runs_dir)
    print(f"\nwrote {Path(runs_dir) / JSON} and " + ", ".join(str(p) for p in figures.values()))


def main(argv=None) -> None:
    from common.cli import folder_path

    parser = Parser(prog="python -m probes.dynamics",
                    description="Replay training snapshots: scored vs other loss, head scores, phase change.")
    parser.add_argument("runs_dir", type=folder_path, nargs="?", default=Path("runs/induction"))
    args = parser.parse_args(argv)
    run_cli(dynamics_command, args.runs_dir)


if __name__ == "__main__":
    main()
