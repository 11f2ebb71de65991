"""Compare two report.json files: the largest numeric difference (timings left out) and every
non-numeric difference (a key or list length on one side only, a changed string or flag).

    .venv/bin/python benchmarks/compare_reports.py A/report.json B/report.json

Used to check that a change leaves the report's numbers as they were (docs/performance.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

SHOWN = 30  # non-numeric differences printed


def read(path: str):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        print(f"error: {path} is not a readable JSON file ({error}); pass two report.json files", file=sys.stderr)
        sys.exit(2)


def differences(a, b, path: str = "") -> tuple[float, str, list]:
    """(largest numeric difference, where, non-numeric differences) between two JSON values."""
    worst, where, other = 0.0, "", []
    stack = [(a, b, path)]
    while stack:
        x, y, here = stack.pop()
        if isinstance(x, dict) and isinstance(y, dict):
            for key in sorted(set(x) | set(y)):
                if key not in x or key not in y:
                    other.append(("key", f"{here}/{key}"))
                else:
                    stack.append((x[key], y[key], f"{here}/{key}"))
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                other.append(("length", here, len(x), len(y)))
            else:
                stack.extend((u, v, f"{here}[{i}]") for i, (u, v) in enumerate(zip(x, y)))
        elif (
            isinstance(x, (int, float))
            and isinstance(y, (int, float))
            and not isinstance(x, bool)
            and not isinstance(y, bool)
        ):
            if abs(x - y) > worst and "seconds" not in here:  # wall time differs run to run
                worst, where = abs(x - y), here
        elif x != y:
            other.append(("value", here, str(x)[:80], str(y)[:80]))
    return worst, where, other


def main() -> None:
    from common.cli import Parser  # argparse's errors on one line, as every toylens command's

    parser = Parser(prog="python benchmarks/compare_reports.py", description=__doc__.split("\n")[0])
    parser.add_argument("first")
    parser.add_argument("second")
    args = parser.parse_args()
    worst, where, other = differences(read(args.first), read(args.second))
    print(f"max numeric difference {worst:.3g} at {where or '-'}")
    print(f"{len(other)} non-numeric differences")
    for difference in other[:SHOWN]:
        print(" ", *difference)


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(main)  # a UsageError raised anywhere in it: one line, exit 2
