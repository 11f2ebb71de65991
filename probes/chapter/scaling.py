"""Why attention scores are divided by sqrt(d_k), measured twice.

At initialisation (no model): q and k with independent unit-variance entries, so Var(q.k) = d_k.
For each d_k, softmax rows of KEYS keys are scored scaled (q.k / sqrt(d_k)) and unscaled, and each
row is summarised by its max weight (saturated when > SATURATED), its entropy (nats; 0 = one-hot,
ln KEYS = uniform) and the trace of its softmax Jacobian, sum_i p_i (1 - p_i) = 1 - sum_i p_i^2
(0 for a one-hot row, where no gradient flows through the softmax; 1 - 1/KEYS for a uniform one).

In training: 2-layer, 1-head attention-only models (LayerNorm, learned positions; d_k = d_model)
trained on a task at several widths with `scale_scores` on and off, a fixed step budget, weight
snapshots replayed on held-out examples: score std, entropy, saturated share and held-out accuracy
over training. Scores are recomputed from each attention module's own q, k maps and divisor
(TransformerLens 4.3's bridge fills hook_attn_scores with the softmax pattern, measured), over
every real query position with at least two keys, pooled over both layers.

`toylens scaling` (toylens/chapter/scaling.py: it trains) prints both tables and writes
scaling.json and two figures to --out.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from tasks.settings import StopReason
from models import Model


DIMS = (4, 8, 16, 32, 64, 128, 256, 512, 1024)
PAIRS = 20_000  # q.k pairs for the variance (the source's count)
KEYS = 64  # keys per softmax row (the source: "one of 64 tokens")
ROWS = 2_000  # softmax rows per d_k
SATURATED = 0.99
REPLAY_ROWS = 256  # held-out sequences each snapshot is replayed on


@dataclass(frozen=True)
class RowStats:
    score_std: float
    saturated: float  # share of rows whose largest weight exceeds SATURATED
    entropy: float  # mean nats
    jacobian_trace: float  # mean of 1 - sum p^2
    rows: int


@dataclass(frozen=True)
class InitPoint:
    d_k: int
    var_qk: float
    scaled: RowStats
    unscaled: RowStats


@dataclass(frozen=True)
class TrainedPoint:
    step: int
    heldout_accuracy: float
    heldout_loss: float
    attention: RowStats  # every layer's rows pooled
    layers: list[RowStats]


@dataclass(frozen=True)
class TrainedCurve:
    d_k: int
    scaled: bool
    seed: int
    stop_reason: StopReason
    points: list[TrainedPoint]


def row_stats(scores, valid=None) -> RowStats:
    """Summarise softmax rows of `scores` [..., keys]; `valid` [..., keys] marks real keys and every
    row must have at least one."""
    import torch

    if valid is None:
        valid = torch.ones_like(scores, dtype=torch.bool)
    weights = torch.softmax(scores.masked_fill(~valid, float("-inf")), dim=-1).reshape(-1, scores.shape[-1])
    return RowStats(
        score_std=scores[valid].std().item(),
        saturated=(weights.max(-1).values > SATURATED).float().mean().item(),
        entropy=-torch.special.xlogy(weights, weights).sum(-1).mean().item(),
        jacobian_trace=(1 - (weights**2).sum(-1)).mean().item(),
        rows=weights.shape[0],
    )


def init_point(d_k: int, seed: int = 0, pairs: int = PAIRS, rows: int = ROWS, keys: int = KEYS) -> InitPoint:
    import torch

    generator = torch.Generator("cpu").manual_seed(seed)
    q, k = torch.randn(2, pairs, d_k, generator=generator, device="cpu")
    var_qk = (q * k).sum(-1).var().item()
    chunks = []
    for start in range(0, rows, 256):  # [256, keys, d_k] at a time: 64 MB at d_k = 1024
        n = min(256, rows - start)
        query = torch.randn(n, 1, d_k, generator=generator, device="cpu")
        chunks.append((query * torch.randn(n, keys, d_k, generator=generator, device="cpu")).sum(-1))
    scores = torch.cat(chunks)
    return InitPoint(d_k, var_qk, row_stats(scores / math.sqrt(d_k)), row_stats(scores))


def measure_init(dims=DIMS, seed: int = 0) -> list[InitPoint]:
    return [init_point(d, seed) for d in dims]


# Training -----------------------------------------------------------------------------------------


def attention_inputs(model: Model):
    """Forward pre-hooks that keep each native attention module's input; returns (store, handles)."""
    from models.bridge import native_attention

    store, handles = {}, []
    for layer, block in enumerate(model.blocks):

        def keep(module, args, kwargs, layer=layer):
            store[layer] = args[0] if args else kwargs["hidden_states"]

        handles.append(native_attention(block).register_forward_pre_hook(keep, with_kwargs=True))
    return store, handles


def attention_scores(attention, hidden):
    """[batch, heads, q, k] pre-softmax scores, from the module's own maps and divisor (the lines of
    TransformerLens's NativeAttention.forward before its mask)."""
    batch, seq, _ = hidden.shape
    q = attention.q(hidden).view(batch, seq, attention.n_heads, attention.d_head).transpose(1, 2)
    k = attention.k(hidden).view(batch, seq, attention.n_kv_heads, attention.d_head).transpose(1, 2)
    if attention.rotary is not None:
        q, k = attention.rotary.apply_rope(q, k)
    return q @ k.transpose(-2, -1) / attention.scale


def trained_point(model: Model, batch, step: int) -> TrainedPoint:
    import torch

    from models.bridge import device_of, native_attention
    from tasks.evaluate import logits_at_scored, score_logits

    batch = batch.to(device_of(model))
    store, handles = attention_inputs(model)
    try:
        with torch.no_grad():  # one forward (not run_logits' chunks): the hooks keep one input per layer
            scored = score_logits(logits_at_scored(model(batch.inputs), batch), batch)
    finally:
        for handle in handles:
            handle.remove()
    seq = batch.inputs.shape[1]
    positions = torch.arange(seq, device=batch.lengths.device)
    query, key = positions[:, None], positions[None, :]
    real_query = (query[None] < (batch.lengths[:, None, None] - 1)) & (query[None] >= 1)
    valid = ((key <= query)[None] & real_query)[:, None]  # [batch, 1, q, k]
    with torch.no_grad():
        scores = torch.cat(
            [attention_scores(native_attention(block), store[layer]) for layer, block in enumerate(model.blocks)], dim=1
        )
    valid = valid.expand_as(scores)
    keep = valid.any(-1)
    per_layer = [
        row_stats(scores[:, [layer]][keep[:, [layer]]], valid[:, [layer]][keep[:, [layer]]])
        for layer in range(scores.shape[1])
    ]
    return TrainedPoint(step, scored.accuracy, scored.loss.item(), row_stats(scores[keep], valid[keep]), per_layer)


def replay(run, rows: int = REPLAY_ROWS) -> list[TrainedPoint]:
    from models.checkpoint import load_weights
    from probes.dynamics import snapshot_files
    from tasks.data import spread_subset

    model = run.load_model()
    batch = spread_subset(run.batches()["heldout"], rows)
    points = []
    for step, path in snapshot_files(run.path):
        load_weights(model, path, fix="rerun with --overwrite to retrain it")
        model.eval()
        points.append(trained_point(model, batch, step))
    return points


# Rendering ----------------------------------------------------------------------------------------


def init_table(points: list[InitPoint]) -> str:
    from probes.report.render import table

    rows = [
        [p.d_k, f"{p.var_qk:.2f}"]
        + [
            f"{getattr(s, f):{fmt}}"
            for f, fmt in (("saturated", ".1%"), ("entropy", ".2f"), ("jacobian_trace", ".3f"))
            for s in (p.scaled, p.unscaled)
        ]
        for p in points
    ]
    return table(
        [
            "d_k",
            "Var(q.k)",
            "saturated scaled",
            "unscaled",
            "entropy scaled",
            "unscaled",
            "Jacobian trace scaled",
            "unscaled",
        ],
        rows,
    )


def trained_table(curves: list[TrainedCurve]) -> str:
    from probes.report.render import table

    rows = []
    for c in curves:
        first, last = c.points[0], c.points[-1]
        peak = max(p.attention.score_std for p in c.points)
        best = max(c.points, key=lambda p: p.heldout_accuracy)
        rows.append(
            [
                c.d_k,
                "yes" if c.scaled else "no",
                c.seed,
                last.step,
                f"{best.heldout_accuracy:.1%} ({best.step})"
                + (" COLLAPSED" if best.heldout_accuracy - last.heldout_accuracy > 0.25 else ""),
                f"{first.attention.score_std:.2f} -> {last.attention.score_std:.2f} (max {peak:.2f})",
                f"{last.attention.entropy:.2f}",
                f"{last.attention.saturated:.1%}",
                f"{last.attention.jacobian_trace:.3f}",
                f"{last.heldout_accuracy:.1%}",
                f"{last.heldout_loss:.3f}",
            ]
        )
    return table(
        [
            "d_k",
            "scaled",
            "seed",
            "step",
            "best held-out (step)",
            "score std (init -> end)",
            "entropy",
            "saturated",
            "Jacobian trace",
            "held-out acc",
            "held-out loss",
        ],
        rows,
    )


def init_figure(points: list[InitPoint]):
    import pandas as pd
    import seaborn as sns

    from common.figure import Figure

    frame = pd.DataFrame(
        [
            {"d_k": p.d_k, "scores": name, "Var(q.k)": p.var_qk, **asdict(stats)}
            for p in points
            for name, stats in (("/ sqrt(d_k)", p.scaled), ("unscaled", p.unscaled))
        ]
    )
    panels = [
        ("Var(q.k)", "Var(q.k) (line: = d_k)"),
        ("saturated", f"share of rows with max weight > {SATURATED}"),
        ("entropy", f"row entropy (nats; uniform = ln {KEYS} = {math.log(KEYS):.2f})"),
        ("jacobian_trace", "softmax Jacobian trace (1 - sum p^2)"),
    ]
    fig = Figure(figsize=(17, 3.6), layout="constrained")
    axes = fig.subplots(1, len(panels))
    for ax, (column, label) in zip(axes, panels):
        sns.lineplot(data=frame, x="d_k", y=column, hue="scores", marker="o", ax=ax, legend=ax is axes[0])
        ax.set_xscale("log", base=2)
        ax.set_ylabel(label, fontsize=8)
    axes[0].set_yscale("log", base=2)
    axes[0].plot(frame.d_k, frame.d_k, color="gray", linestyle=":", linewidth=1)
    fig.suptitle(f"at initialisation: unit-variance q, k; {ROWS} rows of {KEYS} keys per d_k")
    return fig


def trained_figure(curves: list[TrainedCurve], task_name: str):
    import pandas as pd
    import seaborn as sns

    from common.figure import Figure

    frame = pd.DataFrame(
        [
            {
                "step": p.step,
                "d_k": str(c.d_k),
                "scores": "/ sqrt(d_k)" if c.scaled else "unscaled",
                "seed": c.seed,
                "held-out accuracy": p.heldout_accuracy,
                **asdict(p.attention),
            }
            for c in curves
            for p in c.points
        ]
    )
    panels = [
        ("score_std", "score std"),
        ("entropy", "row entropy (nats)"),
        ("saturated", f"share of rows max > {SATURATED}"),
        ("held-out accuracy", "held-out accuracy"),
    ]
    fig = Figure(figsize=(17, 3.6), layout="constrained")
    axes = fig.subplots(1, len(panels))
    for ax, (column, label) in zip(axes, panels):
        # The band is the range over seeds (the 100% percentile interval), not a confidence interval.
        sns.lineplot(
            data=frame,
            x="step",
            y=column,
            hue="d_k",
            style="scores",
            marker="o",
            markersize=3,
            ax=ax,
            errorbar=("pi", 100),
            legend=ax is axes[-1],
        )
        ax.set_ylabel(label)
    axes[-1].legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    axes[0].set_yscale("log")
    fig.suptitle(
        f"trained on {task_name}: 2-layer 1-head attention-only, held-out replay "
        f"({len({c.seed for c in curves})} seed(s); band = range over seeds)"
    )
    return fig
