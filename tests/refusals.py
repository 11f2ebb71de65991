"""Helpers for the tests of refused input: run a CLI, assert its one-line refusal, copy and edit runs.
Not a test module."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


RUN = Path("attn-only-2x1") / "seed0"
TRAIN = (
    "tasks.winograd",
    "train",
    "--models",
    "attn-only-2x1",
    "--seeds",
    "0-0",
    "--no-progress",
    "--steps",
    "5",
    "--nouns",
    "6",
    "--jobs",
    "1",
)


def cli(*argv: str, cwd: Path | None = None, env: dict | None = None, **popen) -> tuple[int, str, str]:
    done = subprocess.run(
        [sys.executable, "-m", *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
        **popen,
    )
    return done.returncode, done.stdout, done.stderr


def one_line(result: tuple, *fragments: str) -> str:
    code, _, stderr = result
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, stderr
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in stderr, stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def contents(folder: Path) -> dict:
    """Every file under `folder` (links as their target), to show nothing was changed."""
    return {
        p.relative_to(folder).as_posix(): (os.readlink(p) if p.is_symlink() else p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file() or p.is_symlink()
    }


def copy_runs(tiny_runs: Path, tmp_path: Path) -> Path:
    """The shared tiny runs as training left them: without the report a report test may have
    written into the session's copy (tests here put their own files where the report goes)."""
    out = tmp_path / "winograd"
    shutil.copytree(tiny_runs, out, ignore=lambda folder, names: ["report"] if Path(folder) == Path(tiny_runs) else [])
    return out


def edit_json(path: Path, edit, sign: bool = False) -> None:
    from tasks.training.runs import run_sha256

    config = json.loads(path.read_text())
    edit(config)
    if sign:
        config["run_sha256"] = run_sha256(config)
    path.write_text(json.dumps(config))


def in_process(main, argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    captured = capsys.readouterr()
    return stopped.value.code, captured.out, captured.err


def finished(main, argv, capsys) -> tuple[int, str, str]:
    """in_process for a command that may succeed (exit status 0) or stop (SystemExit)."""
    try:
        main(argv)
        code = 0
    except SystemExit as stopped:
        code = stopped.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def limited_memory():
    """preexec_fn: 2 GiB of address space, so a command that would fill memory fails fast instead."""
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))


QUICK = ("--seeds", "0-0", "--steps", "1", "--jobs", "1", "--no-progress")


PLUGINS = Path(__file__).parent / "plugins"


def fixture_plugins_on_path(module: str):
    """For a module-scoped fixture: the test plugins' dist-info folders on sys.path while it runs,
    then `module` (the plugin code) forgotten so the next module imports it afresh."""
    sys.path.insert(0, str(PLUGINS))
    yield
    sys.path.remove(str(PLUGINS))
    sys.modules.pop(module, None)
