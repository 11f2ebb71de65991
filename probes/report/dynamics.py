"""Training dynamics rendered: the phase-change table, one figure per model, dynamics.json, and
`toylens dynamics RUNS_DIR` (prints the table, writes RUNS_DIR/dynamics.json and
dynamics_<model>.png). The measurements are probes.dynamics's."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from common.cli import Parser, UsageError, run_cli
from models.components import Head
from probes.dynamics import JSON, Dynamics, runs_dynamics


def dynamics_table(results: list[Dynamics]) -> str:
    from probes.report.render import table

    rows = []
    for d in results:
        first, last = d.points[0], d.points[-1]
        rows.append(
            [
                d.model_name,
                d.seed,
                d.phase_change_step if d.phase_change_step is not None else "none",
                f"{first.scored_loss:.2f} -> {last.scored_loss:.2f}",
                f"{last.scored_accuracy:.1%}",
                f"{last.other_loss:.2f}",
                f"{last.other_accuracy:.1%}",
                f"{max(max(r) for r in last.induction):.2f}",
            ]
        )
    return table(
        [
            "model",
            "seed",
            "phase change",
            "scored loss",
            "scored acc",
            "other loss",
            "other acc",
            "best induction score",
        ],
        rows,
    )


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

    from common.figure import Figure

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
            ax.set_title(
                f"{d.model_name} seed {d.seed}"
                + (f": phase change ~{d.phase_change_step}" if col == 0 and d.phase_change_step else "")
            )
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


def timeline_figure(timeline, dynamics: Dynamics, out: Path) -> Path:
    """Each circuit edge's effect (share of the final gap) over training, the phase change marked."""
    from common.figure import Figure

    from probes.report.figures import save

    fig = Figure(figsize=(7, 3.6), layout="constrained")
    ax = fig.add_subplot()
    order = sorted(range(len(timeline.edges)), key=lambda i: -abs(float(timeline.effect[-1, i])))
    for i in order[:10]:
        ax.plot(timeline.steps, timeline.effect[:, i].tolist(), marker=".", label=str(timeline.edges[i]))
    if dynamics.phase_change_step is not None:
        ax.axvline(dynamics.phase_change_step, color="grey", linestyle="--", label="phase change")
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set_xlabel("training step")
    ax.set_ylabel("effect alone / final gap")
    ax.set_title(f"{dynamics.model_name} seed {dynamics.seed}: circuit edges over training", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    path = Path(out) / f"timeline_{dynamics.model_name}_seed{dynamics.seed}.png"
    save(fig, path)
    return path


def dynamics_command(runs_dir: Path) -> None:
    results = runs_dynamics(runs_dir)
    if not results:
        raise UsageError(f"no run under {runs_dir} has weight snapshots; train with snapshot_every > 0")
    print(dynamics_table(results))
    figures = write_dynamics(results, runs_dir)
    print(f"\nwrote {Path(runs_dir) / JSON} and " + ", ".join(str(p) for p in figures.values()))


def main(argv=None) -> None:
    from common.cli import folder_path

    parser = Parser(
        prog="toylens dynamics",
        description="Replay training snapshots: scored vs other loss, head scores, phase change.",
    )
    parser.add_argument("runs_dir", type=folder_path, nargs="?", default=Path("runs/induction"))
    args = parser.parse_args(argv)
    run_cli(dynamics_command, args.runs_dir)
