"""The report's run figure draws every title and label inside the figure, and tick labels that
differ as their roles do (issue #37: the role panel's title was clipped on both sides and its x
labels cut after 14 characters, so two roles that start alike read as one label twice)."""

from __future__ import annotations

from itertools import pairwise
from types import SimpleNamespace

import torch

from probes.attention import SCORED, RoleView


def analysis(roles=("referent noun", "referent noun's verb", "other noun", "pronoun")):
    n_layers, n_heads, width = 2, 2, 12
    labels = [f"p{i} {'token' * 2}" for i in range(width)]
    mean = {g: torch.rand(n_layers, n_heads, width) for g in ("all", "crossed", "crosser")}
    patching = SimpleNamespace(
        head_out=torch.rand(n_layers, width, n_heads),
        resid_pre=torch.rand(n_layers, width),
        recovered=lambda values: values,
        pairs=64,
    )
    view = RoleView(
        tuple(roles),
        480,
        {SCORED: {r: torch.rand(n_layers, n_heads) for r in roles}},
        64,
        {r: torch.rand(n_layers, n_heads) for r in roles},
    )
    return SimpleNamespace(
        attention=SimpleNamespace(mean=mean, rows={g: 100 for g in mean}),
        patching=patching,
        circuit=object(),
        roles=view,
        labels=labels,
        model_name="attn-only-2x1",
        seed=2,
    )


def texts(fig):
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def test_every_title_and_label_of_the_run_figure_lies_inside_the_figure():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from probes.report.figures import run_figure

    fig = run_figure(analysis())
    renderer = FigureCanvasAgg(fig).get_renderer()
    frame = fig.bbox
    outside = []
    for text in texts(fig):
        box = text.get_window_extent(renderer)
        if box.x0 < frame.x0 - 1 or box.x1 > frame.x1 + 1 or box.y0 < frame.y0 - 1 or box.y1 > frame.y1 + 1:
            outside.append(text.get_text())
    assert not outside, outside


def test_titles_do_not_run_into_the_panel_above():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from probes.report.figures import run_figure

    fig = run_figure(analysis())
    renderer = FigureCanvasAgg(fig).get_renderer()
    axes = [ax for ax in fig.axes if ax.get_title()]
    for upper, lower in pairwise(axes):
        lowest_label = min(t.get_window_extent(renderer).y0 for t in upper.get_xticklabels() if t.get_text())
        assert lower.title.get_window_extent(renderer).y1 <= lowest_label, (upper.get_title(), lower.get_title())


def test_role_labels_that_start_alike_stay_apart():
    from probes.report.figures import run_figure

    fig = run_figure(analysis())
    roles_axes = next(ax for ax in fig.axes if ax.get_title().startswith("by role"))
    shown = [t.get_text() for t in roles_axes.get_xticklabels()]
    assert len(set(shown)) == len(shown), shown
