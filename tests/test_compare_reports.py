"""benchmarks/compare_reports.py: the check the docs use to say a change left the report's numbers
and to list the sentences it changed, before and after."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "compare_reports.py"

BEFORE = {
    "runs": [
        {
            "run": "{root}/attn-only-2x1/seed0",
            "accuracy": 0.9375,
            "tiny": 1.0,
            "seconds": 1.0,
            "summary": ["L0H0 attends to the name", "no path recovers 50% of the gap"],
            "only": 1,
            "ok": True,
        }
    ],
    "settings": {"threshold": 0.5},
}
AFTER = {
    "runs": [
        {
            "run": "{root}/attn-only-2x1/seed0",
            "accuracy": 0.875,  # the deliberate numeric change
            "tiny": 1.0 + 2e-7,  # below the tolerance: the max difference only
            "seconds": 9.0,  # wall time: never a difference
            "summary": ["L0H0 attends to the name", "L0H0 -> MLP0 -> logits carries 94% of the gap", "and more"],
            "ok": False,
            "new": "x",
        }
    ],
    "settings": {"threshold": 0.5},
}


def write(folder: Path, report: dict) -> Path:
    folder.mkdir(parents=True)
    path = folder / "report.json"
    path.write_text(json.dumps(report).replace("{root}", str(folder)))
    return path


def compare(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, argv)], capture_output=True, text=True)


def test_it_lists_every_number_past_the_tolerance_and_every_changed_sentence(tmp_path):
    out = compare(write(tmp_path / "a", BEFORE), write(tmp_path / "b", AFTER))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "max numeric difference 0.0625 at /runs[0]/accuracy",
        "1 numbers differ by more than 1e-06",
        "  /runs[0]/accuracy: 0.9375 -> 0.875",
        "1 changed strings",  # the run's path differs by its folder only: not a change
        "  /runs[0]/summary[1]",
        "    before: no path recovers 50% of the gap",
        "    after:  L0H0 -> MLP0 -> logits carries 94% of the gap",
        "2 added, 1 removed",
        "  + /runs[0]/new",
        "  + /runs[0]/summary[2]",
        "  - /runs[0]/only",
        "1 other changes (a flag, null or type)",
        "  /runs[0]/ok: True -> False",
    ]


def test_equal_reports_differ_by_nothing_and_a_looser_tolerance_hides_the_number(tmp_path):
    a = write(tmp_path / "a", BEFORE)
    same = compare(a, a).stdout.splitlines()
    assert same[0] == "max numeric difference 0 at -" and "0 changed strings" in same and "0 added, 0 removed" in same
    loose = compare(a, write(tmp_path / "b", AFTER), "--tolerance", "0.1").stdout
    assert "max numeric difference 0.0625 at /runs[0]/accuracy\n0 numbers differ by more than 0.1\n" in loose


def test_a_missing_file_is_one_line_and_exit_2(tmp_path):
    out = compare(tmp_path / "none.json", tmp_path / "none.json")
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1 and "none.json" in out.stderr
