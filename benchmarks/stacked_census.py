"""Stacked vs one-seed training, whole runs: the same seeds trained both ways, then each run traced
for the census (the sweep's `--trace census`), and per seed its steps, accuracies and census
signature compared.

    .venv/bin/python benchmarks/stacked_census.py [--model attn-only-2x1] [--seeds 0-2] [--out FOLDER]

Trains `python -m tasks.winograd train --models MODEL --seeds SEEDS --stack off|on` into
FOLDER/off and FOLDER/on (default settings, one job; a folder already there is reused, as train
keeps finished runs), then prints per seed: steps and stop reason both ways, whether the accuracies
are equal, whether the census signature (parts, edges, heads, basis, relations: what the census
counts) is equal, and the circuit's leading edge recovered both ways.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from common.cli import Parser, out_path

SIGNATURE = ("parts", "edges", "heads", "basis", "relations")  # what the census counts of a signature


def main(argv: list[str] | None = None) -> None:
    from probes.report.parts import RunContext
    from tasks.training.runs import Run
    from toylens.sweeps.job import traced_summary

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="attn-only-2x1")
    parser.add_argument("--seeds", default="0-2")
    parser.add_argument("--out", type=out_path, default=Path("runs/stacked-census"))
    args = parser.parse_args(argv)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for way in ("off", "on"):
        command = [sys.executable, "-m", "tasks.winograd", "train", "--models", args.model, "--seeds", args.seeds]
        command += ["--jobs", "1", "--no-progress", "--stack", way, "--out", str(args.out / way)]
        subprocess.run(command, check=True, capture_output=True, env=env)
    print(
        "| seed | steps off / on | stop off / on | accuracies equal | census signature equal | edge recovered off / on |"
    )
    print("|---|---|---|---|---|---|")
    for folder in sorted((args.out / "off" / args.model).glob("seed*")):
        runs = {way: Run(args.out / way / args.model / folder.name) for way in ("off", "on")}
        traced = {way: traced_summary(RunContext(run, out=None), "census").to_dict() for way, run in runs.items()}
        off, on = (runs[way].metrics for way in ("off", "on"))
        signatures = [{k: (t["signature"] or {}).get(k) for k in SIGNATURE} for t in traced.values()]
        recovered = [(traced[way]["edge"] or {}).get("recovered") for way in ("off", "on")]
        edges = " / ".join("none" if r is None else f"{r:.4f}" for r in recovered)
        same = signatures[0] == signatures[1]
        print(
            f"| {folder.name.removeprefix('seed')} | {off['steps']} / {on['steps']} | {off['stop_reason']} / "
            f"{on['stop_reason']} | {off['accuracy'] == on['accuracy']} | {same} | {edges} |"
        )


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(main)
