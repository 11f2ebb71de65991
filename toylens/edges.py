"""`python -m toylens.edges RUNS_DIR [--out DIR]`: every run's edge circuit (probes.circuits.named):
markdown, one figure per run and MIB-format edge scores per method, written to DIR (default
RUNS_DIR/edges)."""

from __future__ import annotations

from pathlib import Path

from common.cli import Parser, UsageError, run_cli
from common.io import atomic_write, check_replaceable, write_json


def edges_command(runs_dir: Path, out: Path | None) -> None:
    import torch
    from tqdm import tqdm

    from probes.circuits.named import run_edge_circuit
    from probes.report.edge_part import EdgeRun, summary_line
    from probes.report.edge_render import circuit_figure, markdown_lines
    from probes.report.exports import mib_json, slug
    from probes.report.figures import save
    from probes.settings import DEFAULT
    from tasks.runs import find_runs

    runs = [run for run in find_runs(runs_dir) if run.config.get("spec", {}).get("attention") == "softmax"]
    if not runs:
        raise UsageError(f"{runs_dir} holds no trained attention runs; train some first")
    torch.set_num_threads(1)    # as the report's workers: small forwards lose to thread hand-offs
    out = out or runs_dir / "edges"
    check_replaceable(out, "edges folder")   # every file in it is this command's: refused before any work
    lines = ["# Edge circuits", ""]
    for run in tqdm(runs, desc="edge circuits", unit="run"):
        result = run_edge_circuit(run)
        name = f"{run.model_name} seed {run.seed}"
        if abs(result.oracle.gap) < DEFAULT.min_gap:
            # As the report: shares of a gap this small are noise, so no circuit, curve or export.
            lines += [f"#### {name}", "", summary_line(EdgeRun(run.model_name, run.seed, result, None), DEFAULT), ""]
            continue
        figure = f"figures/edges_{slug(run.model_name)}_seed{run.seed}.png"
        save(circuit_figure(result, name), out / figure)
        lines += markdown_lines(result, name, figure) + [f"({result.seconds:.1f} s)", ""]
        for method in result.methods:
            write_json(out / f"mib_{slug(run.model_name)}_seed{run.seed}_{slug(method.scores.method)}.json",
                       mib_json(result, method.scores, run.config["spec"]["d_model"]))
    text = "\n".join(lines)
    atomic_write(out / "edges.md", lambda temp: Path(temp).write_text(text))
    print(f"wrote {out / 'edges.md'}")


def main(argv=None) -> None:
    from common.io import nonempty_path  # an empty path would mean the current folder

    parser = Parser(prog="python -m toylens.edges", description=__doc__.splitlines()[0])
    parser.add_argument("runs_dir", type=nonempty_path)
    parser.add_argument("--out", type=nonempty_path, default=None)
    args = parser.parse_args(argv)
    if not args.runs_dir.is_dir():
        parser.error(f"{args.runs_dir} is not a folder of runs")
    run_cli(edges_command, args.runs_dir, args.out)


if __name__ == "__main__":
    main()
