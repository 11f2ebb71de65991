"""Scripts in benchmarks/ end a UsageError in one line (exit 2, no traceback): every script runs its
body under common.cli.run_cli; the Tracr scripts refuse without tracr or jax, and with a missing,
truncated or corrupt fixture."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from probes.circuits.truth import tracr
from tests.refusals import one_line

ROOT = Path(__file__).resolve().parents[1]


def script(*argv: str, cwd: Path = ROOT) -> tuple[int, str, str]:
    import os
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        check=False,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)},
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.skipif(importlib.util.find_spec("tracr") is not None, reason="tracr is installed: nothing to refuse")
def test_making_fixtures_without_tracr_is_one_line(tmp_path):
    one_line(
        script("benchmarks/make_tracr_fixtures.py", "--out", str(tmp_path)),
        "needs the tracr extra",
        "pip install -e .[tracr]",
    )
    assert list(tmp_path.iterdir()) == []


def broken_fixtures(tmp_path: Path, how: str) -> Path:
    folder = tmp_path / how
    shutil.copytree(tracr.FIXTURES, folder)
    weights, meta = folder / "hist.safetensors", folder / "hist.json"
    if how == "missing":
        weights.unlink()
    elif how == "truncated":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif how == "corrupt":
        weights.write_bytes(b"\xff" * 64)
    elif how == "truncated json":
        meta.write_text(meta.read_text()[:40])
    elif how == "other weights":  # the two files of different programs
        shutil.copy(folder / "sort.safetensors", weights)
    return folder


@pytest.mark.parametrize("how", ["missing", "truncated", "corrupt", "truncated json", "other weights"])
def test_a_bad_fixture_is_one_line_from_load(tmp_path, how):
    from common.cli import UsageError

    with pytest.raises(UsageError) as refused:
        tracr.load("hist", broken_fixtures(tmp_path, how))
    assert (
        "\n" not in str(refused.value) and "hist" in str(refused.value) and "make_tracr_fixtures" in str(refused.value)
    )


@pytest.mark.parametrize("how", ["missing", "truncated", "corrupt"])
def test_the_table_script_refuses_a_bad_fixture_in_one_line(tmp_path, how):
    one_line(
        script(
            "benchmarks/tracr_table.py",
            "--programs",
            "hist",
            "--pairs",
            "4",
            "--fixtures",
            str(broken_fixtures(tmp_path, how)),
        ),
        "hist",
        "make_tracr_fixtures",
    )


def test_every_benchmark_script_runs_its_body_under_run_cli():
    """A script's `if __name__ == "__main__":` block hands its body to run_cli, so a UsageError
    raised anywhere inside (a helper's refusal included) reaches the user as one line."""
    import ast

    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    checked = 0
    for path in scripts:
        tree = ast.parse(path.read_text())
        entry = [node for node in tree.body if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)]
        if not entry:
            continue
        checked += 1
        calls = {ast.unparse(call.func) for node in entry for call in ast.walk(node) if isinstance(call, ast.Call)}
        mains = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name == "main"]
        inside = {ast.unparse(call.func) for node in mains for call in ast.walk(node) if isinstance(call, ast.Call)}
        assert "run_cli" in calls | inside, f"{path.name}: its body does not run under run_cli"
    assert checked >= 10


def test_no_benchmark_script_builds_a_bare_argparse_parser():
    """argparse's own parser prints its usage block with a bad argument; common.cli.Parser says it in one line."""
    offenders = [
        path.name for path in (ROOT / "benchmarks").glob("*.py") if "argparse.ArgumentParser(" in path.read_text()
    ]
    assert offenders == []


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["benchmarks/verify_report.py", "--tolerance", "x"], "--tolerance"),
        (["benchmarks/circuit_graph.py", "--pairs", "many"], "--pairs"),
        (["benchmarks/compare_reports.py", "nowhere.json", "nowhere-else.json"], "nowhere.json"),
    ],
)
def test_a_bad_argument_or_file_to_a_benchmark_script_is_one_line(tmp_path, argv, fragment):
    one_line(script(*argv), fragment)


@pytest.mark.parametrize("name", ["tracr_table.py", "circuit_graph.py", "train_speed.py"])
def test_a_docs_page_that_is_a_link_is_refused_in_one_line(tmp_path, name):
    """--docs writes into a page's marked block: through a symbolic link it would change a user's
    file elsewhere, so it is refused as every command's --out is (common.cli.out_path)."""
    users = tmp_path / "users-page.md"
    users.write_text(f"<!-- {name} -->\nmine\n<!-- end {name} -->\n")
    link = tmp_path / "page.md"
    link.symlink_to(users)
    one_line(script(f"benchmarks/{name}", "--docs", str(link)), f"{link} is a symbolic link")
    assert users.read_text() == f"<!-- {name} -->\nmine\n<!-- end {name} -->\n"
