"""The README's first screen works as written, and nothing the docs name can go stale unnoticed: the
two documented commands exactly, the five most used commands run (cheap ones for real, the others'
`--help` naming every flag they pass), every `python -m X` in README.md and docs/ one of the
documented aliases (or pytest, pip, the plugin guide's own module), every `toylens COMMAND` a
command whose `--help` runs, every repository path and module named a file that exists, every
script and relative link a file, and every page in docs/ linked from the README or another page."""

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


def documented_modules() -> list[str]:
    return sorted({name for page in DOCS for name in MODULE.findall(page.read_text())})


def test_the_docs_name_python_m_forms():
    assert {"tasks.winograd", "probes.circuit", "pytest"} <= set(documented_modules())
    # One command surface: everything else is `toylens COMMAND` (tests/test_commands.py).
    assert set(documented_modules()) <= {"tasks.winograd", "probes.circuit", "toylens", "pytest", "pip", "mytask"}


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


def test_every_documented_script_and_link_exists():
    missing = []
    for page in DOCS:
        text = page.read_text()
        missing += [f"{page.name}: {script}" for script in SCRIPT.findall(text) if not (ROOT / script).is_file()]
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                missing.append(f"{page.relative_to(ROOT)}: {target}")
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
BUILT_IN = ("winograd", "induction", "text")  # train and sweep take a task; a plugin's is the reader's


def missing_paths(page: Path) -> list[str]:
    names = {m.rstrip(".") for m in REPO_PATH.findall(page.read_text())}
    names = {n for n in names if not any(Path(part).stem.isupper() for part in n.split("/"))}  # NAME.safetensors
    return [f"{page.relative_to(ROOT)}: {name}" for name in sorted(names) if not (ROOT / name).exists()]


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


def test_every_repository_path_named_in_the_docs_exists():
    missing = [line for page in DOCS for line in missing_paths(page)]
    assert not missing, missing


def test_every_module_named_in_the_docs_exists():
    stale = [
        f"{page.relative_to(ROOT)}: {name}"
        for page in DOCS
        for name in sorted(set(DOTTED.findall(page.read_text())))
        if not names_a_module_or_its_attribute(name)
    ]
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


def linked_pages() -> set[Path]:
    targets = set()
    for page in DOCS:
        for target in LINK.findall(page.read_text()):
            if not re.match(r"[a-z]+:", target) and not target.startswith("#"):
                resolved = (page.parent / target.split("#")[0]).resolve()
                if resolved != page.resolve():
                    targets.add(resolved)
    return targets


def test_no_page_in_docs_is_unlinked():
    orphans = [str(page.relative_to(ROOT)) for page in DOCS if page != README and page.resolve() not in linked_pages()]
    assert not orphans, f"linked from neither README.md nor another page: {orphans}"


def test_architecture_names_each_packages_files_where_they_are():
    """docs/architecture.md's table: every file a package's row names lies in that package."""
    rows = re.findall(r"^\| `([\w/]+/)` \| (.*) \|$", (ROOT / "docs" / "architecture.md").read_text(), flags=re.M)
    assert len(rows) >= 8
    misplaced = [
        f"{package}{name}"
        for package, cell in rows
        for name in re.findall(r"`([\w/]+\.py)`", cell)
        if not (ROOT / package / name).is_file()
    ]
    assert not misplaced, misplaced
