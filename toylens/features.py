"""`toylens features RUNS_DIR [--sizes 64,256] [--k 4,16] [--steps N] [--out DIR]` (or `--tracr NAME`
without RUNS_DIR): TopK SAEs on the last residual stream and transcoders over every MLP of each run,
graded against the task's planted variables, and the feature circuit of each run with MLPs;
dictionaries in SAELens's layout under DIR (default RUNS_DIR/features), the markdown in
DIR/features.md (or --table FILE), each feature circuit as an attribution graph in
DIR/MODEL/seedN/feature-graph.json."""

from __future__ import annotations

import sys
from pathlib import Path

from common.cli import Bounded, Parser, UsageError, run_cli

SIZES = Bounded(int, 1, 65_536, "dictionary features; memory grows with it", many=True)


def features_command(args) -> None:
    """Refusals that depend only on the arguments first (before the lock rewrites its holder's note),
    then hold the runs folder's lock (a training or `--resume` into it is refused meanwhile)."""
    from contextlib import nullcontext

    from common.lock import folder_lock

    out, table = checked_outputs(args)
    with folder_lock(args.runs_dir, "runs folder") if args.runs_dir is not None else nullcontext():
        features_in(args, out, table)


def checked_outputs(args) -> tuple[Path, Path]:
    """The features folder and the table, each refused now if toylens may not write it (a user's
    file there), not after every dictionary is trained."""
    from common.ownership import check_replaceable, claim_check

    if min(args.k) >= max(args.sizes):
        raise UsageError(f"every k ({args.k}) is at least every size ({args.sizes}); choose k below the size")
    if (args.runs_dir is None) == (args.tracr is None):
        raise UsageError("give a runs folder or --tracr NAME (one of them): toylens features runs/winograd")
    out = args.out or (args.runs_dir / "features" if args.runs_dir else Path("features") / f"tracr-{args.tracr}")
    check_replaceable(out, "features folder")
    table = args.table or out / "features.md"
    claim_check(table)
    return out, table


def features_in(args, out: Path, table: Path) -> None:
    import torch

    from common.atomic import atomic_write
    from probes.features.activations import default_sites
    from probes.features.measure import Grid, run_circuit, run_grades, tracr_grades, tracr_sites
    from probes.features.render import section

    sizes, ks = tuple(args.sizes), tuple(args.k)
    torch.set_num_threads(args.threads)
    progress = not args.no_progress
    traced = []
    if args.tracr is not None:
        grades = tracr_grades(
            args.tracr, Grid(tracr_sites(args.tracr), sizes, ks, args.steps, args.seed), out, progress
        )
    else:
        from tasks.training.runs import find_runs

        grades = []
        for run in find_runs(args.runs_dir):
            grid = Grid(tuple(default_sites(run.spec.n_layers, run.spec.mlp)), sizes, ks, args.steps, args.seed)
            root = out / run.model_name / f"seed{run.seed}"
            grades += run_grades(run, grid, root, progress)
            one = None if args.no_circuit else run_circuit(run, grid, root)
            if one is not None:
                traced.append(one)
                write_feature_graph(run, one, root)
    text = (
        "\n".join(
            section(
                grades,
                traced=traced,
                made_by=f"Made by `toylens features {args.made_by}`; regenerate it rather than edit it.",
            )
        )
        + "\n"
    )
    atomic_write(table, lambda temp: Path(temp).write_text(text))
    print(f"wrote {table}: {len(grades)} dictionaries graded, {len(traced)} feature circuits")


def write_feature_graph(run, traced, root: Path) -> Path:
    """ROOT/feature-graph.json: the run's feature circuit as an attribution graph (Neuronpedia's
    schema), checked against the viewer's rules as it is written."""
    from probes.features.measure import PAIRS
    from probes.report.outputs.exports import feature_attribution_graph, slug, write_attribution
    from tasks.data import spread_subset

    pairs = spread_subset(run.batches()["heldout"], PAIRS)
    vocabulary = run.config["vocabulary"]
    tokens = [vocabulary[t] for t in pairs.inputs[0, : int(pairs.lengths[0]) - 1].tolist()]
    label = f"{run.model_name} seed {run.seed}"
    data = feature_attribution_graph(
        traced, tokens, int(pairs.positions[0]), slug(f"{label} features"), f"toylens {label}"
    )
    path = root / "feature-graph.json"
    write_attribution(path, data)
    return path


def main(argv=None) -> None:
    from common.cli import folder_path, out_path, positive_int, seed_number, threads_number

    parser = Parser(prog="toylens features", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "runs_dir",
        type=folder_path,
        nargs="?",
        default=None,
        help="a task's runs folder (e.g. runs/winograd); omit with --tracr",
    )
    parser.add_argument(
        "--tracr", default=None, help="a stored Tracr program instead (reverse, hist, sort, frac_prevs)"
    )
    parser.add_argument(
        "--sizes", type=SIZES, default=[64, 256], help="dictionary sizes, comma-separated (default 64,256)"
    )
    parser.add_argument(
        "--k", type=SIZES, default=[4, 16], help="active features per position, comma-separated (default 4,16)"
    )
    parser.add_argument("--steps", type=positive_int, default=600, help="training steps per dictionary (default 600)")
    parser.add_argument("--seed", type=seed_number, default=0, help="the dictionaries' seed (default 0)")
    # One thread by default, as the report: on a loaded 2-core machine a second thread made these
    # small matmuls ~10x slower (a dictionary took 22 s instead of 2 s, measured).
    parser.add_argument("--threads", type=threads_number, default=1, help="torch threads (default 1)")
    parser.add_argument("--out", type=out_path, default=None, help="where the files go (default RUNS_DIR/features)")
    parser.add_argument(
        "--table", type=out_path, default=None, help="where the markdown goes (default DIR/features.md)"
    )
    parser.add_argument(
        "--no-circuit",
        action="store_true",
        help="grade only: no feature circuit through the transcoders of runs with MLPs",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    args.made_by = " ".join(argv)
    run_cli(features_command, args)
