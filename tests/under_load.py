"""Run pytest beside CPU-bound processes, to check that no test depends on a quiet machine (issue 54):
two by default, one per core of the 2-core machine CI runs on. Not a test module; run it as

    .venv/bin/python tests/under_load.py [--hogs N] [PYTEST ARGUMENTS ...]

e.g. `tests/under_load.py` (the fast tier), `tests/under_load.py -m slow`, or a few files. Prints
pytest's output, then one line: pytest's exit status, the seconds it took and the load average;
exits with pytest's status. The hogs are killed however pytest ends."""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOG = "while True: pass"


def under_load(pytest_args: list[str], hogs: int) -> tuple[int, float]:
    """(pytest's exit status, its seconds) with `hogs` busy-looping processes beside it."""
    started = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(hogs)]
    try:
        began = time.monotonic()
        code = subprocess.call([sys.executable, "-m", "pytest", *pytest_args], cwd=ROOT)
        return code, time.monotonic() - began
    finally:
        for hog in started:
            hog.kill()
            hog.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests/under_load.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hogs", type=int, default=2, help="CPU-bound processes beside pytest (default 2)")
    args, pytest_args = parser.parse_known_args(argv)  # the rest is pytest's, as given
    if args.hogs < 0:
        parser.error("--hogs must be 0 or more")
    code, seconds = under_load(pytest_args, args.hogs)
    print(
        f"under_load: pytest {shlex.join(pytest_args) or '(the fast tier)'} beside {args.hogs} CPU-bound "
        f"processes: exit {code} in {seconds:.0f} s (load average at the end {os.getloadavg()[0]:.1f}, "
        f"{os.cpu_count()} cores)"
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
