"""Every numeric flag of every command is bounded by one shared parser (common.cli.Bounded: type and
range), so a huge, negative or non-finite value is one line while the arguments are parsed, never a
traceback, a crash (`--threads 100000`) or an hour of work (`features --steps 10**12`)."""

from __future__ import annotations

import argparse
import re

import pytest

from tests.refusals import in_process, one_line

NUMBERS = re.compile(r"-?[0-9.e+-]+(,-?[0-9.e+-]+)*")


class Captured(Exception):
    def __init__(self, parser):
        self.parser = parser


def parsers(name: str) -> list[argparse.ArgumentParser]:
    """The parser command `name` builds (and its subcommands' parsers), caught as it parses."""
    from toylens.console import main

    original = argparse.ArgumentParser.parse_known_args

    def capture(self, *args, **kwargs):
        raise Captured(self)

    argparse.ArgumentParser.parse_known_args = capture
    found: list[argparse.ArgumentParser] = []  # `list` parses no flags
    try:
        main([name, "winograd"] if name in ("train", "sweep") else [name])
    except Captured as caught:
        found = [caught.parser]
    except SystemExit:
        pass
    finally:
        argparse.ArgumentParser.parse_known_args = original
    for parser in list(found):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                found += list(action.choices.values())
    return found


def numeric(action: argparse.Action) -> bool:
    """Whether a flag takes numbers: by its type or its default (a number, or numbers in a list or
    a comma-separated string)."""
    if action.type in (int, float):
        return True
    defaults = action.default if isinstance(action.default, (list, tuple)) else [action.default]
    return (
        any(
            (isinstance(d, (int, float)) and not isinstance(d, bool)) or (isinstance(d, str) and NUMBERS.fullmatch(d))
            for d in defaults
        )
        and action.nargs != 0
    )


def test_every_numeric_flag_of_every_command_is_bounded():
    from common.cli import Bounded
    from toylens.arguments import seeds_option
    from toylens.console import COMMANDS

    unbounded, seen = [], 0
    for name in COMMANDS:
        for parser in parsers(name):
            for action in parser._actions:
                if action.option_strings and numeric(action):
                    seen += 1
                    if not isinstance(action.type, Bounded) and action.type is not seeds_option:
                        unbounded.append(f"{parser.prog} {action.option_strings[0]}")
    assert seen > 40 and unbounded == []


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["features", "RUNS", "--threads", "100000"], "from 1 to 256"),
        (["features", "RUNS", "--threads", "0"], "from 1 to 256"),
        (["features", "RUNS", "--threads", "-1"], "from 1 to 256"),
        (["features", "RUNS", "--steps", str(10**12)], "from 1 to 1e+06"),
        (["features", "RUNS", "--sizes", str(10**30)], "from 1 to 65536"),
        (["features", "RUNS", "--sizes", "64,64"], "lists a value twice"),
        (["features", "RUNS", "--seed", str(10**30)], "from 0 to 4.29497e+09"),
        (["leaderboard", "--pairs", str(10**30)], "from 1 to 4096"),
        (["leaderboard", "--seed", str(-1)], "from 0 to"),
        (["leaderboard", "--seed", str(2**64)], "from 0 to"),
        (["train", "winograd", "--eval-every", str(10**30)], "from 1 to 1e+06"),  # trained on, before
        (["train", "winograd", "--lr", "nan"], "from 0 to 1"),
        (["train", "winograd", "--jobs", "100000"], "from 1 to 1024"),
        (["train", "winograd", "--nouns", str(10**30)], "JSON keeps exactly"),
        (["sweep", "winograd", "--gpus-per-run", "inf"], "from 0 to 1024"),
        (["report", "RUNS", "--jobs", "0"], "from 1 to 1024"),
        (["screenshots", "RUNS", "--graph", "block-2"], "is not MODEL:SEED"),
        (["cost", "--max-len", str(10**9)], "from 1 to 65536"),
    ],
)
def test_a_huge_negative_or_malformed_number_is_one_line_while_parsing(tmp_path, capsys, argv, fragment):
    from toylens.console import main

    argv = [str(tmp_path) if word == "RUNS" else word for word in argv]
    one_line(in_process(main, argv, capsys), fragment)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["leaderboard", "--ablations", "zero,zero", "--models", "two-hop"], "named twice"),
        (["leaderboard", "--address", "127.0.0.1:1"], "add --executor ray"),
        (["sweep", "winograd", "--address", "127.0.0.1:1"], "add --executor ray"),
    ],
)
def test_flags_that_contradict_are_refused_before_any_work(tmp_path, capsys, monkeypatch, argv, fragment):
    from toylens.console import main

    monkeypatch.chdir(tmp_path)
    one_line(in_process(main, [*argv, "--out", str(tmp_path / "out")], capsys), fragment)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_train_and_sweep_help_work_without_a_task_name(capsys, command):
    """The first thing a new user types: the options every task shares, and where a task's own are."""
    from tests.refusals import finished
    from toylens.console import main

    code, out, err = finished(main, [command, "--help"], capsys)
    assert code == 0 and err == "", err
    assert f"usage: toylens {command} NAME" in out and f"toylens {command} NAME --help" in out
    assert "--seeds" in out and "--steps" in out and "--jobs" in out


def test_a_sweep_of_another_task_says_its_first_estimate_is_a_guess():
    from types import SimpleNamespace

    from toylens.sweeps.plan import check_size

    def runs(task: str) -> list:
        from tasks.settings import TrainSettings
        from models import ModelSpec

        spec = ModelSpec(n_layers=1, d_model=16, n_heads=1, n_ctx=8, d_vocab=10)
        plan = SimpleNamespace(task=SimpleNamespace(name=task), spec=spec, settings=TrainSettings())
        return [SimpleNamespace(plan=plan)]

    assert "a guess for induction" in check_size(runs("induction"), 1, True)
    assert "a guess" not in check_size(runs("winograd"), 1, True)
