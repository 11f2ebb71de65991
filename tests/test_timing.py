"""benchmarks/timing.py, the one timing rule: every call starts from fresh state (nothing a round
computed is read by the next), a baseline too short to be a measurement is refused, and each
ratio comes with its spread."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest

from common.cli import UsageError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def timing():
    spec = importlib.util.spec_from_file_location("timing", ROOT / "benchmarks" / "timing.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def busy(seconds: float) -> float:
    """Spin for `seconds` of this process's CPU."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
    return seconds


def test_each_call_gets_fresh_state_and_the_ratio_has_a_spread(timing):
    states = []

    def fresh():
        states.append(object())
        return states[-1]

    ours = timing.cold(lambda state: busy(0.02), fresh)
    theirs = timing.cold(lambda state: busy(0.04), fresh)
    ratio, _, _, (ours_s, theirs_s) = timing.interleaved_ratio(ours, theirs, 3)
    assert len(states) == len({id(s) for s in states}) == 6  # one setup per call, none shared
    assert ratio.n == 3 and ratio.low <= ratio.value <= ratio.high
    assert theirs_s.value > ours_s.value
    assert "[" in timing.spread(ratio, "x")


def test_a_cached_baseline_is_refused_not_divided_by(timing):
    memo = {}

    def cached():  # a first call that works, then a remembered answer: the bug joint_speed had
        if "answer" not in memo:
            memo["answer"] = busy(0.02)
        return memo["answer"]

    with pytest.raises(UsageError, match="round 2.*not a measurement") as refused:
        timing.interleaved_ratio(cached, lambda: busy(0.02), 3, ("the oracle", "the search"))
    assert "the oracle" in str(refused.value) and "\n" not in str(refused.value)
    with pytest.raises(UsageError, match="not a measurement"):
        timing.timed_rounds(lambda: None, 2)
