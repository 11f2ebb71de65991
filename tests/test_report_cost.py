"""benchmarks/report_cost.py on a tiny family: every report part and publish step gets a row, the
steps inside the parts are timed without being counted twice, and a missing folder is one line."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "report_cost.py"


def benchmark():
    spec = importlib.util.spec_from_file_location("report_cost", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def rows(text: str) -> dict[str, float]:
    """step -> CPU seconds, from the printed table."""
    return {m.group(1).strip(): float(m.group(2)) for m in re.finditer(r"^\| ([^|]+) \| ([\d.]+) \|", text, re.M)}


def test_every_part_and_step_is_timed_and_the_total_adds_up(tiny_runs):
    from probes.report.measure import parts

    text = benchmark().report_cost(tiny_runs, steps=True, whole=False)
    table = rows(text)
    for part in parts():
        assert f"measure: {part.key}" in table and f"render: {part.key}" in table
    for step in (
        "context: model",
        "context: reference",
        "render: views",
        "write: report.md + report.json",
        "write: report.html",
        "write: MIB exports",
        "in parts: edge_circuit",
        "in parts: save",
    ):
        assert step in table, step
    # The oracle ran on the traced run, and it costs something.
    assert table["in parts: edge_circuit"] > 0 and table["measure: edge_circuits"] >= table["in parts: edge_circuit"]
    steps = sum(
        cpu for step, cpu in table.items() if not step.startswith("in parts") and step != "all steps timed here"
    )
    assert abs(table["all steps timed here"] - steps) < 0.05
    assert "2 runs of" in text


def test_a_missing_runs_folder_is_one_line(tmp_path):
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "nope")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "does not exist" in done.stderr
