"""`python -m probes.circuit report --model PATH --task NAME [--out DIR]`: the circuit of a local
Hugging Face checkpoint on a text task: loaded offline (models.hf_load), the hook preflight first
(models.preflight; nothing is measured when it fails), then probes.circuits.scaled, written as
report.md + report.json into DIR (default PATH-report beside the folder), published whole. The task's
parameters are flags as in `toylens train NAME` (e.g. IOI's --templates 1: one prompt layout, which
position-aware edges need)."""

from __future__ import annotations

from pathlib import Path


def outside_report(path: Path, task, out: Path | None, memory_gib: float, device: str, options) -> Path:
    """`options`: the parsed flags of `add_trace_flags` (pairs, budget, verify, ranking, ig_steps,
    positions, no_search)."""
    from common.atomic import publish_folder, staging
    from common.ownership import check_publishable
    from models.hf_load import load_folder
    from models.preflight import preflight, require
    from probes.circuits.scaled import About, hooks_used, trace
    from probes.report.outside import write_outside_report
    from tasks.templates import heldout_batch

    out = Path(out or Path(path).with_name(Path(path).name + "-report"))
    check_publishable(out, "report folder")
    loaded = load_folder(path, memory_gib, device)
    batch = heldout_batch(task, 0, loaded.tokenizer, options.pairs)  # refuses words that are not single tokens
    model, about = loaded.bridge, About(loaded.origin.name, loaded.origin.family)
    checked = require(preflight(model, batch.inputs[:2].to(device), loaded.hf_model, hooks_used(model)))
    result = trace(
        model,
        batch.to(device),
        about,
        options.budget,
        options.verify,
        options.ranking,
        options.ig_steps,
        options.positions,
        not options.no_search,
    )
    with staging(out) as staged:
        write_outside_report(result, task.name, checked, staged)
        publish_folder(staged, out)
    print("\n".join((out / "report.md").read_text().splitlines()[:8]))
    print(f"\nwrote {out / 'report.md'} and report.json")
    return out


def add_trace_flags(parser) -> None:
    from common.cli import positive_int
    from probes.circuits.scaled import EDGE_BUDGET, IG_STEPS, RANKINGS, VERIFY

    parser.add_argument("--pairs", type=positive_int, default=64, help="held-out pairs measured (default 64)")
    parser.add_argument(
        "--budget",
        type=positive_int,
        default=EDGE_BUDGET,
        help=f"exact oracle up to this many edges (default {EDGE_BUDGET})",
    )
    parser.add_argument(
        "--verify",
        type=positive_int,
        default=VERIFY,
        help=f"above it, top edges verified exactly; the joint search runs over them (default {VERIFY})",
    )
    parser.add_argument("--ranking", choices=RANKINGS, default="eap", help="above the budget: EAP (default) or EAP-IG")
    parser.add_argument(
        "--ig-steps", type=positive_int, default=IG_STEPS, help=f"EAP-IG's integration steps (default {IG_STEPS})"
    )
    parser.add_argument("--positions", action="store_true", help="one edge per position (prompts of one layout only)")
    parser.add_argument("--no-search", action="store_true", help="skip the joint search over the top edges")


def main(argv=None) -> None:
    from common.cli import Parser, out_path, run_cli
    from toylens.preflight import add_model_flags

    parser = Parser(prog="python -m probes.circuit report", description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a save_pretrained folder (GPT-2, GPT-NeoX, Llama)")
    parser.add_argument("--task", required=True, help="a text task, e.g. ioi (its parameters follow as flags)")
    parser.add_argument("--out", type=out_path, default=None, help="report folder (default: PATH-report)")
    add_trace_flags(parser)
    add_model_flags(parser)
    known, _ = parser.parse_known_args(argv)  # the task first: its parameters are flags too
    run_cli(report_command, parser, known.task, argv)


def report_command(parser, task_name: str, argv) -> None:
    import dataclasses

    from tasks.registry import build_task, get_task_class
    from toylens.arguments import add_task_params

    task_cls = get_task_class(task_name)
    add_task_params(parser, task_cls)
    args = parser.parse_args(argv)
    task = build_task(task_cls, {f.name: getattr(args, f.name) for f in dataclasses.fields(task_cls.Params)})
    outside_report(args.model, task, args.out, args.memory_gib, args.device, args)
