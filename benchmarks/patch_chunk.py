"""How many tokens one patched forward should hold: the exact oracle on block-2 at the report's
size (probes.patching.PATCH_TOKENS) against scoring's (tasks.evaluate.TOKENS_PER_FORWARD).

    .venv/bin/python benchmarks/patch_chunk.py [--runs RUNS_DIR] [--seeds 0-2] [--rounds 4]

Without --runs, trains block-2 for the seeds in a temporary folder first (benchmarks/joint_speed.py's
training). Per run, on the circuit report's own pairs and recorded runs, one torch thread (as each
report worker runs): every edge knocked out alone (`edge_effects`) and the oracle-ranked circuit's
faithfulness search (`edge_circuit`), with the replicas of a forward capped at each size, back to
back `--rounds` times in CPU seconds (benchmarks/timing.py's interleaved_ratio). Prints per seed the
ratio (scoring's size / the report's: above 1, the report's is faster; mean, 95% interval) and the
largest difference between the two sizes' edge effects (float rounding only: rows never mix).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from joint_speed import MODEL, trained_runs


def seed_line(run, rounds: int) -> str:
    from timing import cold, interleaved_ratio, spread  # benchmarks/timing.py, beside this script
    import probes.patching
    from probes.circuits.named import edge_circuit
    from probes.circuits.oracle import Direction, record_runs
    from probes.report.parts import RunContext
    from tasks.evaluate import TOKENS_PER_FORWARD

    context = RunContext(run, None)
    model, pairs, graph = context.model, context.pairs, context.edge_graph

    def fresh_runs():  # recorded anew (untimed) for each call: no patched edge set is remembered from before
        return record_runs(model, pairs, graph, Direction.NOISE)

    def at(tokens: int):
        def measure(runs):
            probes.patching.PATCH_TOKENS = tokens
            return edge_circuit(model, pairs, graph, compare_methods=False, runs=runs).oracle.effect

        return cold(measure, fresh_runs)

    report_size = probes.patching.PATCH_TOKENS
    try:
        names = (f"{report_size} tokens per forward", f"{TOKENS_PER_FORWARD} tokens per forward")
        ratio, ours, theirs, _ = interleaved_ratio(at(report_size), at(TOKENS_PER_FORWARD), rounds, names)
    finally:
        probes.patching.PATCH_TOKENS = report_size
    return (
        f"{MODEL} seed {run.seed} ({len(pairs)} pairs x {pairs.inputs.shape[1]} tokens, {len(graph.edges)} edges): "
        f"{TOKENS_PER_FORWARD} / {report_size} tokens per forward {spread(ratio, 'x')} CPU over {rounds} rounds "
        f"(each from freshly recorded runs); edge effects differ by at most "
        f"{float((ours - theirs).abs().max()):.1e}"
    )


def main(argv=None) -> None:
    from common.cli import Parser, folder_path, positive_int, run_cli
    from toylens.arguments import seeds_option

    parser = Parser(prog="benchmarks/patch_chunk.py", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=folder_path, help=f"a runs folder with {MODEL} runs (default: train them)")
    parser.add_argument("--seeds", type=seeds_option, default=[0, 1, 2], help="seeds (default 0-2)")
    parser.add_argument("--rounds", type=positive_int, default=4, help="timing rounds per seed (default 4)")
    args = parser.parse_args(argv)

    def command():
        with tempfile.TemporaryDirectory(prefix="patch-chunk-") as temp:
            for run in trained_runs(args.runs, args.seeds, Path(temp)):
                print(seed_line(run, args.rounds), flush=True)

    run_cli(command)


if __name__ == "__main__":
    main()
