"""The one timing rule every benchmark uses. The machine is shared and noisy, so nothing is timed
once: each measurement is repeated over rounds and printed with its spread (mean with a 95% t
interval). Every round times the same cold work: `setup` (untimed) builds fresh state for each
call, so no round reads what an earlier round computed (a memoised edge set, a recorded run). A
time too short to be a measurement (cached work, or work that did not run) is refused, not
divided by."""

from __future__ import annotations

import time

# process_time ticks in microseconds but a busy machine's accounting is coarser; a baseline under
# 10 ms of CPU is work that was not done (a cache hit), and a ratio over it means nothing.
MIN_SECONDS = 0.01


def check_measured(seconds: float, what: str, round_: int) -> None:
    """Refuse a time too short to be a measurement (UsageError, one line)."""
    from common.cli import UsageError

    if not seconds >= MIN_SECONDS:
        raise UsageError(
            f"{what} took {seconds:.4f} CPU s in round {round_ + 1}, under {MIN_SECONDS} s: not a measurement "
            "(its work was cached or skipped); time cold work, or more of it per round"
        )


def cold(function, setup=None):
    """`function` as a benchmark side: called as `function(setup())` when `setup` is given, its
    result the (untimed) state each round starts from."""
    return (function, setup)


def side_call(side):
    """(the zero-argument call to time, after its untimed setup) for a side: a callable or cold()."""
    function, setup = side if isinstance(side, tuple) else (side, None)
    if setup is None:
        return function
    state = setup()
    return lambda: function(state)


def timed_rounds(side, rounds: int, what: str = "the measurement"):
    """CPU seconds of `side` (a callable or cold()) over `rounds` rounds, each on fresh state:
    (their mean with its 95% t interval, the last result)."""
    from common.stats import mean_interval

    times, result = [], None
    for round_ in range(rounds):
        call = side_call(side)
        start = time.process_time()
        result = call()
        times.append(time.process_time() - start)
        check_measured(times[-1], what, round_)
    return mean_interval(times, bounds=(0.0, float("inf"))), result


def interleaved_ratio(ours, theirs, rounds: int, names: tuple[str, str] = ("ours", "the baseline")):
    """Time `ours` and `theirs` (each a callable or cold()) back to back `rounds` times (which goes
    first alternates), so both see the same load on a shared machine, in this process's CPU seconds
    (`time.process_time`: on a machine with more runnable jobs than cores, wall time mostly measures
    the wait for a core; both sides run one thread). Each call starts from its own fresh setup. A
    side under MIN_SECONDS in any round is refused. Returns (the Interval of theirs / ours over the
    rounds: the speed-up, mean with a 95% t interval; ours' last result; theirs' last result; the
    Intervals of ours' and theirs' CPU seconds)."""
    from common.stats import mean_interval

    times: dict[int, list[float]] = {0: [], 1: []}
    results: dict = {}
    for round_ in range(rounds):
        for side in (0, 1) if round_ % 2 == 0 else (1, 0):
            call = side_call((ours, theirs)[side])
            start = time.process_time()
            results[side] = call()
            times[side].append(time.process_time() - start)
            check_measured(times[side][-1], names[side], round_)
    speedups = [t / o for o, t in zip(times[0], times[1])]
    infinite = (0.0, float("inf"))
    spreads = tuple(mean_interval(times[side], bounds=infinite) for side in (0, 1))
    return mean_interval(speedups, bounds=infinite), results[0], results[1], spreads


def spread(interval, unit: str = "", digits: int = 2) -> str:
    """An Interval as 'mean [low, high]' with its unit (one round: no interval, said so)."""
    if interval.n < 2:
        return f"{interval.value:.{digits}f}{unit} (1 round: no spread)"
    return f"{interval.value:.{digits}f}{unit} [{interval.low:.{digits}f}, {interval.high:.{digits}f}]"
