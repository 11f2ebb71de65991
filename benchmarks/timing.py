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


def interleaved_ratio(ours, theirs, rounds: int):
    """Time `ours` and `theirs` back to back `rounds` times (which goes first alternates), so both
    see the same load on a shared machine, in this process's CPU seconds (`time.process_time`: on
    a machine with more runnable jobs than cores, wall time mostly measures the wait for a core;
    both sides run one thread). Returns (the Interval of theirs / ours over the rounds: the
    speed-up, mean with a 95% t interval; ours' last result; theirs' last result)."""
    from common.stats import mean_interval

    times, results = {0: [], 1: []}, {}
    for round_ in range(rounds):
        for side in (0, 1) if round_ % 2 == 0 else (1, 0):
            start = time.process_time()
            results[side] = (ours, theirs)[side]()
            times[side].append(time.process_time() - start)
    speedups = [t / o for o, t in zip(times[0], times[1])]
    return mean_interval(speedups, bounds=(0.0, float("inf"))), results[0], results[1]
