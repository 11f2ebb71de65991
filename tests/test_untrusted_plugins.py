"""Plugins are untrusted code at the boundary (issue 57): a task plugin's import runs under a time
limit (TOYLENS_PLUGIN_TIMEOUT) and an import that hangs is one line naming it; a leaderboard
--plugin must be a module name, and whatever its import or a registered method raises, sys.exit(0)
included, or a method's None or NaN scores, is one line naming it (exit 2) with `--jobs 1` too;
strings from plugins reach a terminal with their control characters escaped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.refusals import in_process, one_line

ROOT = Path(__file__).resolve().parents[1]


def install(folder: Path, module: str, source: str) -> dict:
    """A task plugin `slow` in `module` (an entry point in a dist-info folder): the environment that finds it."""
    info = folder / "toylens_slow-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toylens-slow\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[toylens.tasks]\nslow = {module}:Plugin\n")
    (folder / f"{module}.py").write_text(source)
    return {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{ROOT}", "TOYLENS_PLUGIN_TIMEOUT": "3"}


@pytest.mark.slow  # starts processes that wait for the time limit
@pytest.mark.parametrize("argv", [["list"], ["train", "slow"], ["sweep", "slow"]])
def test_a_plugin_whose_import_hangs_is_one_line_naming_it_after_the_time_limit(tmp_path, argv):
    env = install(tmp_path, "sleepy_plugin", "import time\nwhile True:\n    time.sleep(0.1)\n")
    argv = [str(tmp_path / "runs") if word == "RUNS" else word for word in argv]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "toylens", *argv], capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path
    )
    line = one_line((done.returncode, done.stdout, done.stderr), "task plugin 'slow'", "within 3 s")
    assert "TOYLENS_PLUGIN_TIMEOUT" in line and time.monotonic() - started < 100


def test_the_time_limit_is_configurable_and_checked(monkeypatch):
    from common.cli import UsageError
    from tasks.registry import time_limited

    monkeypatch.setenv("TOYLENS_PLUGIN_TIMEOUT", "0.2")
    with pytest.raises(UsageError, match="plugin x did not finish importing within 0.2 s"):
        time_limited(lambda: time.sleep(5), "plugin x")
    assert time_limited(lambda: 7, "plugin x") == 7
    monkeypatch.setenv("TOYLENS_PLUGIN_TIMEOUT", "soon")
    with pytest.raises(UsageError, match="is not a number of seconds"):
        time_limited(lambda: 7, "plugin x")


METHOD = """
import math
import sys
import torch
from probes.circuits.leaderboard import register_method
from probes.circuits.methods.attribution import EdgeScores

def run(problem):
    how = {how!r}
    if how == "raises":
        raise ValueError("my method broke")
    if how == "exits":
        sys.exit(0)
    if how == "none":
        return None
    return EdgeScores("bad", problem.graph.edges, torch.full((len(problem.graph.edges),), math.nan), 0.0)

register_method("bad", run, replace=True)
"""


@pytest.mark.parametrize(
    "how, fragment",
    [
        ("raises", "leaderboard method 'bad' raised ValueError: my method broke"),
        ("exits", "leaderboard method 'bad' raised SystemExit"),
        ("none", "leaderboard method 'bad' returned NoneType, not EdgeScores"),
        ("nan", "leaderboard method 'bad' returned a NaN or infinite score"),
    ],
)
def test_a_leaderboard_method_that_fails_is_one_line_naming_it_with_one_job(
    tmp_path, capsys, monkeypatch, how, fragment
):
    from toylens.console import main

    module = f"bad_method_{how}"
    (tmp_path / f"{module}.py").write_text(METHOD.format(how=how))
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["leaderboard", "--plugin", module, "--methods", "bad", "--models", "two-hop", "--ablations", "zero"]
    argv += ["--jobs", "1", "--no-progress", "--cells", str(tmp_path / "cells"), "--out", str(tmp_path / "out")]
    try:
        one_line(in_process(main, argv, capsys), fragment)
    finally:
        sys.modules.pop(module, None)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "source, plugin, fragment",
    [
        ("raise ValueError('bad plugin')", "plugin_raises", "--plugin plugin_raises: importing it raised ValueError"),
        ("import sys\nsys.exit(0)", "plugin_exits", "--plugin plugin_exits: importing it raised SystemExit"),
        ("", "", "'' is not a module name"),
        ("", "some/path.py", "'some/path.py' is not a module name"),
        ("", "no_such_module_here", "ModuleNotFoundError"),
    ],
)
def test_a_leaderboard_plugin_that_cannot_be_imported_is_one_line(
    tmp_path, capsys, monkeypatch, source, plugin, fragment
):
    from toylens.console import main

    if source:
        (tmp_path / f"{plugin}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["leaderboard", "--plugin", plugin, "--models", "two-hop", "--out", str(tmp_path / "out")]
    try:
        one_line(in_process(main, argv, capsys), fragment)
    finally:
        sys.modules.pop(plugin, None)
    assert not (tmp_path / "out").exists()


HOSTILE = "grp\x1b]0;pwned\x07\x1b[2J\u202eevil\nnext"


def test_strings_from_plugins_reach_a_terminal_with_control_characters_escaped(capsys):
    from common.cli import say
    from probes.report.render import table

    text = table(["model", "held-out by group"], [["tiny", f"{HOSTILE} 50%"]])
    say(f"error: task plugin {HOSTILE!s} failed")
    for shown in (text, capsys.readouterr().err):
        assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
        assert "\\x1b]0;pwned\\x07" in shown and "\\u202eevil\\nnext" in shown
    assert len(text.splitlines()) == 3  # the name's line break does not make a row
