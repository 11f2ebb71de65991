"""One command surface: every user command is a `toylens COMMAND` (and `python -m toylens COMMAND`),
its usage line names that form, and no module is runnable with `python -m` except `toylens` and the
user's two documented aliases (`python -m tasks.winograd train`, `python -m probes.circuit report`)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from toylens.console import COMMANDS, main, usage

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("common", "models", "tasks", "probes", "toylens")
# What a user runs, by what it does; a new command must be added here and to the console.
USER_COMMANDS = {
    "list",
    "train",
    "sweep",
    "report",
    "results",
    "export",
    "screenshots",
    "edges",
    "accuracy",
    "census",
    "dynamics",
    "ladder",
    "positions",
    "scaling",
    "params",
    "norms",
    "equalities",
    "cost",
    "leaderboard",
    "features",
    "preflight",
}
ALIASES = {"tasks.winograd", "probes.circuit", "toylens"}


def runnable_modules() -> set[str]:
    """Modules `python -m` would run: a package's __main__.py, or a file with an `if __name__` guard."""
    found = set()
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            if path.name == "__main__.py":
                found.add(module.removesuffix(".__main__"))
            elif any(
                isinstance(node, ast.If) and "__name__" in ast.unparse(node.test)
                for node in ast.parse(path.read_text()).body
            ):
                found.add(module)
    return found


def test_toylens_help_lists_every_user_command(capsys):
    main(["--help"])
    shown = capsys.readouterr().out
    assert set(COMMANDS) == USER_COMMANDS
    assert all(f"\n  {name} " in shown for name in USER_COMMANDS) and shown == usage() + "\n"


def test_no_python_m_module_outside_toylens_and_the_two_aliases():
    assert runnable_modules() == ALIASES


def test_benchmark_scripts_stay_scripts_each_named_in_the_docs_which_say_why():
    pages = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    text = "\n".join(page.read_text() for page in pages)
    unnamed = [p.name for p in sorted((ROOT / "benchmarks").glob("*.py")) if f"benchmarks/{p.name}" not in text]
    assert not unnamed, f"benchmark scripts no page names: {unnamed}"
    assert "The benchmarks stay scripts, not `toylens` commands" in (ROOT / "docs" / "architecture.md").read_text()


@pytest.mark.parametrize("command", sorted(USER_COMMANDS - {"list"}))
def test_each_commands_usage_line_names_the_toylens_form(command, capsys):
    argv = [command, "winograd", "--help"] if command in ("train", "sweep") else [command, "--help"]
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: toylens {command}")


def python_m(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_python_m_toylens_runs_a_command_and_the_aliases_name_the_toylens_form():
    listed = python_m("toylens", "list")
    assert listed.returncode == 0 and "winograd" in listed.stdout, listed.stderr
    train = python_m("tasks.winograd", "train", "--help")
    assert train.returncode == 0 and train.stdout.startswith("usage: toylens train winograd"), train.stderr
    report = python_m("probes.circuit", "report", "--help")
    assert report.returncode == 0 and report.stdout.startswith("usage: toylens report"), report.stderr


def test_one_seeds_grammar_stated_in_every_help_that_takes_seeds(capsys):
    for argv in (
        ["train", "winograd"],
        ["sweep", "winograd"],
        ["ladder", "winograd"],
        ["norms", "text"],
        ["positions"],
        ["scaling"],
    ):
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        shown = " ".join(capsys.readouterr().out.split())
        assert "a range 0-2 (inclusive) or a list 0,3,5; a bare number is refused" in shown, argv


def test_a_command_that_only_prints_writes_nothing_into_the_current_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    main(["params", "gpt2"])
    assert "GPT-2 small, tied: 124,439,808" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []
    main(["params", "gpt2", "--out", str(tmp_path / "out")])  # asked for: written there
    assert {"params.json", "params.png"} <= {p.name for p in (tmp_path / "out").iterdir()}


def test_a_run_records_the_console_script_as_typed(monkeypatch):
    import types

    from tasks.training.runs import command_line

    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))  # a script: no __spec__
    monkeypatch.setattr(sys, "argv", ["/somewhere/.venv/bin/toylens", "train", "winograd", "--seeds", "0-1"])
    assert command_line() == "toylens train winograd --seeds 0-1"
