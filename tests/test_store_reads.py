"""Where the package reads stored files (JSON, safetensors, anything torch or NumPy would unpickle):
only in the store, `common.store` (issue 36). READERS lists, per file, how many such calls it holds,
and the test fails on a call anywhere else or on a count that changed, naming the places, so a new
reader cannot slip in beside the store."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("common", "models", "tasks", "probes", "toylens")
READ = re.compile(
    r"\bjson\.loads?\(|\bsafe_open\(|\bload_file\(|\btorch\.load\(|\bnp\.load\(|\bimport pickle\b|\bpickle\."
)

READERS = {
    "common/store.py": 6,  # the store: strict and lenient JSON, safetensors with and without metadata
}


def reads(root: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if READ.search(line) and not line.lstrip().startswith("#"):
                    found.setdefault(path.relative_to(root).as_posix(), []).append(f"{number}: {line.strip()}")
    return found


def unexpected(found: dict[str, list[str]]) -> list[str]:
    return [
        f"{name} ({len(lines)}, listed {READERS.get(name, 0)}): " + " | ".join(lines)
        for name, lines in sorted(found.items())
        if len(lines) != READERS.get(name, 0)
    ] + [f"{name}: listed {count}, none found" for name, count in READERS.items() if name not in found]


def test_stored_files_are_read_only_where_listed():
    assert unexpected(reads(ROOT)) == []


def test_a_planted_read_is_named(tmp_path):
    (tmp_path / "probes").mkdir()
    (tmp_path / "probes" / "planted.py").write_text("import json\n# json.load(f) in a comment\nx = json.load(f)\n")
    assert unexpected(reads(tmp_path))[0] == "probes/planted.py (1, listed 0): 3: x = json.load(f)"
