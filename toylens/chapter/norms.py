"""`toylens norms TASK`: train pre- and post-norm models (`probes.chapter.norms`), each
with and without learning-rate warmup, on TASK's data over seeds through the family training
(`toylens.family`), then measure held-out perplexity and the gradient norm per block at
initialisation, print, and write norms.json and norms.png beside the runs."""

from __future__ import annotations

from dataclasses import asdict, replace
from pathlib import Path

from common.cli import Bounded, Parser, UsageError, run_cli, width_number
from common.atomic import write_json
from common.ownership import claim_check
from probes.chapter.norms import VARIANTS, norm_specs, warmed
from toylens.family import RunPlan

NORMS_JSON = "norms.json"
NORMS_FIGURE = "norms.png"
MAX_LAYERS, MAX_WIDTH = 48, 4096
# The source's recipe: 1000 steps at lr 3e-3.
SOURCE_TRAINING = {"max_steps": 1000, "lr": 3e-3}


def norm_plans(
    task, seeds: list[int], settings, warmup_steps: int, out: Path, n_layers: int, d_model: int, variants=None
) -> list[RunPlan]:
    specs = norm_specs(n_layers, d_model)
    names = variants or list(specs)
    unknown = [name for name in names if name not in specs]
    if unknown:
        raise UsageError(f"unknown variant(s) {unknown}; known: {', '.join(specs)}")
    return [
        RunPlan(
            task,
            name,
            specs[name],
            seed,
            replace(settings, warmup_steps=warmup_steps if warmed(name) else 0),
            Path(out) / name / f"seed{seed}",
        )
        for name in names
        for seed in seeds
    ]


def norms_command(args) -> None:
    from probes.chapter.norms import measure_norms, norms_figure, norms_table
    from probes.report.figures import save
    from toylens.arguments import model_list, settings_from_args, task_from_args
    from toylens.family import train_family

    task = task_from_args(args.task_cls, args)
    if args.layers > MAX_LAYERS or args.d_model > MAX_WIDTH:
        raise UsageError(
            f"--layers {args.layers} / --d-model {args.d_model}: use at most {MAX_LAYERS} blocks and "
            f"width {MAX_WIDTH} for a toy model"
        )
    # One recipe for every variant (no per-model settings).
    settings = settings_from_args(task, args, model_name=None, **SOURCE_TRAINING, snapshot_every=0)
    warmup = max(1, settings.max_steps // 10) if args.warmup_steps is None else args.warmup_steps
    if not 0 < warmup <= settings.max_steps:
        raise UsageError(f"--warmup-steps {warmup} must lie in 1..{settings.max_steps} (the step budget)")
    out = args.out or Path("runs") / "norms" / task.name
    plans = norm_plans(
        task, args.seeds, settings, warmup, out, args.layers, args.d_model, model_list(args.variants, "--variants")
    )
    if not any(not warmed(plan.model_name) for plan in plans):
        raise UsageError(
            "--variants needs pre or post (without warmup) too: the gradients at initialisation "
            "are measured on those runs' models"
        )
    for path in (out / NORMS_JSON, out / NORMS_FIGURE):  # a user's file there: refused before training
        claim_check(path)
    train_family(plans, overwrite=args.overwrite, progress=not args.no_progress, jobs=args.jobs)
    result = measure_norms(plans, settings.batch_size)
    print(norms_table(result))
    write_json(out / NORMS_JSON, asdict(result))
    save(norms_figure(result), out / NORMS_FIGURE)
    print(f"\nwrote {out / NORMS_JSON} and {out / NORMS_FIGURE}")


def main(argv=None) -> None:
    import sys

    from tasks.registry import get_task_class
    from toylens.arguments import add_jobs_arguments, add_settings_arguments, add_task_params

    argv = list(sys.argv[1:] if argv is None else argv)

    def body():
        task_name = argv[0] if argv and not argv[0].startswith("-") else None
        parser = Parser(
            prog="toylens norms TASK",
            description="Train pre- and post-norm models, with and without learning-rate warmup (--warmup-steps: "
            "its length in the +warmup variants, default a tenth of the steps), "
            "on TASK's data; compare held-out perplexity and gradient norms at initialisation.",
        )
        if task_name is None:
            parser.add_argument("task", help="a registered task (toylens list), e.g. text")
            parser.parse_args(argv)
            raise UsageError("toylens norms needs a task name first, e.g. toylens norms text")
        task_cls = get_task_class(task_name)
        add_settings_arguments(parser, f"runs/norms/{task_name}")
        parser.add_argument("--variants", help=f"comma-separated (default all: {', '.join(v[0] for v in VARIANTS)})")
        parser.add_argument(
            "--layers", type=Bounded(int, 1, 256, "blocks"), default=12, help="blocks (default 12, as the source)"
        )
        parser.add_argument("--d-model", type=width_number, default=128, help="width (default 128)")
        parser.add_argument("--overwrite", action="store_true", help="retrain runs already trained")
        add_jobs_arguments(parser)
        add_task_params(parser, task_cls)
        args = parser.parse_args(argv[1:])
        args.task_cls = task_cls
        norms_command(args)

    run_cli(body)
