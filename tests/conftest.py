"""Shared fixtures: tiny tasks and briefly trained runs, built once per test session; and the two
tiers. Plain `pytest` runs the fast tier (`-m "not slow"`, in pyproject.toml); `pytest -m slow`
runs the rest: tests marked `slow` or `isolated` (tests/isolation.py), tests using a fixture in
SLOW_FIXTURES, and those listed in tests/slow_tests.txt (measured with `--durations=0`). A test
named on the command line by its id runs whichever tier it is in."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# Generated datasets go to a throwaway cache, never the user's.
os.environ.setdefault("TOYLENS_CACHE", tempfile.mkdtemp(prefix="toylens-test-cache-"))

import torch

# One intra-op thread, as training and the report use: these models are tiny, and on a loaded
# 2-core machine a second thread made the edge oracle's matmuls ~30x slower (measured).
torch.set_num_threads(1)

from models import ModelSpec  # noqa: E402
from models.spec import Attention, Positions  # noqa: E402
from tasks.winograd import WinogradParams, WinogradTask  # noqa: E402

if TYPE_CHECKING:
    from tasks.base import Task
    from tasks.data import Batch
    from toylens.family import RunPlan

pytest_plugins = ("tests.isolation", "pytester")

# Fixtures that start processes or a browser, or train or report for longer than a few seconds (the
# shared ones here and module fixtures of the test files, measured as tests/slow_tests.txt says):
# every test that asks for one (directly or through another fixture) is slow.
SLOW_FIXTURES = frozenset(
    {
        "main_job_run",  # trains 6 runs and writes their report
        "finished_sweep",  # a sweep on the local process pool
        "browser",  # Chromium
        "board",  # test_leaderboard: every cell of the 5-model board, 42 s
        "markcopy_runs",  # test_varying_layout: trained and traced, 156 s
        "early_runs",  # test_varying_layout: 64 s
        "neighbour_runs",  # test_relabelled_heads: 98 s
        "exact_runs",  # test_relabelled_heads: 77 s
        "winograd_block_1",  # test_relabelled_heads: 15 s
        "reported",  # test_results, test_verify_report: the tiny runs' report, 89 s
    }
)
SLOW_LIST = Path(__file__).with_name("slow_tests.txt")


def slow_list(path: Path = SLOW_LIST) -> list[str]:
    """The ids in `path`: a file, a test function (all its parameters) or one parametrized test per
    line; `#` starts a comment (the measured seconds, and why)."""
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def listed(nodeid: str, ids: list[str]) -> bool:
    return any(nodeid == i or nodeid.startswith((i + "::", i + "[")) for i in ids)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: the slow tier, run by `pytest -m slow` (see tests/conftest.py)")
    # A test asked for by its id runs, whatever its tier: `-m "not slow"` is the default, not a filter.
    if config.option.markexpr == "not slow" and any("::" in arg for arg in config.args):
        config.option.markexpr = ""


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ids = slow_list()
    for item in items:
        if (
            item.get_closest_marker("isolated")
            or SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
            or listed(item.nodeid, ids)
        ):
            item.add_marker(pytest.mark.slow)


def scaled_by_load(seconds: float) -> float:
    """A wall-time limit of `seconds` on a quiet machine, longer in proportion to how loaded this one
    is (its 1-minute load average per core): work that takes 10 s on 2 quiet cores takes ~40 s
    beside 6 busy processes, and that is the machine, not the code under test."""
    return seconds * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def float32_sum_tolerance(terms: int, magnitude: float) -> float:
    """How far two float32 sums of the same `terms` numbers, added in different orders (another
    reduction, another thread count), may differ: the recursive-summation bound, terms * eps *
    magnitude (Higham, Accuracy and Stability of Numerical Algorithms, 4.2), `magnitude` the sum's
    size (the sum of the terms' absolute values, or the largest sum compared where that is unknown)."""
    return terms * torch.finfo(torch.float32).eps * magnitude


def hand_batch(n: int = 24) -> Batch:
    """Random 4-token sequences scored at position 3; the corrupt partner resamples token 1. For
    the hand-built models of the patching tests."""
    import torch

    from tasks.base import NO_FOIL
    from tasks.data import Batch

    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 4, (n, 5), generator=generator)
    counterfactual = tokens.clone()
    counterfactual[:, 1] = (tokens[:, 1] + 1 + torch.randint(0, 3, (n,), generator=generator)) % 4
    return Batch(
        tokens=tokens,
        lengths=torch.full((n,), 5),
        example_index=torch.arange(n),
        positions=torch.full((n,), 3),
        answers=tokens[:, 4],
        foils=torch.full((n,), NO_FOIL),
        groups=["g"] * n,
        counterfactual=counterfactual,
    )


TINY_SPECS = {
    "bag-of-words": ModelSpec(n_layers=1, d_model=32, n_heads=2, attention=Attention.UNIFORM, positions=Positions.NONE),
    "attn-only-2x1": ModelSpec(n_layers=2, d_model=32, n_heads=1, mlp=False, norm=None),
}


@pytest.fixture(scope="session")
def small_winograd() -> WinogradTask:
    return WinogradTask(WinogradParams(nouns=8))


def tiny_plans(
    task: Task, out: Path, specs: dict[str, ModelSpec], seeds: Sequence[int] = (0,), steps: int = 150
) -> list[RunPlan]:
    from toylens.family import RunPlan
    from tasks.training.loop import TrainSettings

    settings = TrainSettings(max_steps=steps, batch_size=32, eval_every=50)
    return [
        RunPlan(task, name, spec, seed, settings, out / name / f"seed{seed}")
        for name, spec in specs.items()
        for seed in seeds
    ]


def train_tiny(
    task: Task, out: Path, specs: dict[str, ModelSpec], seeds: Sequence[int] = (0,), steps: int = 150
) -> Path:
    """Train `specs` briefly into `out` with the real training path; returns the run folder."""
    from toylens.family import train_family

    train_family(tiny_plans(task, out, specs, seeds, steps), progress=False)
    return out


@pytest.fixture(scope="session")
def tiny_runs(tmp_path_factory: pytest.TempPathFactory, small_winograd: WinogradTask) -> Path:
    """A bag of words and a 2-layer attention-only model on 8-noun Winograd, one seed, 150 steps."""
    return train_tiny(small_winograd, tmp_path_factory.mktemp("runs") / "winograd", TINY_SPECS)


@pytest.fixture(scope="session")
def finished_sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny sweep (attn-only-2x1 on 8-noun Winograd, 20 steps) of seeds 0 and 1 at the default
    grid point, through the real sweep driver on the local pool."""
    from tests.test_sweep_reliability import sweep

    out = tmp_path_factory.mktemp("sweep") / "sweep"
    assert sweep(out).done == 2
    return out


@dataclass(frozen=True)
class MainJob:
    printed: str  # what the command printed
    runs: Path  # its runs folder (the report in runs / "report")


@pytest.fixture(scope="session")
def main_job_run(tmp_path_factory: pytest.TempPathFactory) -> MainJob:
    """The main job's command on a tiny family: 3 seeds of two models, 50 steps (so every run is
    stopped by its step cap), with --report and --no-progress, printed output captured."""
    import contextlib
    import io

    from toylens.cli import main_for_task

    out = tmp_path_factory.mktemp("main") / "winograd"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main_for_task(
            "winograd",
            [
                "train",
                "--nouns",
                "8",
                "--models",
                "bag-of-words,attn-only-2x1",
                "--seeds",
                "0-2",
                "--steps",
                "50",
                "--eval-every",
                "25",
                "--jobs",
                "1",
                "--no-progress",
                "--report",
                "--out",
                str(out),
            ],
        )
    return MainJob(printed.getvalue(), out)
