"""The head-ablation notebook runs top to bottom on a fresh machine, in the venv's own Python."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import scaled_by_load


NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "ablate_heads.ipynb"


def venv_kernel(root: Path) -> str:
    """A kernelspec that runs this very interpreter, so the notebook sees the installed toylens
    whatever python3 kernels the machine has."""
    name = "toylens-test"
    folder = root / "kernels" / name
    folder.mkdir(parents=True)
    (folder / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "toylens venv",
                "language": "python",
            }
        )
    )
    return name


def test_notebook_is_committed_without_outputs():
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


def executed(tmp_path, monkeypatch, **environment) -> tuple[str, list]:
    """Run the notebook top to bottom in this venv; its text output and its outputs."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # tiny model, shared machine
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    kernel = venv_kernel(tmp_path / "jupyter")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        notebook, kernel_name=kernel, timeout=120, resources={"metadata": {"path": str(NOTEBOOK.parent)}}
    ).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"], [o for o in outputs if o.output_type == "error"]
    return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs), outputs


def test_notebook_takes_any_run_and_ablates_heads_it_has(tiny_runs, tmp_path, monkeypatch):
    run = tiny_runs / "attn-only-2x1" / "seed0"  # two layers of one head: no L0H1 to ablate
    text, outputs = executed(tmp_path, monkeypatch, TOYLENS_RUN=str(run))
    assert f"{run}: 2 layer(s) x 1 head(s)" in text and "heads: L0H0, L1H0" in text
    assert "L1H0" in text.split("heads ablated")[1]  # the default ablation: the last layer's first head
    # The report's views inline: the page of report.html for this run, its edge graph's data in it.
    (views,) = [o["data"]["text/html"] for o in outputs if "report-data" in o.get("data", {}).get("text/html", "")]
    # (the page data is script_json: its "->" is written "-\u003e")
    assert (
        views.startswith("<iframe srcdoc=") and "L0H0 -\\u003e L1H0.q" in views and 'sandbox="allow-scripts"' in views
    )


@pytest.fixture(scope="module")
def own_run(tmp_path_factory) -> tuple[str, list, float]:
    """The notebook with no run given and none of the main job's, executed once for the two tests
    that read it (they only read its output): (text, outputs, seconds it took)."""
    import time

    root = tmp_path_factory.mktemp("own-run")
    with pytest.MonkeyPatch.context() as monkeypatch:
        started = time.perf_counter()
        text, outputs = executed(root, monkeypatch, TOYLENS_RUNS=str(root / "no-runs"))
        seconds = time.perf_counter() - started
    return text, outputs, seconds


def test_ablate_heads_notebook_runs_clean(own_run):
    # No runs folder: the notebook trains its own short run.
    text, outputs, _ = own_run
    assert "1 layer(s) x 4 head(s)" in text and "largest change in mean attention: 0.000" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the heatmaps
    # The sweep table names every head of the one-layer, four-head model and the whole layer.
    assert all(f"L0H{h}" in text for h in range(4)) and "L0H0, L0H1, L0H2, L0H3" in text


def test_the_notebook_runs_in_under_a_minute_on_a_main_job_model_with_roles_named(own_run):
    """No run given and none of the main job's: it trains the main job's block-1 model briefly, then
    every cell, the report's views included, in one torch thread (issue #37: 205 s with torch's
    default threads)."""
    text, _, seconds = own_run
    assert "block-1" in text and seconds < scaled_by_load(60), f"{seconds:.0f} s"


def test_the_notebook_names_the_role_a_head_attends_where_the_task_gives_roles(tmp_path, monkeypatch):
    """On markcopy (a plugin whose marker sits anywhere) the sweep table's "attends most to" gives a
    role and its mass, not a key position."""
    import re
    import sys

    from tests.refusals import PLUGINS
    from tests.test_varying_layout import train

    sys.path.insert(0, str(PLUGINS))
    try:
        runs = train("markcopy", tmp_path / "runs", ("attn-only-2x1",), max_steps=200)
    finally:
        sys.path.remove(str(PLUGINS))
        sys.modules.pop("varying_tasks", None)
    monkeypatch.setenv("PYTHONPATH", f"{PLUGINS}:{Path(__file__).resolve().parents[1]}")
    text, _ = executed(tmp_path, monkeypatch, TOYLENS_RUN=str(runs / "attn-only-2x1" / "seed0"))
    assert re.search(r"\b(marker|value|query) \(\d+%\)", text), text[-2000:]
