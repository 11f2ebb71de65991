"""`toylens export mib|attribution RUNS_DIR [--out DIR]`: every trained attention run's
edges in the formats the field's tools read (probes.report.outputs.exports; docs/exports.md).
`toylens export hf RUN_DIR --out DIR`: one run as a Hugging Face checkpoint (toylens.export_hf).

- mib: per run, the oracle's, EAP's and EAP-IG's edge scores as MIB edge-score JSON (position-free
  edges, on the circuit report's counterfactual pairs), OUT/mib/<model>_seed<k>_<method>.json.
- attribution: per run, `--pairs` held-out prompts (clean example and counterfactual partner), each
  an attribution-graph JSON of position-resolved edges measured exactly on that prompt,
  OUT/attribution/<model>_seed<k>_pair<i>.json.
Every file is checked against its format's rules before it is written. Default OUT: RUNS_DIR/exports.
"""

from __future__ import annotations

from pathlib import Path

from common.cli import Bounded, Parser, UsageError, run_cli
from models.spec import Attention
from probes.settings import ReportSettings


def attention_runs(runs_dir: Path) -> list:
    from tasks.training.runs import find_runs

    runs = [run for run in find_runs(runs_dir) if run.spec.attention == Attention.SOFTMAX and run.spec.residual]
    if not runs:
        raise UsageError(f"{runs_dir} holds no trained softmax-attention runs; train some first")
    return runs


def export_mib(runs_dir: Path, folder: Path, settings: ReportSettings) -> list[Path]:
    from tqdm import tqdm

    from probes.circuits.named import run_edge_circuit
    from probes.report.outputs.exports import slug, write_mib

    written = []
    for run in tqdm(attention_runs(runs_dir), desc="MIB edge scores", unit="run"):
        if run.spec.n_layers < 2:
            continue  # as the report: one block has no edge between heads to score
        result = run_edge_circuit(run, acdc_threshold=None)
        if abs(result.oracle.gap) < settings.min_gap:
            continue  # shares of a gap this small are noise (the report does not trace it either)
        for method in result.methods:
            path = folder / f"{slug(run.model_name)}_seed{run.seed}_{slug(method.scores.method)}.json"
            write_mib(path, result, method.scores, run.spec.d_model)
            written.append(path)
    return written


def export_attribution(runs_dir: Path, folder: Path, pairs: int) -> list[Path]:
    import dataclasses

    from tqdm import tqdm

    from probes.report.outputs.exports import attribution_graph, slug, write_attribution
    from tasks.data import select_rows, spread_subset

    written = []
    for run in tqdm(attention_runs(runs_dir), desc="attribution graphs", unit="run"):
        heldout = run.batches()["heldout"]
        if heldout.counterfactual is None:
            continue
        model, spec, words = run.load_model(), run.spec, run.task.vocabulary()
        chosen = spread_subset(heldout, pairs)
        for i in range(len(chosen)):
            prompt = select_rows(chosen, [i])
            # One scored position per graph: the first (the viewer shows one output).
            prompt = dataclasses.replace(
                prompt,
                example_index=prompt.example_index[:1],
                positions=prompt.positions[:1],
                answers=prompt.answers[:1],
                foils=prompt.foils[:1],
                groups=prompt.groups[:1],
            )
            name = f"{slug(run.model_name)}_seed{run.seed}_pair{i}"
            data = attribution_graph(model, prompt, spec, words, name, f"toylens {run.model_name} seed {run.seed}")
            path = folder / f"{name}.json"
            write_attribution(path, data)
            written.append(path)
    return written


def export_command(
    kind: str, runs_dir: Path, out: Path | None, pairs: int, settings: ReportSettings | None = None
) -> None:
    """With `settings` None, the report's (`probes.settings.DEFAULT`)."""
    import torch

    from common.atomic import publish_folder, staging
    from common.lock import folder_lock
    from common.ownership import check_publishable, check_replaceable
    from probes.settings import DEFAULT

    torch.set_num_threads(1)  # as the report's workers: small forwards lose to thread hand-offs
    out = out or Path(runs_dir) / "exports"
    folder = out / kind
    # The one rule for links (census's and edges'): OUT itself may not be one either.
    check_replaceable(folder, f"{kind} export folder", within=out.parent)
    # Written into a staging folder and published whole: a kill leaves the old export or the new
    # one, never a mix, and files a rerun no longer writes are gone with the old folder.
    check_publishable(folder, f"{kind} export folder")
    with folder_lock(runs_dir, "runs folder"), staging(folder) as staged:  # no training into it meanwhile
        written = (
            export_mib(runs_dir, staged, settings or DEFAULT)
            if kind == "mib"
            else export_attribution(runs_dir, staged, pairs)
        )
        publish_folder(staged, folder)
    written = [folder / path.relative_to(staged) for path in written]
    print(f"wrote {len(written)} {kind} files under {out / kind} (each checked against the format's rules)")


def main(argv=None) -> None:
    from common.cli import folder_path, out_path

    parser = Parser(prog="toylens export", description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("mib", "attribution", "hf"))
    parser.add_argument("runs_dir", type=folder_path)
    parser.add_argument("--out", type=out_path, default=None, help="default RUNS_DIR/exports")
    parser.add_argument(
        "--pairs",
        type=Bounded(int, 1, 1000, "prompts traced one by one"),
        default=2,
        help="attribution: prompts per run (default 2)",
    )
    args = parser.parse_args(argv)
    if not args.runs_dir.is_dir():
        parser.error(f"{args.runs_dir} is not a folder of runs")
    if args.kind == "hf":  # one run folder as a Hugging Face checkpoint (toylens.export_hf)
        from toylens.export_hf import export_hf_command

        run_cli(export_hf_command, args.runs_dir, args.out)
        return
    run_cli(export_command, args.kind, args.runs_dir, args.out, args.pairs)
