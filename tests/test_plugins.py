"""The example plugin in examples/, installed with pip install -e, gets everything a built-in task
gets: listed, trained, compared, reported on, with no change to toylens."""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import site
import subprocess
import sys
import sysconfig
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "toylens-firstmark"


def installed_from(name: str) -> str | None:
    try:
        return json.loads(distribution(name).read_text("direct_url.json") or "{}").get("url")
    except PackageNotFoundError:
        return None


@pytest.fixture(scope="session")
def example_plugin() -> str:
    """Installs the example package editable into this venv once (a no-op when it already is)."""
    if installed_from("toylens-firstmark") != EXAMPLE.as_uri():
        # Without build isolation pip reuses the venv's setuptools instead of downloading one.
        isolation = ["--no-build-isolation"] if has_setuptools() else []
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", *isolation, "-e", str(EXAMPLE)],
            check=True,
            capture_output=True,
            text=True,
        )
        # The entry point is visible to this process at once; its module only once the new .pth
        # file is read, or every later registry lookup in this test session would fail to import it.
        site.addsitedir(sysconfig.get_paths()["purelib"])
        importlib.invalidate_caches()
    return "firstmark"


def has_setuptools() -> bool:
    # Found, not imported: importing setuptools after another test imported the stdlib's distutils
    # trips setuptools' distutils shim (an AssertionError), and only pip's subprocess needs it.
    return importlib.util.find_spec("setuptools") is not None


def toylens(*args, cwd=None) -> subprocess.CompletedProcess:
    # One thread per process: these models are tiny and the test machine is shared.
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, env=env)


@pytest.fixture(scope="session")
def plugin_runs(example_plugin, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("plugin") / "firstmark"
    result = toylens(
        "toylens",
        "train",
        example_plugin,
        "--models",
        "bag-of-words,attn-only-2x1",
        "--seeds",
        "0-0",
        "--steps",
        "200",
        "--eval-every",
        "50",
        "--out",
        str(out),
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr
    return out


def test_plugin_is_listed(example_plugin):
    result = toylens("toylens", "list")
    assert result.returncode == 0, result.stderr
    assert any(
        line.split()[0] == example_plugin and "marked letters came first" in line for line in result.stdout.splitlines()
    )


def test_plugin_params_become_flags(example_plugin):
    result = toylens("toylens", "train", example_plugin, "--help")
    assert result.returncode == 0 and "--examples EXAMPLES" in result.stdout


def test_plugin_trains_and_attention_beats_the_bag_of_words(plugin_runs):
    # `train` ends with the same comparison `python -m probes.accuracy RUNS` prints and saves.
    summary = json.loads((plugin_runs / "summary.json").read_text())
    heldout = {m["model_name"]: m["heldout"]["value"] for m in summary["models"]}
    shuffle = {m["model_name"]: m["shuffle_max_logit_change"] for m in summary["models"]}
    assert list(heldout) == ["bag-of-words", "attn-only-2x1"]  # the plugin's own family order
    # Held-out mark pairs were trained only in reverse order: order-blindness answers them backwards.
    assert heldout["bag-of-words"] < 0.2 and shuffle["bag-of-words"] < 1e-3
    assert heldout["attn-only-2x1"] > 0.8 and shuffle["attn-only-2x1"] > 0.1
    config = json.loads((plugin_runs / "attn-only-2x1" / "seed0" / "config.json").read_text())
    assert config["task"] == {"name": "firstmark", "params": {"examples": 2000}}


def test_circuit_report_on_plugin_runs(plugin_runs):
    result = toylens("probes.circuit", "report", str(plugin_runs))
    assert result.returncode == 0, result.stderr
    assert (plugin_runs / "report" / "report.md").is_file()
    summary = result.stdout
    # One table per model, a row per seed, the scales named above them.
    assert "bag-of-words" in summary and "attn-only-2x1" in summary and "seed 0" in summary and "faith." in summary
