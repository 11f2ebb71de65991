"""The README's first screen works as written, and nothing the docs name can go stale unnoticed: the
two documented commands exactly, the five most used commands run (cheap ones for real, the others'
`--help` naming every flag they pass), every `python -m X` in README.md and docs/ one of the
documented aliases (or pytest, pip, the plugin guide's own module) whose `--help` runs, every
`toylens COMMAND` a command whose `--help` runs, every repository path and module named a file that
exists, every script and relative link a file, every page in docs/ in the grouped index
(docs/index.md, linked from the README), and docs/architecture.md naming every module of the
packages in its package's row. Each check is a function of a page's text, and a broken text is
shown to be reported (so no check passes for a reader that finds nothing)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted([README, *(ROOT / "docs").rglob("*.md")])
MAIN_JOB = "bash setup.sh && .venv/bin/python -m tasks.winograd train --report"
TESTS = "bash setup.sh && .venv/bin/python -m pytest"
PYTHON = ".venv/bin/python -m "
TOYLENS = ".venv/bin/toylens "
# A module name, not a placeholder (`tasks.<name>`) and not the dot that ends a sentence.
MODULE = re.compile(r"python -m ([A-Za-z_][\w.]*\w)(?![\w<]|\.[\w<])")
SCRIPT = re.compile(r"python ((?:benchmarks|examples|notebooks)/[\w./-]+\.py)")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def first_screen() -> str:
    return README.read_text().split("\n## ")[0]


def fenced(text: str) -> list[str]:
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def most_used() -> list[str]:
    """The commands of the first screen's table, in order."""
    return [m for m in re.findall(r"^\| `([^`]+)` \|", first_screen(), flags=re.M) if m.startswith((PYTHON, TOYLENS))]


def python(*argv: str, timeout: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=timeout,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_the_first_screen_gives_the_two_commands_exactly():
    screen = first_screen()
    assert fenced(screen) == [MAIN_JOB, TESTS]
    assert (
        screen.index("Run the main job") < screen.index(MAIN_JOB) < screen.index("Run the tests") < screen.index(TESTS)
    )
    assert len(screen.splitlines()) <= 60, "the first screen is a screen"


def test_setup_makes_the_venv_the_commands_use():
    setup = (ROOT / "setup.sh").read_text()
    assert "-m venv .venv" in setup and '-m pip install -q -e ".[dev,ray]"' in setup
    assert importlib.util.find_spec("pytest.__main__") is not None


def test_the_main_job_names_a_subcommand_and_flag_that_exist():
    argv = shlex.split(MAIN_JOB.split(" && ")[1])[2:]  # tasks.winograd train --report
    done = python(*argv[:2], "--help")
    assert done.returncode == 0, done.stderr
    assert "--report" in done.stdout and "(default runs/winograd)" in done.stdout


def test_the_first_screen_shows_a_figure_that_exists():
    figures = re.findall(r"!\[[^]]*\]\(([^)]+)\)", first_screen())
    assert len(figures) == 1 and (ROOT / figures[0]).is_file() and figures[0].endswith(".png")


def test_five_most_used_commands():
    assert len(most_used()) == 5


@pytest.mark.parametrize("command", most_used())
def test_each_most_used_command_runs_or_its_help_names_its_flags(command):
    # `.venv/bin/toylens X` is the console script; run as `python -m toylens X`, the same entry.
    argv = shlex.split(command[len(PYTHON) :] if command.startswith(PYTHON) else "toylens " + command[len(TOYLENS) :])
    module, rest = argv[0], argv[1:]
    words = []
    for token in rest:  # the subcommands, up to the first flag or path
        if token.startswith("-") or "/" in token:
            break
        words.append(token)
    if len(words) == len(rest):  # no flags and no paths: cheap, run it for real
        done = python(module, *words)
        assert done.returncode == 0 and "winograd" in done.stdout, done.stderr
        return
    done = python(module, *words, "--help")
    assert done.returncode == 0, done.stderr
    for flag in [t for t in rest if t.startswith("--")]:
        assert flag in done.stdout, (command, flag)
    for path in [t for t in rest if "/" in t]:
        assert path == "runs/winograd", "the first screen's commands read the main job's runs"


# One command surface: everything else is `toylens COMMAND` (tests/test_commands.py).
ENTRIES = {"tasks.winograd", "probes.circuit", "toylens", "pytest", "pip", "mytask"}
OWN_ENTRIES = ("tasks.winograd", "probes.circuit", "toylens")  # toylens's own: their commands' --help runs
PYTHON_M_COMMAND = re.compile(rf"python -m ({'|'.join(map(re.escape, OWN_ENTRIES))}) ([a-z][\w-]*)")


def documented_modules() -> list[str]:
    return sorted({name for page in DOCS for name in MODULE.findall(page.read_text())})


def unknown_entries(text: str) -> list[str]:
    """`python -m X` forms in `text` that are not one of the entries."""
    return sorted({f"python -m {name}" for name in MODULE.findall(text)} - {f"python -m {e}" for e in ENTRIES})


def test_the_docs_name_python_m_forms():
    assert {"tasks.winograd", "probes.circuit", "pytest"} <= set(documented_modules())
    assert not [line for page in DOCS for line in unknown_entries(page.read_text())]


def documented_python_m_commands() -> list[tuple[str, str]]:
    return sorted({found for page in DOCS for found in PYTHON_M_COMMAND.findall(page.read_text())})


def test_the_docs_name_python_m_commands():
    assert {("tasks.winograd", "train"), ("probes.circuit", "report")} <= set(documented_python_m_commands())


@pytest.mark.parametrize("module, command", documented_python_m_commands())
def test_every_documented_python_m_command_s_help_runs(module, command):
    done = python(module, command, "--help")
    assert done.returncode == 0 and done.stdout.startswith("usage: toylens"), (module, command, done.stderr)


@pytest.mark.parametrize("name", documented_modules())
def test_every_documented_python_m_form_is_an_entry(name):
    spec = importlib.util.find_spec(name)
    if spec is None:  # the plugin guide's own example module: the reader writes it, ending as the guide shows
        from toylens.cli import main_for_task

        assert callable(main_for_task) and any(f'main_for_task("{name}")' in page.read_text() for page in DOCS), (
            f"python -m {name}: no such module"
        )
        return
    if spec.submodule_search_locations is not None:  # a package: python -m runs its __main__
        assert importlib.util.find_spec(f"{name}.__main__") is not None, f"python -m {name}: no __main__.py"
        return
    assert 'if __name__ == "__main__":' in Path(spec.origin).read_text(), f"{name} has no __main__ guard"
    importlib.import_module(name)


def relative_links(text: str) -> list[str]:
    """The link targets in `text` that are files of the repository (no URLs, no anchors alone)."""
    return [t.split("#")[0] for t in LINK.findall(text) if not re.match(r"[a-z]+:", t) and not t.startswith("#")]


def missing_files(text: str, folder: Path) -> list[str]:
    """Scripts and relative links of a page in `folder` that name no file."""
    scripts = [script for script in SCRIPT.findall(text) if not (ROOT / script).is_file()]
    return scripts + [target for target in relative_links(text) if not (folder / target).exists()]


def test_every_documented_script_and_link_exists():
    missing = [
        f"{page.relative_to(ROOT)}: {name}" for page in DOCS for name in missing_files(page.read_text(), page.parent)
    ]
    assert not missing, missing


def test_the_docs_hold_no_development_history():
    words = re.compile(r"\b(round \d|session \d|this session|first version|\d{4}-\d{2}-\d{2})", re.I)
    found = [f"{page.relative_to(ROOT)}: {m.group(0)}" for page in DOCS for m in words.finditer(page.read_text())]
    names = [p.name for p in (ROOT / "tests").glob("test_*.py") if re.search(r"round\d|_more\b|_v\d|_new\b", p.stem)]
    assert not found and not names, (found, names)


# A path inside the repository, named anywhere in a page (`probes/circuits/search.py`, `docs/results`);
# placeholders (`tasks/<name>.py`, `*.js`) stop the match before they start.
REPO_PATH = re.compile(
    r"(?<![\w./-])((?:common|models|tasks|probes|toylens|tests|benchmarks|examples|notebooks|docs|"
    r"\.ci)/[\w./-]*\w)(?![\w<*{/-]|\.\w)"
)
# A dotted module of the package, in backticks: `probes.circuits.search` or `probes.circuits.search.Circuit`.
DOTTED = re.compile(r"`((?:common|models|tasks|probes|toylens)(?:\.\w+)+)[`(]")
# `toylens COMMAND` as typed: in backticks or after .venv/bin/.
COMMAND = re.compile(r"(?:`|bin/)toylens ([a-z][\w-]*)(?: ([a-z][\w-]*))?")
BUILT_IN = ("winograd", "induction", "text", "ioi")  # train and sweep take a task; a plugin's is the reader's


def missing_paths(text: str) -> list[str]:
    """The repository paths `text` names that do not exist."""
    names = {m.rstrip(".") for m in REPO_PATH.findall(text)}
    names = {n for n in names if not any(Path(part).stem.isupper() for part in n.split("/"))}  # NAME.safetensors
    return [name for name in sorted(names) if not (ROOT / name).exists()]


def module_file(dotted: str) -> Path | None:
    base = ROOT.joinpath(*dotted.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def names_a_module_or_its_attribute(dotted: str) -> bool:
    """The module itself, or a name defined in the longest module it starts with (`toylens.Batch.from_tokens`:
    `Batch` in toylens/__init__.py), read as text: no imports, so no torch."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        found = module_file(".".join(parts[:n]))
        if found is not None:
            return n == len(parts) or re.search(rf"\b{re.escape(parts[n])}\b", found.read_text()) is not None
    return False


def stale_modules(text: str) -> list[str]:
    """The dotted modules (or their attributes) `text` names that do not exist."""
    return [name for name in sorted(set(DOTTED.findall(text))) if not names_a_module_or_its_attribute(name)]


def test_every_repository_path_named_in_the_docs_exists():
    missing = [f"{page.relative_to(ROOT)}: {name}" for page in DOCS for name in missing_paths(page.read_text())]
    assert not missing, missing


def test_every_module_named_in_the_docs_exists():
    stale = [f"{page.relative_to(ROOT)}: {name}" for page in DOCS for name in stale_modules(page.read_text())]
    assert not stale, stale


def documented_commands() -> list[tuple[str, ...]]:
    found = set()
    for page in DOCS:
        for command, word in COMMAND.findall(page.read_text()):
            if command in ("train", "sweep"):
                found.add((command, word if word in BUILT_IN else "winograd"))
            else:
                found.add((command,))
    return sorted(found)


def unknown_commands(text: str) -> list[str]:
    """The `toylens COMMAND`s `text` names that the console does not have."""
    from toylens.console import COMMANDS

    return sorted({f"toylens {command}" for command, _ in COMMAND.findall(text) if command not in COMMANDS})


def test_the_docs_name_toylens_commands():
    assert {("list",), ("accuracy",), ("edges",), ("results",), ("export",)} <= set(documented_commands())


@pytest.mark.parametrize("argv", documented_commands())
def test_every_documented_toylens_command_exists_and_its_help_runs(argv, capsys):
    from toylens.console import COMMANDS, main

    assert argv[0] in COMMANDS, f"toylens {argv[0]}: no such command (toylens --help)"
    if argv == ("list",):
        main(["list"])
    else:
        with pytest.raises(SystemExit) as done:
            main([*argv, "--help"])
        assert done.value.code == 0, capsys.readouterr().err
    assert capsys.readouterr().out.startswith("usage: toylens") or argv == ("list",)


INDEX = ROOT / "docs" / "index.md"
GROUPS = ["Start", "Results", "Methods", "Reference", "Reliability"]


def unindexed(index_text: str) -> list[str]:
    """The pages under docs/ that the index (given as text) does not link."""
    linked = {(INDEX.parent / target).resolve() for target in relative_links(index_text)}
    return [
        str(page.relative_to(ROOT)) for page in DOCS if page not in (README, INDEX) and page.resolve() not in linked
    ]


def test_the_readme_links_the_grouped_index_and_the_index_every_page():
    assert INDEX.resolve() in {(ROOT / target).resolve() for target in relative_links(README.read_text())}
    text = INDEX.read_text()
    assert re.findall(r"^## (.+)$", text, flags=re.M) == GROUPS
    assert not unindexed(text), f"pages not in docs/index.md: {unindexed(text)}"


ARCHITECTURE = ROOT / "docs" / "architecture.md"
PACKAGES = ("common", "models", "tasks", "probes", "toylens")


def architecture_files(text: str) -> list[str]:
    """The files docs/architecture.md's table names, each under its row's package (`probes/circuits/`'s
    `methods/joint.py` is probes/circuits/methods/joint.py)."""
    rows = re.findall(r"^\| `([\w/]+/)` \| (.*) \|$", text, flags=re.M)
    return [f"{package}{name}" for package, cell in rows for name in re.findall(r"`([\w/]+\.py)`", cell)]


def misplaced_files(text: str) -> list[str]:
    """Files the table names that are not where their row says."""
    return [name for name in architecture_files(text) if not (ROOT / name).is_file()]


def unnamed_modules(text: str) -> list[str]:
    """Modules of the packages the table does not name (an `__init__.py` is named by its package's files)."""
    named = set(architecture_files(text))
    files = sorted(str(p.relative_to(ROOT)) for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
    return [f for f in files if f not in named and not f.endswith("/__init__.py")]


def test_architecture_names_every_module_in_its_package_s_row():
    text = ARCHITECTURE.read_text()
    assert len(architecture_files(text)) > 100
    assert not misplaced_files(text), misplaced_files(text)
    assert not unnamed_modules(text), f"modules docs/architecture.md does not name: {unnamed_modules(text)}"


def test_the_checks_report_a_broken_page():
    """Each check finds what a page gets wrong: a path, a module, a command, a python -m form, a link, a page
    left out of the index, a module left out of the architecture or named in the wrong row."""
    broken = (
        "Read `probes/circuits/nowhere.py` and `probes.circuits.nowhere`, run `toylens frobnicate` and "
        "`.venv/bin/python -m tasks.nowhere train`, see [the page](nowhere.md)."
    )
    assert missing_paths(broken) == ["probes/circuits/nowhere.py"]
    assert stale_modules(broken) == ["probes.circuits.nowhere"]
    assert unknown_commands(broken) == ["toylens frobnicate"]
    assert unknown_entries(broken) == ["python -m tasks.nowhere"]
    assert missing_files(broken, ROOT / "docs") == ["nowhere.md"]
    # The real pages, each with one thing broken.
    readme = README.read_text()
    assert missing_paths(readme.replace("docs/results/winograd.md", "docs/results/winogrid.md")) == [
        "docs/results/winogrid.md"
    ]
    assert unknown_commands(readme.replace("toylens edges", "toylens edgez")) == ["toylens edgez"]
    assert unindexed(INDEX.read_text().replace("(tracr.md)", "(guide.md)")) == ["docs/tracr.md"]
    architecture = ARCHITECTURE.read_text()
    assert unnamed_modules(architecture.replace("`fused.py`", "fused")) == ["models/fused.py"]
    assert misplaced_files(architecture.replace("`fused.py`,", "`fuse.py`,")) == ["models/fuse.py"]


def test_the_model_counts_the_docs_state_are_the_registries():
    """The leaderboard's model counts are typed into prose; this keeps them from going stale."""
    from collections import Counter

    from probes.circuits.leaderboard import truth_models
    from probes.circuits.truth.tracr_programs import PROGRAMS

    kinds = Counter(entry.family for entry in truth_models().values())
    board = (ROOT / "docs/leaderboard.md").read_text()
    for label, kind in (("Planted", "planted"), ("Gates", "gate"), ("Tracr", "tracr"), ("Trained", "trained")):
        assert f"**{label}** ({kinds[kind]}" in board, (label, kinds[kind])
    assert f"toylens compiles {len(PROGRAMS)} programs" in (ROOT / "docs/tracr.md").read_text()
