"""The one matplotlib Figure every toylens figure is drawn on: its text is drawn as written.

Labels come from task plugins, corpora and run names; matplotlib reads a label with two '$' as
mathtext and a stray '\\' or '^' inside them is a ParseException at draw time. Rather than escape
each label where it is set, the figure turns math parsing off for every text it holds as it is
drawn (saved, or shown in a notebook), tick labels made during the draw included."""

from __future__ import annotations

import matplotlib
from matplotlib.figure import Figure as MatplotlibFigure
from matplotlib.axis import Axis
from matplotlib.text import Text


class Figure(MatplotlibFigure):
    def draw(self, renderer):
        with matplotlib.rc_context({"text.parse_math": False}):  # ticks the draw itself creates
            for text in texts(self):
                text.set_parse_math(False)
            return super().draw(renderer)


def texts(artist):
    """Every Text under `artist`, as `findobj(Text)` finds them, except under the axis of an Axes
    drawn without one (`axis("off")`): asking such an axis for its children makes its ticks, which
    are never drawn (a sixth of a circuit figure's save, measured)."""
    if isinstance(artist, Text):
        yield artist
    if isinstance(artist, Axis) and artist.axes is not None and not artist.axes.axison:
        return
    for child in artist.get_children():
        yield from texts(child)
