"""The report's joint search against the exact oracle it starts from, on block-2 (issue 33's
target: at most 2x the oracle's time).

    .venv/bin/python benchmarks/joint_speed.py [--runs RUNS_DIR] [--seeds 0-2] [--rounds 3] [--whole]

Without --runs, trains block-2 for the seeds in a temporary folder first, as the main job trains it
(`python -m tasks.winograd train --models block-2`, its default settings). Per run, on the circuit
report's own pairs and recorded runs (probes.report.parts.RunContext), in this process and one
torch thread (as each report worker runs): the oracle (`edge_effects`: every edge knocked out alone)
and the joint search as the report runs it (`probes.circuits.redundancy.report_joint`: pruned from
the oracle-ranked circuit, stand-in searches where an edge is backed up, then pruned to the
target), timed back to back `--rounds` times in CPU seconds (benchmarks/timing.py's
interleaved_ratio). Each call starts from runs recorded afresh (untimed), so no round reuses an edge
set an earlier one patched; the joint search's stand-in inputs (redundancy) are measured on runs of
their own. Prints per seed the ratio joint / oracle and each side's CPU seconds (mean, 95% interval
over the rounds), and both circuits' edges and faithfulness. `--whole` also times the joint
search from the whole graph (`joint_search`'s defaults, as `toylens edges --joint` runs it).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

MODEL = "block-2"


def train(seeds: list[int], out: Path) -> None:
    command = [sys.executable, "-m", "tasks.winograd", "train", "--models", MODEL, "--no-progress"]
    listed = ",".join(map(str, seeds)) if len(seeds) > 1 else f"{seeds[0]}-{seeds[0]}"  # a bare number is refused
    command += ["--seeds", listed, "--out", str(out)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def trained_runs(folder: Path | None, seeds: list[int], scratch: Path) -> list:
    """The MODEL runs of `seeds` in `folder` (trained into `scratch` first when None), by seed, with
    torch at one thread, as each report worker runs (toylens.workers.in_one_thread)."""
    import torch

    from common.cli import UsageError
    from tasks.training.runs import find_runs

    torch.set_num_threads(1)
    if folder is None:
        folder = scratch / "runs"
        train(seeds, folder)
    elif not folder.is_dir():
        raise UsageError(f"runs folder {folder} does not exist; name a folder of trained runs or omit --runs")
    runs = [r for r in find_runs(folder) if r.model_name == MODEL and r.seed in seeds]
    if len(runs) < len(seeds):
        have = sorted(r.seed for r in runs)
        raise UsageError(f"{folder} has {MODEL} seeds {have}, not {seeds}; train them or omit --runs")
    return sorted(runs, key=lambda r: r.seed)


def seed_lines(run, rounds: int, whole: bool) -> list[str]:
    from timing import cold, interleaved_ratio, spread, timed_rounds  # benchmarks/timing.py, beside this script
    from probes.circuits.methods.joint import joint_search
    from probes.circuits.oracle import Direction, edge_effects, record_runs
    from probes.circuits.redundancy import redundancy, report_joint
    from probes.report.parts import RunContext

    context = RunContext(run, Path(tempfile.mkdtemp(prefix="joint-speed-")))
    model, pairs, graph = context.model, context.pairs, context.edge_graph
    ranked = context.edge_circuit.circuit
    single = context.edge_circuit.oracle.normalised()

    def fresh_runs():  # recorded anew for each call: no patched edge set is remembered from before
        return record_runs(model, pairs, graph, Direction.NOISE)

    def joint_start():  # the report's inputs to the joint search, its patched sets not shared with it
        return redundancy(model, pairs, graph, frozenset(ranked.edges), single, fresh_runs()), fresh_runs()

    oracle = cold(lambda runs: edge_effects(model, pairs, graph, runs=runs), fresh_runs)
    joint = cold(lambda start: report_joint(model, pairs, graph, start[0], single, start[1]), joint_start)
    ratio, _, found, (oracle_s, joint_s) = interleaved_ratio(oracle, joint, rounds, ("the oracle", "the joint search"))
    tight = found.at_target
    lines = [
        f"{MODEL} seed {run.seed} ({len(pairs)} pairs, {len(graph.edges)} edges): joint / oracle "
        f"{spread(ratio, 'x')} over {rounds} rounds, each side from freshly recorded runs (recording untimed); "
        f"oracle {spread(oracle_s, ' s')}, joint {spread(joint_s, ' s')} CPU; {found.sets_measured} sets, "
        f"{len(found.alternatives)} stand-in sets",
        f"  oracle-ranked circuit: {len(ranked.edges)} edges, faithfulness {ranked.faithfulness.normalised:.4f}",
        f"  joint search: {len(found.circuit)} edges, faithfulness {found.faithfulness:.4f}; pruned to the target: "
        f"{len(tight.circuit)} edges, {tight.faithfulness:.4f}",
    ]
    if whole:
        search = cold(lambda runs: joint_search(model, pairs, graph, runs, single, tighten=True), fresh_runs)
        seconds, everything = timed_rounds(search, rounds, "the joint search from the whole graph")
        lines.append(
            f"  from the whole graph: {spread(seconds, ' s')} CPU ({seconds.value / oracle_s.value:.2f}x the mean "
            f"oracle), {len(everything.circuit)} edges, faithfulness {everything.faithfulness:.4f}"
        )
    return lines


def main(argv=None) -> None:
    from common.cli import Parser, folder_path, positive_int, run_cli
    from toylens.arguments import seeds_option

    parser = Parser(prog="benchmarks/joint_speed.py", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=folder_path, help=f"a runs folder with {MODEL} runs (default: train them)")
    parser.add_argument("--seeds", type=seeds_option, default=[0, 1, 2], help="seeds (default 0-2)")
    parser.add_argument("--rounds", type=positive_int, default=3, help="timing rounds per seed (default 3)")
    parser.add_argument("--whole", action="store_true", help="also time the joint search from the whole graph")
    args = parser.parse_args(argv)

    def command():
        with tempfile.TemporaryDirectory(prefix="joint-speed-") as temp:
            for run in trained_runs(args.runs, args.seeds, Path(temp)):
                print("\n".join(seed_lines(run, args.rounds, args.whole)), flush=True)

    run_cli(command)


if __name__ == "__main__":
    main()
