"""One rule for links in what every command writes (census's and edges'): an --out, --table or
--cells that is a symbolic link is refused in one line (exit 2) while the arguments are parsed, so
before any work, and whatever the link points to is left as it was."""

from __future__ import annotations

import re

import pytest

from tests.refusals import contents, finished, in_process, one_line

# Each command that writes: the arguments before the flag (the subcommand's words, a positional the
# parser needs) and the flags naming what it writes. The runs folders need not exist: the refusal
# comes first.
WRITERS = {
    "train": (["winograd"], ("--out",)),
    "sweep": (["winograd"], ("--out",)),
    "report": (["RUNS"], ("--out",)),
    "results": (["RUNS"], ("--out",)),
    "export": (["mib", "RUNS"], ("--out",)),
    "screenshots": (["RUNS/report/report.html"], ("--out",)),
    "edges": (["RUNS"], ("--out",)),
    "leaderboard": ([], ("--out", "--cells")),
    "features": (["RUNS"], ("--out", "--table")),
    "census": (["RUNS"], ("--out",)),
    "positions": ([], ("--out",)),
    "scaling": ([], ("--out",)),
    "params": (["attn-only-2x1"], ("--out",)),
    "equalities": ([], ("--out",)),
    "cost": ([], ("--out",)),
}
FLAGS = re.compile(r"^\s+(--out|--table|--cells)\b", re.M)


def test_the_table_names_every_command_that_writes(capsys):
    """A command given an --out, --table or --cells later is in WRITERS, so the test below covers it."""
    from toylens.console import COMMANDS, main

    found = {}
    for name in COMMANDS:
        task = ["winograd"] if name in ("train", "sweep") else []  # their options are a task's
        flags = tuple(sorted(set(FLAGS.findall(finished(main, [name, *task, "--help"], capsys)[1]))))
        if flags:
            found[name] = flags
    assert found == {name: tuple(sorted(flags)) for name, (_, flags) in WRITERS.items()}


@pytest.mark.parametrize("name, flag", [(name, flag) for name, (_, flags) in WRITERS.items() for flag in flags])
def test_a_symbolic_link_as_what_a_command_writes_is_refused_in_one_line_before_any_work(tmp_path, capsys, name, flag):
    from toylens.console import main

    users = tmp_path / "users-folder"
    users.mkdir()
    (users / "notes.md").write_text("mine\n")
    link = tmp_path / "link"
    link.symlink_to(users / "notes.md" if flag == "--table" else users)
    before = contents(tmp_path)
    words = [str(tmp_path / w.replace("RUNS", "runs")) if "RUNS" in w else w for w in WRITERS[name][0]]
    result = in_process(main, [name, *words, flag, str(link)], capsys)
    one_line(result, f"argument {flag}", f"{link} is a symbolic link", "does not write through links")
    assert contents(tmp_path) == before
