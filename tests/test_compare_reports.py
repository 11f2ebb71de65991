"""benchmarks/compare_reports.py: the check the docs use to say a change left the report's numbers."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "compare_reports.py"


def compare(a: Path, b: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True, text=True)


def test_it_finds_the_largest_numeric_and_every_other_difference(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"x": [1.0, 2.0], "seconds": 1.0, "name": "L0H0", "only": 1, "ok": True}))
    b.write_text(json.dumps({"x": [1.0, 2.5], "seconds": 9.0, "name": "L0H1", "ok": False}))
    out = compare(a, b)
    assert out.returncode == 0, out.stderr
    assert "max numeric difference 0.5 at /x[1]" in out.stdout
    assert "3 non-numeric differences" in out.stdout  # the key, the name, the flag; seconds ignored


def test_a_missing_file_is_one_line_and_exit_2(tmp_path):
    out = compare(tmp_path / "none.json", tmp_path / "none.json")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "not a readable JSON" in out.stderr
