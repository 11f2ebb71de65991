"""Names for a model's parts that every layer shares."""

from __future__ import annotations

import re
from typing import NamedTuple

from common.cli import UsageError

HEAD_NAME = re.compile(r"^L(\d+)H(\d+)$")


class Head(NamedTuple):
    """One attention head. A tuple, so `(layer, head)` pairs and `Head`s are interchangeable as
    keys and in unpacking; `str()` gives the one display form, e.g. L0H1, and `parse` reads it."""

    layer: int
    head: int

    def __str__(self) -> str:
        return f"L{self.layer}H{self.head}"

    @classmethod
    def parse(cls, text: str) -> "Head":
        match = HEAD_NAME.match(text.strip())
        if not match:
            raise UsageError(f"head {text!r} is not of the form L<layer>H<head>, e.g. L0H1")
        return cls(int(match[1]), int(match[2]))

    @classmethod
    def of(cls, value) -> "Head":
        """A Head from a Head, a (layer, head) pair or a name like "L0H1"."""
        if isinstance(value, str):
            return cls.parse(value)
        layer, head = (int(v) for v in value)
        return cls(layer, head)


class HeadSet(tuple):
    """Distinct heads in a given order, e.g. the senders of a joint path; `str()` joins their names
    (L0H1+L0H3), the form reports and stored JSON show."""

    def __new__(cls, heads=()):
        heads = tuple(heads)
        if len(heads) == 2 and all(isinstance(v, int) for v in heads):
            heads = (heads,)
        return super().__new__(cls, dict.fromkeys(Head.of(head) for head in heads))

    def __str__(self) -> str:
        return "+".join(str(head) for head in self)

    @property
    def layers(self) -> set[int]:
        return {head.layer for head in self}
