"""One rule for what every command writes (common.cli.out_path): an --out, --table or --cells that
is a symbolic link, or lies under one (`LINK/new`, `LINK/sub/new`), is refused in one line (exit 2)
while the arguments are parsed, so before any work, and whatever the link points to is left as it
was; a user's file of a name the command writes is refused before any work too."""

from __future__ import annotations

import re

import pytest

from tests.refusals import contents, copy_runs, finished, in_process, one_line

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


@pytest.mark.parametrize("where", ["link", "link/new", "link/sub/new"])
@pytest.mark.parametrize("name, flag", [(name, flag) for name, (_, flags) in WRITERS.items() for flag in flags])
def test_a_symbolic_link_on_the_way_to_what_a_command_writes_is_refused_in_one_line_before_any_work(
    tmp_path, capsys, name, flag, where
):
    """The link itself (a linked target), a linked parent the output would be made in, or a linked
    folder further up."""
    from toylens.console import main

    users = tmp_path / "users-folder"
    (users / "sub").mkdir(parents=True)
    (users / "notes.md").write_text("mine\n")
    link = tmp_path / "link"
    link.symlink_to(users / "notes.md" if flag == "--table" and where == "link" else users)
    before = contents(tmp_path)
    words = [str(tmp_path / w.replace("RUNS", "runs")) if "RUNS" in w else w for w in WRITERS[name][0]]
    result = in_process(main, [name, *words, flag, str(tmp_path / where)], capsys)
    one_line(result, f"argument {flag}", f"{link} ", "is a symbolic link", "does not write through links")
    assert contents(tmp_path) == before


# For each (command, flag) of WRITERS: the arguments that get it to its writing (RUNS: a runs
# folder, SWEEP: a sweep, HTML: a report page), and the name of a file it writes under that flag's
# path ("" when the path is the file itself). A new writer joins WRITERS and this table.
QUICK_TRAIN = ["--models", "attn-only-2x1", "--seeds", "0-0", "--steps", "5", "--nouns", "6", "--jobs", "1"]
QUICK_TRAIN += ["--no-progress"]
USERS_FILE = {
    ("train", "--out"): (["winograd", *QUICK_TRAIN], "summary.json"),
    ("sweep", "--out"): (["winograd", *QUICK_TRAIN], "census/census.md"),
    ("report", "--out"): (["RUNS", "--jobs", "1"], "report.md"),
    ("results", "--out"): (["SWEEP"], "census-sweep.md"),
    ("export", "--out"): (["mib", "RUNS"], "mib/notes.md"),
    ("screenshots", "--out"): (["HTML"], "report-graph-block-2-seed1.png"),
    ("edges", "--out"): (["RUNS"], "edges.md"),
    ("leaderboard", "--out"): (["--models", "two-hop", "--no-progress"], "leaderboard.md"),
    ("leaderboard", "--cells"): (["--models", "two-hop", "--ablations", "zero", "--no-progress"], "CELL"),
    ("features", "--out"): (["RUNS", "--no-progress"], "features.md"),
    ("features", "--table"): (["RUNS", "--no-progress"], ""),
    ("census", "--out"): (["SWEEP"], "census.md"),
    ("positions", "--out"): (["--seeds", "0-0", "--steps", "1", "--jobs", "1", "--no-progress"], "positions.json"),
    ("scaling", "--out"): (["--seeds", "0-1", "--steps", "1", "--every", "1", "--jobs", "1"], "scaling.json"),
    ("params", "--out"): (["gpt2"], "params.json"),
    ("equalities", "--out"): ([], ""),
    ("cost", "--out"): (["--max-len", "128"], "cost.json"),
}


def test_every_writer_is_in_the_users_file_table():
    assert set(USERS_FILE) == {(name, flag) for name, (_, flags) in WRITERS.items() for flag in flags}


@pytest.mark.slow  # some commands need a trained runs folder or a sweep first
@pytest.mark.parametrize("name, flag", list(USERS_FILE))
def test_a_users_file_of_a_name_a_command_writes_is_refused_before_any_work(
    request, tmp_path, capsys, monkeypatch, name, flag
):
    from probes.circuits.leaderboard import METHODS
    from toylens.console import main

    words, own = USERS_FILE[name, flag]
    inputs = {
        "RUNS": lambda: copy_runs(request.getfixturevalue("tiny_runs"), tmp_path / "in"),
        "SWEEP": lambda: request.getfixturevalue("finished_sweep"),
        "HTML": lambda: write(tmp_path / "in" / "report.html", "<html></html>"),
    }
    words = [str(inputs[word]()) if word in inputs else word for word in words]
    own = own.replace("CELL", f"two-hop__{next(iter(METHODS))}__zero.json")
    target = tmp_path / "out"
    users = write(target / own if own else target, "mine\n")
    monkeypatch.chdir(tmp_path)
    before = contents(target.parent if not own else target)
    line = one_line(in_process(main, [name, *words, flag, str(target)], capsys))
    assert "not written by toylens" in line or "what toylens wrote" in line, line
    assert users.read_text() == "mine\n" and contents(target.parent if not own else target) == before


def write(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
