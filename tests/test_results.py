"""The results pages (`toylens results`) are made from what the runs stored: every
number on a page is one a run's metrics.json or the report's report.json holds, regenerating gives
the same page, and bad or mismatched input is one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from common.cli import UsageError


@pytest.fixture(scope="module")
def reported(tiny_runs, tmp_path_factory) -> Path:
    """A copy of the tiny runs with their circuit report."""
    from toylens.report import report_command

    runs = tmp_path_factory.mktemp("results") / "winograd"
    shutil.copytree(tiny_runs, runs, ignore=shutil.ignore_patterns("report", "edges", ".toylens.lock"))
    report_command(runs, None)
    return runs


def page_of(runs: Path, out: Path) -> str:
    from probes.report.outputs.results import results_command

    results_command([runs], out, "python -m probes.report.outputs.results (test)")
    return (out / "winograd.md").read_text()


def test_the_page_shows_what_the_runs_and_the_report_stored(reported, tmp_path):
    from tasks.training.runs import find_runs

    text = page_of(reported, tmp_path)
    report = json.loads((reported / "report" / "report.json").read_text())
    assert "Made by `python -m probes.report.outputs.results (test)`" in text and f"the 2 runs in `{reported}`" in text
    for line in report["summary"]:
        assert line in text
    accuracy = text.split("## Accuracy")[1].split("\n## ")[0]
    for run in find_runs(reported):
        heldout = run.metrics["evaluation"]["splits"]["heldout"]["accuracy"]["value"]
        row = next(line for line in accuracy.splitlines() if line.startswith(f"| {run.model_name} |"))
        assert f"| {heldout:.1%} |" in row and f"{run.metrics['steps']} ({run.metrics['stop_reason']})" in row
        assert f"| {run.model_name} | {run.config['spec']['n_layers']} | {run.config['spec']['d_model']} |" in text
    assert f"lr={run.config['training']['lr']}" in text and "nouns=8" in text
    for figure in (reported / "report" / "figures").glob("*.png"):
        copied = tmp_path / "figures" / "winograd" / figure.name
        assert copied.read_bytes() == figure.read_bytes() and f"](figures/winograd/{copied.name})" in text
    from common.atomic import atomic_write

    # As if an earlier page had drawn it: written by toylens, so toylens may drop it.
    atomic_write(tmp_path / "figures" / "winograd" / "gone.png", lambda temp: Path(temp).write_bytes(b""))
    assert page_of(reported, tmp_path) == text  # regenerating gives the same page ...
    assert not (tmp_path / "figures" / "winograd" / "gone.png").exists()  # ... and drops figures it no longer shows


def test_a_sweep_folder_gives_its_census_page(finished_sweep, tmp_path):
    from probes.census import take_census
    from probes.report.outputs.results import results_command

    sweep = tmp_path / "sweep"
    shutil.copytree(finished_sweep, sweep)
    census = take_census(sweep)
    results_command([sweep], tmp_path / "out", "python -m probes.report.outputs.results (test)")
    text = (tmp_path / "out" / "census-sweep.md").read_text()
    finished = sum(g.finished for g in census.groups)
    assert text.startswith("# Circuit census: winograd") and f"({finished} finished runs)" in text and finished == 2
    for share in census.groups[0].circuits:
        assert f"| {share.label} | {share.count}/{share.share.n} |" in text
    assert (tmp_path / "out" / "figures" / "census-sweep" / "census.png").stat().st_size > 1000
    assert "](figures/census-sweep/census.png)" in text


def test_a_report_of_other_runs_is_refused(reported, tmp_path):
    runs = tmp_path / "winograd"
    shutil.copytree(reported, runs)
    shutil.rmtree(runs / "bag-of-words")
    with pytest.raises(UsageError, match="analysed other runs than"):
        page_of(runs, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_figure_outside_the_report_is_refused(reported, tmp_path):
    runs = tmp_path / "winograd"
    shutil.copytree(reported, runs)
    path = runs / "report" / "report.json"
    report = json.loads(path.read_text())
    report["runs"][0]["figure"] = "../../attn-only-2x1/seed0/model.safetensors"
    path.write_text(json.dumps(report))
    with pytest.raises(UsageError, match="is not a figures/NAME.png of the report"):
        page_of(runs, tmp_path / "out")


def test_a_users_page_is_never_replaced(reported, tmp_path):
    (tmp_path / "winograd.md").write_text("my notes")
    with pytest.raises(UsageError, match="was not written by toylens"):
        page_of(reported, tmp_path)
    assert (tmp_path / "winograd.md").read_text() == "my notes" and not (tmp_path / "figures").exists()


def test_runs_without_a_report_are_one_line(tiny_runs, tmp_path):
    runs = tmp_path / "winograd"
    shutil.copytree(tiny_runs, runs, ignore=shutil.ignore_patterns("report", ".toylens.lock"))
    done = subprocess.run(
        [sys.executable, "-m", "toylens", "results", str(runs), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "report.json does not exist; write it with python -m probes.circuit report" in done.stderr


def test_the_edges_commands_page_comes_with_its_figures(reported, tmp_path):
    from probes.settings import ReportSettings
    from toylens.edges import edges_command

    runs = tmp_path / "winograd"
    shutil.copytree(reported, runs)
    # A 150-step run barely tells its pairs apart: below the report's min_gap it would draw no figure.
    edges_command(runs, None, ReportSettings(min_gap=0.0))
    written = (runs / "edges" / "edges.md").read_text()
    page_of(runs, tmp_path / "out")
    text = (tmp_path / "out" / "winograd-edges.md").read_text()
    assert written.split("\n", 1)[1].replace("](figures/", "](figures/winograd-edges/") in text
    from probes.report.edge_render import figure_name

    figure = runs / "edges" / "figures" / figure_name("attn-only-2x1", 0)
    assert (tmp_path / "out" / "figures" / "winograd-edges" / figure.name).read_bytes() == figure.read_bytes()
    (runs / "edges" / "edges.md").write_text(written + "\n![x](figures/../../attn-only-2x1/seed0/config.json)\n")
    with pytest.raises(UsageError, match="is not a figures/NAME.png"):
        page_of(runs, tmp_path / "again")
