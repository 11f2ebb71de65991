"""The circuit report on the CPU against the same report on another device, on one trained family.

    python benchmarks/report_devices.py [--device cuda] [--seeds 0-0]

Trains the Winograd family (`--seeds` seeds, on the GPU when torch sees one) into a fresh folder,
writes the report twice (`--device cpu`, `--device DEVICE`) and compares the two report.json files:
every number within 1e-3 relative (timings aside), every string equal. Prints the count of numbers
compared, the worst relative difference and each mismatch. Needs the device; exits 2 without it.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

TOLERANCE = 1e-3


def differences(a, b, where: str = "report") -> tuple[int, float, list[str]]:
    """(numbers compared, worst relative difference, mismatches) between two JSON values."""
    if isinstance(a, dict) and isinstance(b, dict):
        parts = [differences(a[k], b[k], f"{where}.{k}") for k in a.keys() & b.keys() if "seconds" not in k]
        missing = [f"{where}.{k} in one report only" for k in a.keys() ^ b.keys()]
        return (
            sum(p[0] for p in parts),
            max((p[1] for p in parts), default=0.0),
            missing + [line for p in parts for line in p[2]],
        )
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        parts = [differences(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b))]
        return (
            sum(p[0] for p in parts),
            max((p[1] for p in parts), default=0.0),
            [line for p in parts for line in p[2]],
        )
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
    if numbers:
        if math.isnan(a) and math.isnan(b):
            return 1, 0.0, []
        relative = abs(a - b) / max(1.0, abs(a))
        return 1, relative, [f"{where}: {a} vs {b}"] if relative > TOLERANCE else []
    return 0, 0.0, [] if a == b else [f"{where}: {str(a)[:80]!r} vs {str(b)[:80]!r}"]


def toylens(*args: str) -> None:
    subprocess.run([sys.executable, "-m", *args], check=True, stdout=subprocess.DEVNULL)


def train_and_report(device: str, seeds: str) -> list[dict]:
    with tempfile.TemporaryDirectory() as folder:
        runs = Path(folder) / "winograd"
        toylens("tasks.winograd", "train", "--seeds", seeds, "--no-progress", "--out", str(runs))
        for where in ("cpu", device):
            toylens("probes.circuit", "report", str(runs), "--out", f"{folder}/{where}", "--device", where)
        return [json.loads(Path(f"{folder}/{where}/report.json").read_text()) for where in ("cpu", device)]


def main() -> None:
    from common.cli import device_name

    from common.cli import Parser  # argparse's errors on one line, as every toylens command's

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", type=device_name, default="cuda")
    parser.add_argument("--seeds", default="0-0")
    args = parser.parse_args()
    try:
        reports = train_and_report(args.device, args.seeds)
    except subprocess.CalledProcessError as failed:  # the command printed its one-line reason
        sys.exit(failed.returncode)
    count, worst, mismatches = differences(*reports)
    print(
        f"report on cpu vs {args.device}: {count} numbers compared, worst relative difference {worst:.1e}, "
        f"{len(mismatches)} mismatches (numbers beyond {TOLERANCE:g} relative, or strings)"
    )
    print("\n".join(f"  {line}" for line in mismatches[:25]))


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(main)  # a UsageError raised anywhere in it: one line, exit 2
