"""The one matplotlib Figure every toylens figure is drawn on: its text is drawn as written.

Labels come from task plugins, corpora and run names; matplotlib reads a label with two '$' as
mathtext and a stray '\\' or '^' inside them is a ParseException at draw time. Rather than escape
each label where it is set, the figure turns math parsing off for every text it holds as it is
drawn (saved, or shown in a notebook), tick labels made during the draw included."""

from __future__ import annotations

import matplotlib
from matplotlib.figure import Figure as MatplotlibFigure
from matplotlib.text import Text


class Figure(MatplotlibFigure):
    def draw(self, renderer):
        with matplotlib.rc_context({"text.parse_math": False}):  # ticks the draw itself creates
            for text in self.findobj(Text):
                text.set_parse_math(False)
            return super().draw(renderer)
