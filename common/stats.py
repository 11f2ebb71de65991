"""Confidence intervals (Wilson for one proportion, Student t for a mean over seeds) and `share`, the
one place a measurement is put on a scale between two reference measurements."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high, "n": self.n}


def wilson(successes: int, n: int, z: float = 1.959964) -> Interval:
    if n == 0:
        return Interval(math.nan, math.nan, math.nan, 0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half), n)


def mean_interval(values: list[float], confidence: float = 0.95, bounds: tuple[float, float] = (0.0, 1.0)) -> Interval:
    """Mean over seeds with a t interval clipped to `bounds` (a rate: [0, 1]; a loss: (0, inf));
    one seed gets no interval (nan bounds)."""
    from scipy.stats import t

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return Interval(mean, max(bounds[0], mean - half), min(bounds[1], mean + half), n)


GAP_EPSILON = 1e-6


def share(value, zero: float, one: float):
    """(value - zero) / (one - zero): 0 where `value` equals the reference measured as `zero`, 1 where
    it equals `one`. NaN (a float, or a tensor of NaNs) when the two references coincide: then no
    share of the gap means anything. `value` may be a float or a tensor."""
    gap = one - zero
    if abs(gap) < GAP_EPSILON or math.isnan(gap):
        return (value - zero) * math.nan
    return (value - zero) / gap
