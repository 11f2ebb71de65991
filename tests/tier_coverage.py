"""Which behaviours only the slow tier checks (issue 54). Not a test module; run it as

    .venv/bin/python tests/tier_coverage.py [--files-only]

Collects both tiers as tests/conftest.py splits them and prints the totals, the files checked by the
slow tier alone, each with its module docstring's first sentence (what those tests are about), and
then (unless --files-only) per test file how many tests run in the fast tier (plain `pytest`) and how
many only in `pytest -m slow`."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def collected(marker: str) -> Counter[str]:
    """Tests per file that `pytest -m MARKER --collect-only` selects (its quiet listing: `FILE: COUNT`)."""
    listing = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", marker, "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    counts: Counter[str] = Counter()
    for line in listing.splitlines():
        name, _, count = line.rpartition(": ")
        if name.endswith(".py") and count.isdigit():
            counts[name] = int(count)
    return counts


def about(test_file: str) -> str:
    """The first sentence of the file's docstring."""
    docstring = ast.get_docstring(ast.parse((ROOT / test_file).read_text())) or "(no module docstring)."
    first, period, _ = docstring.replace("\n", " ").partition(". ")
    return first + (period.strip() or "")


def main(argv: list[str]) -> int:
    fast, slow = collected("not slow"), collected("slow")
    files = sorted(set(fast) | set(slow))
    print(f"{sum(fast.values())} fast tests, {sum(slow.values())} slow-only tests, {len(files)} files")
    only_slow = [name for name in files if not fast[name]]
    print(f"\nChecked by the slow tier alone ({len(only_slow)} files):\n")
    for name in only_slow:
        print(f"- {name}: {about(name)}")
    if "--files-only" not in argv:
        print("\n| file | fast | slow only |\n|---|---|---|")
        for name in files:
            print(f"| {name} | {fast[name]} | {slow[name]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
