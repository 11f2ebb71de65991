"""`toylens scaling`: sqrt(d_k) at initialisation and trained scaled vs unscaled on a task
at several widths (the measurements are in probes/scaling.py; training a family is this layer's)."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from common.cli import Parser, UsageError, jobs_number, positive_int, run_cli, width_number
from probes.chapter.scaling import (
    KEYS,
    PAIRS,
    REPLAY_ROWS,
    ROWS,
    SATURATED,
    TrainedCurve,
    init_figure,
    init_table,
    measure_init,
    replay,
    trained_figure,
    trained_table,
)
from toylens.arguments import add_seeds_argument

OUT = Path("runs/chapter/scaling")
WIDTHS = (32, 64, 256)


def scaling_spec(d_k: int, scaled: bool):
    from models import ModelSpec
    from models.spec import Norm

    return ModelSpec(n_layers=2, d_model=d_k, n_heads=1, mlp=False, norm=Norm.LN, scale_scores=scaled)


def model_name(d_k: int, scaled: bool) -> str:
    return f"dk{d_k}-{'scaled' if scaled else 'unscaled'}"


def scaling_settings(task, steps: int, every: int):
    """The task's own training settings with a fixed budget: no early stop, so curves line up."""
    from tasks.settings import TrainSettings

    settings = TrainSettings.from_dict(task.default_training())
    return replace(
        settings, max_steps=steps, eval_every=every, snapshot_every=every, stop_accuracy=2.0, plateau_steps=steps + 1
    ).validate()


def plan_runs(task, widths, seeds, steps: int, every: int, out: Path):
    from toylens.family import RunPlan

    settings = scaling_settings(task, steps, every)
    return [
        RunPlan(
            task, model_name(d, s), scaling_spec(d, s), seed, settings, Path(out) / model_name(d, s) / f"seed{seed}"
        )
        for d in widths
        for s in (True, False)
        for seed in seeds
    ]


def measure_trained(
    task, widths, seeds, steps: int, every: int, out: Path, jobs: int, overwrite: bool = False, progress: bool = True
) -> list[TrainedCurve]:
    from tasks.training.runs import Run
    from toylens.family import train_family

    plans = plan_runs(task, widths, seeds, steps, every, out)
    train_family(plans, overwrite=overwrite, progress=progress, jobs=jobs)
    curves = []
    for plan in plans:
        run = Run(plan.run_dir)
        curves.append(
            TrainedCurve(plan.spec.d_model, plan.spec.scale_scores, plan.seed, run.metrics["stop_reason"], replay(run))
        )
    return curves


def scaling_command(
    task_name: str, widths, seeds, steps: int, every: int, jobs: int, init_only: bool, out: Path, overwrite: bool
) -> None:
    from common.atomic import write_json
    from common.ownership import claim_check
    from probes.report.figures import save
    from tasks.registry import get_task_class

    if max(widths) > 1024:
        raise UsageError(f"--widths {max(widths)} is too wide to train on a CPU here; use d_k <= 1024")
    if every > steps:
        raise UsageError(f"--every {every} exceeds --steps {steps}; snapshots need every <= steps")
    task = None if init_only else get_task_class(task_name)()
    out = Path(out)
    for name in ("scaling_init.png", "scaling_trained.png", "scaling.json"):  # refused before any work
        claim_check(out / name)
    points = measure_init()
    print(f"at initialisation (unit-variance q, k; {PAIRS} pairs for the variance, {ROWS} rows of {KEYS} keys):")
    print(init_table(points))
    save(init_figure(points), out / "scaling_init.png")
    result = {"init": [asdict(p) for p in points], "keys": KEYS, "saturated_above": SATURATED}
    if task is not None:
        curves = measure_trained(task, widths, seeds, steps, every, out / "runs", jobs, overwrite)
        print(f"\ntrained on {task.name} ({steps} steps, held-out replay of {REPLAY_ROWS} sequences per snapshot):")
        print(trained_table(curves))
        save(trained_figure(curves, task.name), out / "scaling_trained.png")
        result.update(task=task.name, steps=steps, trained=[asdict(c) for c in curves])
    write_json(out / "scaling.json", result)
    print(f"\nwrote {out / 'scaling.json'} and figures in {out}")


def main(argv=None) -> None:
    from common.cli import out_path

    parser = Parser(
        prog="toylens scaling",
        description="sqrt(d_k): scores, saturation, entropy and gradients, at init and in training.",
    )
    parser.add_argument("--task", default="winograd", help="task to train on (default winograd)")
    parser.add_argument("--widths", type=width_number, nargs="+", default=list(WIDTHS), help="d_k values trained")
    add_seeds_argument(parser, "0-1")
    parser.add_argument("--steps", type=positive_int, default=400)
    parser.add_argument("--every", type=positive_int, default=50, help="snapshot and evaluation interval")
    parser.add_argument("--jobs", type=jobs_number, default=2)
    parser.add_argument("--init-only", action="store_true", help="skip training")
    parser.add_argument("--overwrite", action="store_true", help="retrain runs already in --out")
    parser.add_argument("--out", type=out_path, default=OUT)
    args = parser.parse_args(argv)
    run_cli(
        scaling_command,
        args.task,
        args.widths,
        args.seeds,
        args.steps,
        args.every,
        args.jobs,
        args.init_only,
        args.out,
        args.overwrite,
    )
