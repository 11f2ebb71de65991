"""Heatmaps for probe results. Each `draw_*` fills one axes; the public functions return a
matplotlib Figure a notebook can show. Figures are made without pyplot, so importing this module
leaves the caller's matplotlib backend alone and no figure stays open after saving.

Drawn with matplotlib's imshow rather than seaborn.heatmap: seaborn renders the whole figure once
per heatmap to decide whether tick labels overlap, which made the report's figures take most of
its time. Labels here are simply rotated.
"""

from __future__ import annotations

from pathlib import Path

from common.figure import Figure
from models.components import Head


LABEL_CHARS = 22  # longest tick label drawn whole; longer ones keep their start and end
TICK_POINTS = 7
CHAR_WIDTH = 0.6  # a character's width as a share of the font size (DejaVu Sans, measured on labels here)


def short_labels(labels: list[str], limit: int = LABEL_CHARS) -> list[str]:
    """Labels cut in the middle to `limit` characters, so two that start alike ("attends referent",
    "attends referent noun") still differ by their ends; whole when cutting would make two equal."""
    keep = (limit - 1) // 2
    cut = [label if len(label) <= limit else f"{label[:keep]}…{label[-(limit - 1 - keep) :]}" for label in labels]
    return cut if len(set(cut)) == len(set(labels)) else list(labels)


def fitted_title(ax, text: str, fontsize: float = 10) -> None:
    """`text` as the axes' title, folded to the axes' width (a one-line title wider than its panel
    was clipped on both sides of the figure)."""
    import textwrap

    figure_width = ax.figure.get_figwidth() * ax.get_position().width
    chars = max(20, int(figure_width * 72 / (fontsize * CHAR_WIDTH)))
    ax.set_title(textwrap.fill(text, chars), fontsize=fontsize)


def heatmap(ax, data, xlabels, ylabels, label: str, cmap: str = "viridis", vmin=0.0, vmax=1.0) -> None:
    image = ax.imshow(data, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(len(xlabels)), short_labels(list(xlabels)), rotation=90, fontsize=TICK_POINTS)
    ax.set_yticks(range(len(ylabels)), ylabels, fontsize=7)
    ax.figure.colorbar(image, ax=ax, label=label, fraction=0.04, pad=0.01)


def head_rows(n_layers: int, n_heads: int) -> list[str]:
    return [str(Head(l, h)) for l in range(n_layers) for h in range(n_heads)]


def draw_attention(ax, result, labels=None, group: str = "all", title: str | None = None) -> None:
    """Mean attention row at the scored positions, one row per head (result: ScoredAttention)."""
    mean = result.mean[group]
    n_layers, n_heads, width = mean.shape
    heatmap(
        ax,
        mean.reshape(n_layers * n_heads, width).numpy(),
        labels or result.labels,
        head_rows(n_layers, n_heads),
        "attention",
    )
    fitted_title(ax, title or f"attention at scored positions ({group}, {result.rows[group]} rows)")
    ax.set_xlabel("key position")


def attention_heatmap(result, labels=None, groups=None):
    """One panel per group (default: all groups and "all")."""
    groups = groups or list(result.mean)
    fig = Figure(figsize=(max(6, 0.45 * len(result.labels) + 2), 1.2 + 2.2 * len(groups)), layout="constrained")
    axes = fig.subplots(len(groups), 1, squeeze=False)
    for ax, group in zip(axes[:, 0], groups):
        draw_attention(ax, result, labels, group)
    return fig


def example_attention_figure(view, heads=None):
    """One example's attention (probes.attention.ExampleAttention): per scored position, one row per
    head over the example's own tokens, each key labelled by its token and the role the task names
    there. `heads`: names like 'L1H0' to show (default all)."""
    n_scored, n_layers, n_heads, width = view.rows.shape
    names = head_rows(n_layers, n_heads)
    shown = [i for i, name in enumerate(names) if heads is None or name in heads]
    labels = [f"{t} [{view.roles[p]}]" if p in view.roles else t for p, t in enumerate(view.tokens)]
    fig = Figure(figsize=(max(6, 0.4 * width + 2), 1.0 + (0.35 * len(shown) + 0.8) * n_scored), layout="constrained")
    axes = fig.subplots(n_scored, 1, squeeze=False)
    for ax, rows, position in zip(axes[:, 0], view.rows, view.positions):
        heatmap(
            ax, rows.reshape(n_layers * n_heads, width)[shown].numpy(), labels, [names[i] for i in shown], "attention"
        )
        fitted_title(ax, f"example {view.example}, query p{position} {view.tokens[position]!r} (0 = none, 1 = all)", 9)
        ax.set_xlabel("key: token [role]")
    return fig


def draw_patching(ax, patching, labels) -> None:
    """Share of the clean - corrupt gap restored by each head's output at each position."""
    recovered = patching.recovered(patching.head_out)  # [layer, pos, head]
    n_layers, width, n_heads = recovered.shape
    grid = recovered.permute(0, 2, 1).reshape(n_layers * n_heads, width).numpy()
    heatmap(ax, grid, labels, head_rows(n_layers, n_heads), "recovered", "RdBu", -1, 1)
    fitted_title(ax, f"activation patching: head output restored (clean -> corrupt, {patching.pairs} pairs)")


def draw_residual(ax, patching, labels) -> None:
    recovered = patching.recovered(patching.resid_pre).numpy()
    heatmap(
        ax, recovered, labels, [f"before block {l + 1}" for l in range(recovered.shape[0])], "recovered", "RdBu", -1, 1
    )
    fitted_title(ax, "activation patching: residual stream restored")


def draw_attention_groups(ax, result, labels) -> None:
    """One row per head and group: the groups of a head side by side, for comparison."""
    groups = [g for g in result.mean if g != "all"] or ["all"]
    n_layers, n_heads, width = result.mean[groups[0]].shape
    rows = [result.mean[g][l, h] for l in range(n_layers) for h in range(n_heads) for g in groups]
    names = [f"{Head(l, h)} {g}" for l in range(n_layers) for h in range(n_heads) for g in groups]
    import torch

    heatmap(ax, torch.stack(rows).numpy(), labels, names, "attention")
    fitted_title(ax, "attention at scored positions, per group")


def draw_roles(ax, view) -> None:
    """By role (probes.attention.RoleView): per head, the attention mass from the scored position to each
    role's key, and the share of the gap restored by patching its output at each role's position."""
    import torch

    from probes.attention import SCORED

    roles = list(view.roles)
    attention = view.attention[SCORED]
    n_layers, n_heads = next(iter(attention.values())).shape
    cells = [
        [float(attention[r][l, h]) if r in attention else float("nan") for r in roles]
        + [float(view.recovered[r][l, h]) if r in view.recovered else float("nan") for r in roles]
        for l in range(n_layers)
        for h in range(n_heads)
    ]
    heatmap(
        ax,
        torch.tensor(cells, device="cpu").numpy(),
        [f"attends {r}" for r in roles] + [f"patched at {r}" for r in roles],
        head_rows(n_layers, n_heads),
        "mass / share of the gap",
        vmin=0.0,
        vmax=1.0,
    )
    fitted_title(
        ax,
        f"by role: attention from the scored position ({view.rows} examples) and patching at each "
        f"pair's own role position ({view.pairs} pairs); 0 = none, 1 = all",
        9,
    )


def run_figure(analysis):
    """Attention per head and group, head patching and residual patching for one run, stacked; a
    run left untraced (its clean - counterfactual gap too small for shares of it to mean anything)
    gets the attention alone. Margins computed from the labels' lengths and the titles' lines
    instead of constrained layout, which cost a second per figure."""
    groups = max(1, len(analysis.attention.mean) - 1)
    n_heads = analysis.patching.head_out.shape[0] * analysis.patching.head_out.shape[2]
    heights = [0.22 * n_heads * groups + 0.4]
    if analysis.circuit is not None:
        heights += [0.22 * n_heads + 0.4, 0.22 * analysis.patching.resid_pre.shape[0] + 0.4]
    if analysis.roles is not None:
        heights += [0.22 * n_heads + 0.4]
    width = max(7, 0.4 * len(analysis.labels) + 3)
    fig = Figure(figsize=(width, sum(heights)))
    axes = fig.subplots(len(heights), 1, gridspec_kw={"height_ratios": heights}, squeeze=False)[:, 0]
    fig.subplots_adjust(left=0.16, right=0.92)  # before drawing: titles fold to the axes' width
    draw_attention_groups(axes[0], analysis.attention, analysis.labels)
    if analysis.circuit is not None:
        draw_patching(axes[1], analysis.patching, analysis.labels)
        draw_residual(axes[2], analysis.patching, analysis.labels)
    if analysis.roles is not None:
        draw_roles(axes[-1], analysis.roles)
    fig.suptitle(f"{analysis.model_name} seed {analysis.seed}")
    fit_margins(fig, axes, heights)
    return fig


def fit_margins(fig, axes, heights: list[float]) -> None:
    """Make room, in inches, above each panel for its title and below it for its rotated tick
    labels and axis label, growing the figure by that much (fixed fractions clipped them)."""

    def label_inches(ax) -> float:
        longest = max((len(t.get_text()) for t in ax.get_xticklabels()), default=0)
        return longest * TICK_POINTS * CHAR_WIDTH / 72 + (0.25 if ax.get_xlabel() else 0.0) + 0.15

    def title_inches(ax) -> float:
        return (ax.get_title().count("\n") + 1) * 0.2 + 0.1

    above = [title_inches(ax) for ax in axes]
    below = [label_inches(ax) for ax in axes]
    # One gap for all (a grid spaces its rows alike): the widest pair of labels below and title above.
    gap = max((b + a for b, a in zip(below[:-1], above[1:])), default=0.0)
    top, bottom = above[0] + 0.45, below[-1]  # 0.45: the suptitle
    total = sum(heights) + gap * (len(heights) - 1) + top + bottom
    fig.set_figheight(total)
    fig.subplots_adjust(top=1 - top / total, bottom=bottom / total, hspace=gap / (sum(heights) / len(heights)))


def save(fig, path) -> None:
    from common.atomic import atomic_write

    # The temp file's suffix is .tmp, so the image format is named explicitly. PNG compression
    # level 1: a third of a run figure's time went to level 6, for files 4% smaller (measured).
    suffix = Path(path).suffix.lstrip(".")
    options = {"pil_kwargs": {"compress_level": 1}} if suffix == "png" else {}
    atomic_write(path, lambda temp: fig.savefig(temp, dpi=90, format=suffix, **options))
