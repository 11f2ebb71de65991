"""`toylens edges RUNS_DIR [--out DIR]`: every run's edge circuit (probes.circuits.named),
the fast methods (EAP, EAP-IG, ACDC) scored against the exact oracle, written to DIR (default
RUNS_DIR/edges)."""

from __future__ import annotations

from pathlib import Path

from common.cli import Parser, UsageError, run_cli
from common.atomic import atomic_write, publish_folder, staging
from common.ownership import check_publishable
from models.spec import Attention
from probes.settings import ReportSettings

FILES = """files written to DIR:
  edges.md                                  every run's circuit, method table and figure
  figures/edges-MODEL-seedK.png             the circuit graph (edge width and number = the oracle's
                                            share of the gap) and faithfulness vs circuit size
  mib_MODEL_seedK_METHOD.json               one method's edge scores in MIB's submission format (the
                                            EAP-IG library's Graph JSON: nodes input, a{l}.h{h}, m{l},
                                            logits; edges like a0.h1->a1.h0<q>; "score" per edge and
                                            "in_graph" for the oracle's smallest 90% circuit), for
                                            MIB's evaluation scripts or EAP-IG's Graph.from_json"""


def edges_command(runs_dir: Path, out: Path | None, settings: ReportSettings | None = None) -> None:
    """With `settings` None, the report's (`probes.settings.DEFAULT`)."""
    import torch

    from common.lock import folder_lock
    from probes.settings import DEFAULT
    from tasks.training.runs import find_runs
    from tasks.training.sweeps import runs_folder

    runs_dir = runs_folder(runs_dir)  # a sweep's only grid point, or refused in one line
    runs = [run for run in find_runs(runs_dir) if run.spec.attention == Attention.SOFTMAX]
    if not runs:
        raise UsageError(f"{runs_dir} holds no trained attention runs; train some first")
    torch.set_num_threads(1)  # as the report's workers: small forwards lose to thread hand-offs
    settings = settings or DEFAULT
    out = out or runs_dir / "edges"
    # Every file in it is this command's, refused before any work; the files are written into a
    # staging folder and published as a whole, so a kill leaves the old set or the new one, never a
    # mix, and what a rerun no longer writes (an untraced run's figure and MIB files) is gone.
    # The runs folder's lock: a training or `--resume` into it is refused meanwhile.
    with folder_lock(runs_dir, "runs folder"):
        check_publishable(out, "edges folder", subfolders=("figures",))
        with staging(out) as staged:
            figures = write_edges(runs, staged, settings)
            publish_folder(staged, out, subfolders=("figures",))
    print(
        f"wrote {out / 'edges.md'}: {figures} of {len(runs)} runs traced, with a figure and MIB edge scores each"
        + (
            ""
            if figures
            else f"; no run's clean - counterfactual gap reached {settings.min_gap:g} (the edge "
            "circuit needs one: train longer), so no figures or MIB files"
        )
    )


def write_edges(runs: list, folder: Path, settings: ReportSettings) -> int:
    """edges.md, the figures and the MIB files of `runs` into `folder`; how many runs were traced."""
    from tqdm import tqdm

    from probes.circuits.named import run_edge_circuit
    from probes.report.edge_part import EdgeRun, summary_line
    from probes.report.edge_render import circuit_figure, figure_name, markdown_lines
    from probes.report.figures import save
    from probes.report.outputs.exports import slug, write_mib

    lines = ["# Edge circuits", ""]
    figures = 0
    for run in tqdm(runs, desc="edge circuits", unit="run"):
        result = run_edge_circuit(run)
        name = f"{run.model_name} seed {run.seed}"
        if not settings.traces(result.oracle.gap):
            # As the report: shares of a gap this small are noise, so no circuit, curve or export.
            lines += [f"#### {name}", "", summary_line(EdgeRun(run.model_name, run.seed, result, None), settings), ""]
            continue
        figure = f"figures/{figure_name(run.model_name, run.seed)}"
        save(circuit_figure(result, name), folder / figure)
        figures += 1
        lines += markdown_lines(result, name, figure) + [f"({result.seconds:.1f} s)", ""]
        for method in result.methods:
            write_mib(
                folder / f"mib_{slug(run.model_name)}_seed{run.seed}_{slug(method.scores.method)}.json",
                result,
                method.scores,
                run.spec.d_model,
            )  # checked against MIB's reader rules first
    text = "\n".join(lines)
    atomic_write(folder / "edges.md", lambda temp: Path(temp).write_text(text))
    return figures


def main(argv=None) -> None:
    from common.cli import folder_path, out_path

    import argparse

    parser = Parser(
        prog="toylens edges",
        description=__doc__.split("\n\n")[0],
        epilog=FILES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("runs_dir", type=folder_path, help="a task's runs folder (e.g. runs/winograd)")
    parser.add_argument("--out", type=out_path, default=None, help="where the files go (default RUNS_DIR/edges)")
    args = parser.parse_args(argv)
    if not args.runs_dir.is_dir():
        parser.error(f"{args.runs_dir} is not a folder of runs")
    run_cli(edges_command, args.runs_dir, args.out)
