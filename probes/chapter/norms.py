"""Pre-norm (x + f(LN(x))) against post-norm (LN(x + f(x))), with and without learning-rate warmup
(SEED_NOTES section 3: 12 blocks, 1000 steps, lr 3e-3; held-out perplexity pre 37.82, pre+warmup
37.62, post 308.05, post+warmup 37.88; gradient norm per block at initialisation, last/first block
1.32 against 1.65).

Four variants of one deep model (full blocks: attention, MLP, LayerNorm), trained on a task's data
over seeds: the spec's `norm_place` picks pre or post, the training setting `warmup_steps` the
warmup. Held-out perplexity is exp(mean next-token loss at the task's scored positions; on text,
every position). The gradient norm per block is measured on each freshly built model (before any
step): the L2 norm of the gradient of the training loss on one batch of training sequences
with respect to all of a block's parameters.

This module measures and draws; `toylens norms TASK` (served by `toylens.chapter.norms`)
trains into runs/norms/TASK/<variant>/seed<k>, prints both tables and writes norms.json and
norms.png there.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

from common.cli import UsageError
from common.stats import Interval, mean_interval
from models import ModelSpec
from models.spec import Norm, NormPlace
from models import Model
from tasks.settings import StopReason
from probes.chapter.ladder import steps_text

# (folder, label, norm_place, warmup, the source's held-out perplexity)
VARIANTS = (
    ("pre", "pre-norm", NormPlace.PRE, False, 37.82),
    ("pre+warmup", "pre-norm + warmup", NormPlace.PRE, True, 37.62),
    ("post", "post-norm", NormPlace.POST, False, 308.05),
    ("post+warmup", "post-norm + warmup", NormPlace.POST, True, 37.88),
)
SOURCE_GRADIENT_RATIO = {NormPlace.PRE: 1.32, NormPlace.POST: 1.65}  # last / first block at initialisation


def norm_specs(n_layers: int = 12, d_model: int = 128, n_heads: int = 4) -> dict[str, ModelSpec]:
    """Variant folder name -> spec; n_ctx and d_vocab are filled in from the task's data."""
    if d_model % n_heads:
        raise UsageError(f"--d-model {d_model} must be divisible by {n_heads} heads; try 128")
    base = ModelSpec(n_layers=n_layers, d_model=d_model, n_heads=n_heads, mlp=True, norm=Norm.LN)
    return {name: replace(base, norm_place=place) for name, _, place, _, _ in VARIANTS}


def warmed(name: str) -> bool:
    return next(warmup for folder, _, _, warmup, _ in VARIANTS if folder == name)


@dataclass(frozen=True)
class SeedScore:
    seed: int
    loss: float  # held-out mean next-token cross-entropy (nats)
    perplexity: float  # exp(loss)
    steps: int
    stop_reason: StopReason


@dataclass(frozen=True)
class VariantResult:
    variant: str
    label: str
    norm_place: NormPlace
    warmup_steps: int
    perplexity: Interval  # mean over seeds of exp(held-out loss), t interval
    source_perplexity: float
    seeds: list[SeedScore]


@dataclass(frozen=True)
class GradientNorms:
    """Per block at initialisation, one list per seed; the ratio is last block / first block."""

    norm_place: NormPlace
    per_block: list[list[float]]
    ratio: Interval  # mean over seeds, t interval
    source_ratio: float


@dataclass(frozen=True)
class NormsResult:
    task: str
    task_params: dict
    training: dict  # of the runs without warmup (the others differ in warmup_steps only)
    spec: ModelSpec
    heldout_n: int  # scored held-out positions per seed
    vocabulary: int
    variants: list[VariantResult]
    gradients: list[GradientNorms]


def block_gradient_norms(model: Model, batch, rows: int, seed: int) -> list[float]:
    """L2 norm of d(training loss)/d(block parameters), per block, on `rows` training sequences
    drawn with `seed` (the model is left with its gradients cleared)."""
    import torch

    from models.bridge import hook_free_forward
    from tasks.training.loop import lm_loss

    picked = torch.randperm(len(batch), generator=torch.Generator().manual_seed(seed))[:rows]
    tokens, lengths = batch.tokens[picked], batch.lengths[picked]
    forward = hook_free_forward(model)
    forward.train()
    model.zero_grad(set_to_none=True)
    lm_loss(forward(tokens[:, :-1]), tokens, lengths).backward()
    norms = [
        math.sqrt(sum(float(p.grad.pow(2).sum()) for p in block.parameters() if p.grad is not None))
        for block in model.blocks
    ]
    model.zero_grad(set_to_none=True)
    model.eval()
    return norms


def init_gradients(plans: list, rows: int) -> list[GradientNorms]:
    """Gradient norms per block of each norm place's model as training built it (the run's recorded
    spec and seed: `build_model` is deterministic in both), before its first step."""
    from models import build_model
    from tasks.training.runs import Run

    per_place: dict[NormPlace, list[list[float]]] = {}
    for plan in plans:
        if warmed(plan.model_name):  # warmup changes training, not the model at initialisation
            continue
        run = Run(plan.run_dir)
        model = build_model(run.spec, seed=run.seed)
        per_place.setdefault(plan.spec.norm_place, []).append(
            block_gradient_norms(model, run.batches()["train"], rows, run.seed)
        )
    return [
        GradientNorms(
            place,
            norms,
            mean_interval([n[-1] / n[0] for n in norms], bounds=(0.0, math.inf)),
            SOURCE_GRADIENT_RATIO[place],
        )
        for place, norms in per_place.items()
    ]


def seed_score(run) -> SeedScore:
    from probes.accuracy import run_accuracy

    heldout = run_accuracy(run).splits["heldout"]
    return SeedScore(
        run.seed, heldout.loss, math.exp(heldout.loss), int(run.metrics.get("steps", 0)), run.metrics["stop_reason"]
    )


def measure_variants(plans: list) -> list[VariantResult]:
    from tasks.training.runs import Run

    by_variant: dict[str, list] = {}
    for plan in plans:
        by_variant.setdefault(plan.model_name, []).append(plan)
    results = []
    for folder, label, place, _, source in VARIANTS:
        if folder not in by_variant:
            continue
        seeds = [seed_score(Run(plan.run_dir)) for plan in by_variant[folder]]
        results.append(
            VariantResult(
                folder,
                label,
                place,
                by_variant[folder][0].settings.warmup_steps,
                mean_interval([s.perplexity for s in seeds], bounds=(1.0, math.inf)),
                source,
                seeds,
            )
        )
    return results


def measure_norms(plans: list, rows: int) -> NormsResult:
    from tasks.training.runs import Run

    first = Run(plans[0].run_dir)
    plain = next(plan for plan in plans if not warmed(plan.model_name))
    variants = measure_variants(plans)
    task = plans[0].task
    return NormsResult(
        task.name,
        task.params_dict(),
        asdict(plain.settings),
        first.spec,
        run_heldout_n(first),
        len(task.vocabulary()),
        variants,
        init_gradients(plans, rows),
    )


def run_heldout_n(run) -> int:
    from probes.accuracy import run_accuracy

    return run_accuracy(run).splits["heldout"].n


def norms_table(result: NormsResult) -> str:
    from probes.chapter.ladder import interval_text
    from probes.report.render import table

    spec, training = result.spec, result.training
    rows = [
        [
            v.label,
            v.warmup_steps or "-",
            len(v.seeds),
            interval_text(v.perplexity, 2),
            ", ".join(f"{s.perplexity:.2f}" for s in v.seeds),
            f"{v.source_perplexity:.2f}",
            steps_text(v.seeds),
        ]
        for v in result.variants
    ]
    head = (
        f"{result.task}: {spec.n_layers} blocks, d_model {spec.d_model}, {spec.n_heads} heads, context "
        f"{spec.n_ctx}, vocabulary {result.vocabulary}; AdamW lr {training['lr']}, batch {training['batch_size']}, "
        f"at most {training['max_steps']} steps. Held-out perplexity exp(mean next-token loss), n = "
        f"{result.heldout_n} scored positions per seed; mean [95% t interval over seeds]; 1 = always right, "
        f"{result.vocabulary} = uniform guessing. Source: 12 blocks, 1000 steps, lr 3e-3, its own text.\n"
    )
    grads = [
        [
            g.norm_place + "-norm",
            len(g.per_block),
            " ".join(f"{x:.3g}" for x in mean_per_block(g.per_block)),
            interval_text(g.ratio),
            f"{g.source_ratio:.2f}",
        ]
        for g in result.gradients
    ]
    return (
        head
        + table(["variant", "warmup steps", "seeds", "held-out perplexity", "per seed", "source", "steps"], rows)
        + "\n\nGradient norm per block at initialisation (L2 over the block's parameters, training loss on one "
        "batch of training sequences), first to last block, mean over seeds; last/first per seed, mean [95% t]\n"
        + table(["norm", "seeds", "per block (mean)", "last / first", "source"], grads)
    )


def mean_per_block(per_seed: list[list[float]]) -> list[float]:
    return [sum(values) / len(values) for values in zip(*per_seed)]


def norms_figure(result: NormsResult):
    """Left: held-out perplexity per variant (each seed a dot, the mean a bar with its interval,
    the source's figure a cross), log scale. Right: gradient norm per block at initialisation."""
    from common.figure import Figure

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    x = range(len(result.variants))
    for i, v in enumerate(result.variants):
        low = v.perplexity.low if not math.isnan(v.perplexity.low) else v.perplexity.value
        high = v.perplexity.high if not math.isnan(v.perplexity.high) else v.perplexity.value
        left.bar(
            i,
            v.perplexity.value,
            color="#9ecae1",
            yerr=[[v.perplexity.value - low], [high - v.perplexity.value]],
            capsize=4,
        )
        left.plot([i] * len(v.seeds), [s.perplexity for s in v.seeds], "o", color="#08519c", markersize=4)
        left.plot(i, v.source_perplexity, "x", color="#d62728", markersize=8, label="source" if i == 0 else None)
    left.set_yscale("log")
    left.set_xticks(list(x), [v.label for v in result.variants], rotation=20, ha="right")
    left.set_ylabel("held-out perplexity")
    left.legend()
    for g in result.gradients:
        right.plot(range(1, len(g.per_block[0]) + 1), mean_per_block(g.per_block), "o-", label=f"{g.norm_place}-norm")
    right.set_xlabel("block")
    right.set_ylabel("gradient norm at initialisation")
    right.legend()
    fig.suptitle(
        f"{result.task}: pre- vs post-norm, {result.spec.n_layers} blocks ({len(result.variants[0].seeds)} seeds)"
    )
    return fig
