"""The one timing rule every benchmark uses: the best of several rounds (the machine is shared and
noisy; the minimum is the least disturbed measurement)."""

from __future__ import annotations

import time


def best_time(function, rounds: int):
    """(fastest seconds over `rounds` calls, the last call's result)."""
    best, result = float("inf"), None
    for _ in range(rounds):
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result
