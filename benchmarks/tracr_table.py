"""AUROC of recovering each Tracr program's true edges, per method and ablation, beside the ACDC
paper's numbers (Conmy et al. 2023), from the stored fixtures (no jax needed).

    .venv/bin/python benchmarks/tracr_table.py [--pairs 64] [--programs reverse,frac_prevs,sort,hist]

Per program: edges in the graph, true edges (read off the compiled weights: probes.circuits.truth.tracr),
scored positions; then one row per ablation (counterfactual = an independent random input, ACDC's
"random"; mean over the batch; zero) with each method's AUROC by |score| (1 = every true edge ranked
above every other, 0.5 = chance or all tied) and the seconds each took. One torch thread.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TQDM_DISABLE", "1")

import torch

from probes.circuits.truth.tracr import PROGRAMS, tracr_table

SHORT = {"oracle": "oracle", "EAP-IG": "EAP-IG", "EAP": "EAP", "ACDC": "ACDC", "joint": "joint", "learned": "masks"}


def short(method: str) -> str:
    return next(label for prefix, label in SHORT.items() if method.startswith(prefix))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    args = parser.parse_args()
    names = [n for n in args.programs.split(",") if n]
    unknown = [n for n in names if n not in PROGRAMS]
    if unknown:
        parser.error(f"unknown program(s) {unknown}; choose from {', '.join(PROGRAMS)}")
    torch.set_num_threads(1)
    rows = tracr_table(tuple(names), n=args.pairs)
    methods = [short(m) for m in rows[0].auroc]
    print(f"Tracr ground truth, {args.pairs} random input pairs per program: AUROC of the true edges by |score|")
    print("| program | edges | true | scored | ablation | " + " | ".join(methods) + " | ACDC paper |")
    print("|---|---|---|---|---|" + "---|" * (len(methods) + 1))
    for row in rows:
        paper = (PROGRAMS[row.program].paper or {}).get(row.ablation.value)
        print(f"| {row.program} | {row.edges} | {row.true_edges} | {row.scored} | {row.ablation.value} | "
              + " | ".join(f"{v:.3f}" for v in row.auroc.values()) + f" | {'' if paper is None else f'{paper:.3f}'} |")
    print("\nseconds per method (same rows):")
    for row in rows:
        print(f"  {row.program:<10} {row.ablation.value:<14} "
              + "  ".join(f"{short(m)} {s:.2f}" for m, s in row.seconds.items()))


if __name__ == "__main__":
    main()
