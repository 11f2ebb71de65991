"""`python -m probes.circuit report --model PATH --task NAME [--out DIR]`: the circuit of a local
Hugging Face checkpoint on a text task: loaded offline (models.hf_load), the hook preflight first
(models.preflight; nothing is measured when it fails), then probes.circuits.scaled, written as
report.md + report.json into DIR (default PATH-report beside the folder), published whole."""

from __future__ import annotations

from pathlib import Path


def outside_report(
    path: Path, task_name: str, out: Path | None, memory_gib: float, device: str, pairs: int, budget: int, verify: int
) -> Path:
    from common.atomic import publish_folder, staging
    from common.ownership import check_publishable
    from models.hf_load import load_folder
    from models.preflight import preflight, require
    from probes.circuits.scaled import About, hooks_used, trace
    from probes.report.outside import write_outside_report
    from tasks.registry import build_task, get_task_class
    from tasks.templates import heldout_batch

    task = build_task(get_task_class(task_name), {})
    out = Path(out or Path(path).with_name(Path(path).name + "-report"))
    check_publishable(out, "report folder")
    loaded = load_folder(path, memory_gib, device)
    batch = heldout_batch(task, 0, loaded.tokenizer, pairs)  # refuses words that are not single tokens
    model, about = loaded.bridge, About(loaded.origin.name, loaded.origin.family)
    checked = require(preflight(model, batch.inputs[:2].to(device), loaded.hf_model, hooks_used(model, about)))
    result = trace(model, batch.to(device), about, budget, verify)
    with staging(out) as staged:
        write_outside_report(result, task.name, checked, staged)
        publish_folder(staged, out)
    print("\n".join((out / "report.md").read_text().splitlines()[:8]))
    print(f"\nwrote {out / 'report.md'} and report.json")
    return out


def main(argv=None) -> None:
    from common.cli import Parser, out_path, positive_int, run_cli
    from probes.circuits.scaled import EDGE_BUDGET, VERIFY
    from toylens.preflight import add_model_flags

    parser = Parser(prog="python -m probes.circuit report", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a save_pretrained folder (GPT-2, GPT-NeoX, Llama)")
    parser.add_argument("--task", required=True, help="a text task, e.g. ioi")
    parser.add_argument("--out", type=out_path, default=None, help="report folder (default: PATH-report)")
    parser.add_argument("--pairs", type=positive_int, default=64, help="held-out pairs measured (default 64)")
    parser.add_argument(
        "--budget",
        type=positive_int,
        default=EDGE_BUDGET,
        help=f"exact oracle up to this many edges (default {EDGE_BUDGET})",
    )
    parser.add_argument(
        "--verify", type=positive_int, default=VERIFY, help=f"above it, top edges verified (default {VERIFY})"
    )
    add_model_flags(parser)
    args = parser.parse_args(argv)
    run_cli(
        outside_report,
        args.model,
        args.task,
        args.out,
        args.memory_gib,
        args.device,
        args.pairs,
        args.budget,
        args.verify,
    )
