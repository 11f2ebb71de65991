"""Compare two report.json files, walked in parallel: the largest numeric difference and where
(timings left out), every number that moved past the tolerance (old, new), every changed string (a
sentence: before, after), every key or list item on one side only, and every changed flag or type.

    .venv/bin/python benchmarks/compare_reports.py BEFORE/report.json AFTER/report.json [--tolerance 1e-6]

Used to check that a change leaves the report's numbers as they were and to list the sentences it
changed (docs/performance.md). The folder each file sits in is written `<report>` in its strings, so
two reports of the same runs in different places compare equal where only their paths differ."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

TOLERANCE = 1e-6  # float32 forwards in another order (a fused kernel) move numbers by ~1e-7


@dataclass
class Differences:
    """What differs between two JSON values; every path is JSON-pointer-like (`/key[index]`)."""

    worst: float = 0.0
    where: str = ""
    numbers: list[tuple[str, float, float]] = field(default_factory=list)  # past the tolerance
    strings: list[tuple[str, str, str]] = field(default_factory=list)
    added: list[str] = field(default_factory=list)  # in the second only
    removed: list[str] = field(default_factory=list)  # in the first only
    other: list[tuple[str, str, str]] = field(default_factory=list)  # a flag, null or type changed


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def differences(a, b, tolerance: float = TOLERANCE, roots: tuple[str, str] = ("", "")) -> Differences:
    """The differences between JSON values `a` (before) and `b` (after); each root in `roots`, where
    given, is replaced by `<report>` in that side's strings before they are compared."""
    found = Differences()
    stack = [(a, b, "")]
    while stack:
        x, y, here = stack.pop()
        if isinstance(x, dict) and isinstance(y, dict):
            found.removed += [f"{here}/{key}" for key in sorted(set(x) - set(y))]
            found.added += [f"{here}/{key}" for key in sorted(set(y) - set(x))]
            stack += [(x[key], y[key], f"{here}/{key}") for key in sorted(set(x) & set(y), reverse=True)]
        elif isinstance(x, list) and isinstance(y, list):
            found.removed += [f"{here}[{i}]" for i in range(len(y), len(x))]
            found.added += [f"{here}[{i}]" for i in range(len(x), len(y))]
            stack += reversed([(u, v, f"{here}[{i}]") for i, (u, v) in enumerate(zip(x, y))])
        elif is_number(x) and is_number(y):
            compare_numbers(found, x, y, here, tolerance)
        elif isinstance(x, str) and isinstance(y, str):
            before, after = x.replace(roots[0] or "\0", "<report>"), y.replace(roots[1] or "\0", "<report>")
            if before != after:
                found.strings.append((here, before, after))
        elif x != y or type(x) is not type(y):
            found.other.append((here, repr(x)[:80], repr(y)[:80]))
    return found


def compare_numbers(found: Differences, x: float, y: float, here: str, tolerance: float) -> None:
    if "seconds" in here:  # wall time differs run to run
        return
    gap = abs(x - y)
    if gap > found.worst:
        found.worst, found.where = gap, here
    if gap > tolerance:
        found.numbers.append((here, x, y))


def read(path: str):
    from common.store import read_json

    return read_json(Path(path), "pass two report.json files")


def printed(found: Differences, tolerance: float) -> list[str]:
    lines = [f"max numeric difference {found.worst:.3g} at {found.where or '-'}"]
    lines.append(f"{len(found.numbers)} numbers differ by more than {tolerance:g}")
    lines += [f"  {here}: {x!r} -> {y!r}" for here, x, y in found.numbers]
    lines.append(f"{len(found.strings)} changed strings")
    for here, before, after in found.strings:
        lines += [f"  {here}", f"    before: {before}", f"    after:  {after}"]
    lines.append(f"{len(found.added)} added, {len(found.removed)} removed")
    lines += [f"  + {here}" for here in found.added] + [f"  - {here}" for here in found.removed]
    lines.append(f"{len(found.other)} other changes (a flag, null or type)")
    lines += [f"  {here}: {x} -> {y}" for here, x, y in found.other]
    return lines


def main() -> None:
    from common.cli import Parser  # argparse's errors on one line, as every toylens command's

    parser = Parser(prog="python benchmarks/compare_reports.py", description=__doc__.split("\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--tolerance", type=float, default=TOLERANCE, help=f"default {TOLERANCE:g}")
    args = parser.parse_args()
    roots = (str(Path(args.before).resolve().parent), str(Path(args.after).resolve().parent))
    found = differences(read(args.before), read(args.after), args.tolerance, roots)
    print("\n".join(printed(found, args.tolerance)))


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(main)  # a UsageError raised anywhere in it: one line, exit 2
