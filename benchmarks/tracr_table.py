"""AUROC of recovering each Tracr program's used edges, per method and ablation, beside the ACDC
paper's numbers (Conmy et al. 2023), and a trace of every true edge zero ablation cannot see on
the full-length inputs, from the stored fixtures (no jax needed).

    .venv/bin/python benchmarks/tracr_table.py [--pairs 64] [--programs reverse,frac_prevs,sort,hist] [--docs docs/tracr.md]

Per program: edges in the graph, true edges read off the weights, used edges (read and not inert:
probes.circuits.truth.tracr), scored positions; one row per ablation (counterfactual = an
independent random input, ACDC's "random"; mean over the batch; zero) with each method's AUROC by
|score| (1 = every used edge ranked above every other, 0.5 = chance or all tied), on full-length
inputs and, for reverse, on ACDC's inputs too. `--docs FILE` also writes the printed section into
FILE between its `<!-- tracr_table.py -->` and `<!-- end tracr_table.py -->` lines. One torch thread.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TQDM_DISABLE", "1")

import torch

from common.cli import EXIT_USAGE, Parser, out_path, positive_int, run_cli
from probes.circuits.truth import tracr, zero_trace

SHORT = {"oracle": "oracle", "EAP-IG": "EAP-IG", "EAP": "EAP", "ACDC": "ACDC", "joint": "joint", "learned": "masks"}
EXACT = 1e-9  # a change this small is float rounding of an unchanged value


def short(method: str) -> str:
    return next(label for prefix, label in SHORT.items() if method.startswith(prefix))


def table(rows, pairs: int) -> list[str]:
    methods = [short(m) for m in rows[0].auroc]
    lines = [
        f"AUROC of the used edges by |score|, {pairs} random input pairs per row "
        "(inputs: full = every token position filled; ACDC's = permutations of the vocabulary at ACDC's length)",
        "",
        "| program | inputs | length | edges | read | used | scored | ablation | "
        + " | ".join(methods)
        + " | oracle vs read | ACDC paper |",
        "|---|---|---|---|---|---|---|---|" + "---|" * (len(methods) + 2),
    ]
    for row in rows:
        program = tracr.PROGRAMS[row.program]
        beside = row.inputs == ("ACDC's" if program.acdc_length else "full")
        paper = (program.paper or {}).get(row.ablation) if beside else None
        lines.append(
            f"| {row.program} | {row.inputs} | {row.length} | {row.edges} | {row.read_edges} | {row.used_edges} | "
            f"{row.scored} | {row.ablation.value} | "
            + " | ".join(f"{v:.3f}" for v in row.auroc.values())
            + f" | {row.oracle_read:.3f} | {'' if paper is None else f'{paper:.3f}'} |"
        )
    lines += ["", "seconds per method (same rows; 2 shared cores: ratios only):", ""]
    lines += [
        f"    {row.program:<10} {row.inputs:<6} {row.ablation.value:<14} "
        + "  ".join(f"{short(m)} {s:.2f}" for m, s in row.seconds.items())
        for row in rows
    ]
    return lines


def why(trace, length: int, acdc_length: int) -> str:
    """What the numbers of one trace say, in one sentence."""
    if trace.observed == "attention pattern" and trace.change < EXACT:
        return (
            f"the head's scores at every scored query are equal across keys with or without this input, so "
            f"its pattern is unchanged (max change {trace.change:.0e}; a shift common to all keys leaves the "
            f"softmax as it is); only BOS's own row moves ({trace.change_bos:.2f}), and BOS is never scored"
        )
    if trace.observed == "attention pattern":
        return (
            f"the input only moves attention that the saturated softmax already gives almost nothing "
            f"(max change of the pattern {trace.change:.1e}, the effect {trace.effect:+.1e} of the gap)"
        )
    constant = f"the write is the same on every full-length input (mean {trace.write[0]:.3f}, std {trace.write[1]:.0e})"
    if trace.change < EXACT:
        return (
            f"{constant}, and the receiver computes the same {trace.observed} from zero as from it (max change "
            f"{trace.change:.0e}): its read saturates at the full length; on ACDC's {acdc_length}-token inputs the "
            f"write is {trace.write_acdc[0]:.3f} and zeroing it moves {trace.effect_acdc:+.3f} of the gap"
        )
    return (
        f"{constant}; zeroing it changes the receiver's {trace.observed} by {trace.change:.3f}, but the next "
        f"reader maps both to the same value (effect {trace.effect:+.0e} at length {length}); on ACDC's "
        f"{acdc_length}-token inputs it moves {trace.effect_acdc:+.3f} of the gap"
    )


def trace_lines(pairs: int, folder: Path = tracr.FIXTURES) -> list[str]:
    compiled = tracr.load("reverse", folder)
    model, graph = tracr.bridge(compiled), tracr.shape_graph(compiled)
    traces = zero_trace.trace_zero_edges(model, compiled, graph, pairs)
    used = tracr.used_edges(model, compiled, graph)
    length, acdc_length = compiled.config["n_ctx"] - 1, tracr.PROGRAMS["reverse"].acdc_length
    acdc = set(tracr.ACDC_REVERSE)
    lines = [
        f"reverse: the {len(traces)} true edges whose zero-ablation effect is 0 on {pairs} full-length "
        f"(length {length}) pairs, traced (write = the sender's write in the dimensions the receiver reads, "
        "at the scored positions for a query or MLP, at every key position for a key or value):",
        "",
    ]
    for trace in traces:
        verdict = (
            "inert: no logit moves on any input of the domain at any length"
            if trace.inert
            else "used: visible to zero ablation on shorter inputs"
        )
        lines.append(
            f"- `{trace.edge}` reads {', '.join(trace.variables)}: {why(trace, length, acdc_length)}. **{verdict}**."
        )
    same = {str(e) for e in used} == acdc
    lines += [
        "",
        f"Used edges of reverse ({len(used)}) {'equal' if same else 'DIFFER FROM'} ACDC's reference "
        f"circuit ({len(acdc)} edges in this graph: `tracr.ACDC_REVERSE`).",
    ]
    return lines


def write_docs(parser, path: Path, script: str, lines: list[str]) -> None:
    """Replace what lies between the `<!-- SCRIPT -->` and `<!-- end SCRIPT -->` lines of `path`;
    a page without them is the command's one-line usage error."""
    begin, end = f"<!-- {script} -->", f"<!-- end {script} -->"
    text = path.read_text() if path.is_file() else ""
    if begin not in text or end not in text:
        parser.exit(EXIT_USAGE, f"error: {path} has no {begin} ... {end} block to write into; add the two lines\n")
    head, rest = text.split(begin, 1)
    path.write_text(head + begin + "\n" + "\n".join(lines) + "\n" + end + rest.split(end, 1)[1])


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=positive_int, default=64)
    parser.add_argument("--programs", default=",".join(tracr.PROGRAMS))
    parser.add_argument("--docs", type=out_path, help="also write the section into this file's marked block")
    parser.add_argument(
        "--fixtures",
        type=Path,
        default=tracr.FIXTURES,
        help="folder of the compiled fixtures (default: the stored ones)",
    )
    args = parser.parse_args()
    names = [n for n in args.programs.split(",") if n]
    unknown = [n for n in names if n not in tracr.PROGRAMS]
    if unknown:
        parser.error(f"unknown program(s) {unknown}; choose from {', '.join(tracr.PROGRAMS)}")
    torch.set_num_threads(1)
    run_cli(
        print_table, parser, names, args.pairs, args.docs, args.fixtures
    )  # a missing or broken fixture: one line, exit 2


def print_table(parser, names: list[str], pairs: int, docs: Path | None, fixtures: Path) -> None:
    lines = (
        table(tracr.tracr_table(tuple(names), n=pairs, folder=fixtures), pairs) + [""] + trace_lines(pairs, fixtures)
    )
    print("\n".join(lines))
    if docs:
        write_docs(parser, docs, "tracr_table.py", lines)


if __name__ == "__main__":
    main()
