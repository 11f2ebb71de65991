"""Load toylens's exports with the field's own readers, in a separate environment (docs/exports.md).

    .venv/bin/python benchmarks/check_exports_with_readers.py RUNS_DIR --reader-python READER_PY \\
        --eap-ig EAP_IG_CHECKOUT --schema GRAPH_SCHEMA_JSON [--circuit-tracer CIRCUIT_TRACER_CHECKOUT]

READER_PY is the python of an environment with TransformerLens < 4 (EAP-IG imports HookedTransformer,
which TransformerLens 4 removed), torch, einops, matplotlib, safetensors, jsonschema and pydantic;
toylens needs TransformerLens 4, so the two never share an environment. Run with the project's
python, this script writes the counterfactual pairs of every run that has an oracle MIB file (the
same pairs the report patches), then runs itself under READER_PY, which imports only the readers:

- every MIB file under RUNS_DIR (report/mib/*.json, exports/mib/*.json): EAP-IG's own
  `Graph.from_json` loads it; its edge names are exactly `Graph.from_model(cfg)`'s; every score and
  in_graph flag reads back as written; how many marked edges EAP-IG's `prune` (which
  `evaluate_graph` runs first) keeps; and, for each oracle file, EAP-IG's own exact edge patching
  (`get_scores_exact`) on a HookedTransformer holding the run's weights, with metric
  -(answer - foil logit) (MIB's loss), next to the file's scores: the sign and the values;
- every attribution graph under RUNS_DIR (exports/attribution/*.json): Neuronpedia's graph-schema.json
  (draft-07, as its Ajv upload check) and, given a checkout, circuit-tracer's own graph `Model`.

Prints one line per file and check and a closing tally; exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

MIB_NAME = re.compile(r"(?P<model>.+)_seed(?P<seed>\d+)(?:_(?P<method>.+))?\.json$")


def mib_files(runs_dir: Path) -> list[Path]:
    return sorted(p for p in runs_dir.glob("*/mib/*.json") if not p.name.startswith("."))


def attribution_files(runs_dir: Path) -> list[Path]:
    return sorted(p for p in runs_dir.glob("*/attribution/*.json") if not p.name.startswith("."))


def is_oracle(path: Path) -> bool:
    """The report's files (report/mib/<model>_seed<k>.json) and the export's _oracle files."""
    method = MIB_NAME.match(path.name)["method"]
    return method is None or method == "oracle"


# ---- the project side (TransformerLens 4) --------------------------------------------------


def write_pairs(runs_dir: Path, folder: Path) -> None:
    """<model>_seed<k>.json per run with an oracle MIB file: the report's counterfactual pairs, the
    run's spec and weights, and toylens's clean and counterfactual metric (to check the conversion)."""
    import torch

    from probes.patching import corrupt_inputs, run_outcome
    from probes.report.outputs.exports import slug
    from probes.settings import DEFAULT
    from tasks.base import NO_FOIL
    from tasks.data import spread_subset
    from tasks.training.runs import find_runs

    wanted = {
        (m["model"], int(m["seed"])) for p in mib_files(runs_dir) if is_oracle(p) for m in [MIB_NAME.match(p.name)]
    }
    for run in find_runs(runs_dir):
        if (slug(run.model_name), run.seed) not in wanted:
            continue
        heldout = run.batches()["heldout"]
        pairs = spread_subset(heldout, DEFAULT.pair_count(heldout))
        model = run.load_model()
        with torch.no_grad():
            clean = run_outcome(model, pairs, pairs.inputs).metric
            other = run_outcome(model, pairs, corrupt_inputs(pairs)).metric
        data = {
            "spec": run.config["spec"],
            "weights": str(run.path / "model.safetensors"),
            "clean": pairs.inputs.tolist(),
            "counterfactual": corrupt_inputs(pairs).tolist(),
            "example_index": pairs.example_index.tolist(),
            "positions": pairs.positions.tolist(),
            "answers": pairs.answers.tolist(),
            "foils": pairs.foils.tolist(),
            "clean_metric": clean,
            "counterfactual_metric": other,
            "every_position_has_a_foil": bool((pairs.foils != NO_FOIL).all()),
        }
        (folder / f"{slug(run.model_name)}_seed{run.seed}.json").write_text(json.dumps(data))


# ---- the reader side (TransformerLens < 4) -------------------------------------------------

# The spec fields a plain HookedTransformer reproduces, at these values (toylens's other variants
# change modules or frozen weights it has no switch for).
CONVERTIBLE = {
    "attention": ("softmax",),
    "norm": ("LN", None),
    "norm_place": ("pre",),
    "positions": ("learned",),
    "residual": (True,),
    "scale_scores": (True,),
}


def unconvertible(spec: dict) -> str | None:
    odd = [f"{k}={spec.get(k)!r}" for k, allowed in CONVERTIBLE.items() if spec.get(k, allowed[0]) not in allowed]
    return f"a HookedTransformer does not reproduce {', '.join(odd)}" if odd else None


def hooked_transformer(pairs: dict):
    """A HookedTransformer (TL < 4) holding the run's weights, configured as EAP-IG requires. The
    run stores TransformerLens 4's Linear layout ([out, in]); TL 3 keeps per-head matrices. An
    attention-only run gets MLPs whose output weights and bias are zero (they write nothing, so the
    model computes the same): EAP-IG's graph has an MLP node in every layer and hooks its input and
    output, which an attn_only HookedTransformer does not have."""
    import torch
    from safetensors.torch import load_file
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    spec = pairs["spec"]
    n_heads, d_model = spec["n_heads"], spec["d_model"]
    d_head = d_model // n_heads
    cfg = HookedTransformerConfig(
        n_layers=spec["n_layers"],
        d_model=d_model,
        n_ctx=spec["n_ctx"],
        d_head=d_head,
        n_heads=n_heads,
        d_mlp=4 * d_model,
        d_vocab=spec["d_vocab"],
        act_fn="gelu",
        normalization_type=spec["norm"],
        positional_embedding_type="standard",
        device="cpu",
        use_attn_result=True,
        use_split_qkv_input=True,
        use_hook_mlp_in=True,
    )
    model = HookedTransformer(cfg)
    w = load_file(pairs["weights"])
    blocks = [f"blocks.{layer}." for layer in range(spec["n_layers"])]
    norms = (
        ["ln_final", *(f"{b}ln1" for b in blocks), *(f"{b}ln2" for b in blocks if spec["mlp"])] if spec["norm"] else []
    )
    state = {
        "embed.W_E": w["embed.weight"],
        "pos_embed.W_pos": w["pos_embed.weight"],
        "unembed.W_U": w["unembed.weight"].T,
        "unembed.b_U": w["unembed.bias"],
    }
    for b in blocks:
        for name in "qkv":
            weight = w[f"{b}attn.{name}.weight"].T.reshape(d_model, n_heads, d_head)
            state[f"{b}attn.W_{name.upper()}"] = weight.permute(1, 0, 2)
            state[f"{b}attn.b_{name.upper()}"] = w[f"{b}attn.{name}.bias"].reshape(n_heads, d_head)
        state[f"{b}attn.W_O"] = w[f"{b}attn.o.weight"].T.reshape(n_heads, d_head, d_model)
        state[f"{b}attn.b_O"] = w[f"{b}attn.o.bias"]
        if spec["mlp"]:
            state[f"{b}mlp.W_in"], state[f"{b}mlp.b_in"] = w[f"{b}mlp.in.weight"].T, w[f"{b}mlp.in.bias"]
            state[f"{b}mlp.W_out"], state[f"{b}mlp.b_out"] = w[f"{b}mlp.out.weight"].T, w[f"{b}mlp.out.bias"]
        else:
            state[f"{b}mlp.W_out"] = torch.zeros(4 * d_model, d_model)
            state[f"{b}mlp.b_out"] = torch.zeros(d_model)
    for norm in norms:
        state[f"{norm}.w"], state[f"{norm}.b"] = w[f"{norm}.weight"], w[f"{norm}.bias"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    expected_missing = ("IGNORE", "mask") if spec["mlp"] else ("IGNORE", "mask", "ln2.w", "ln2.b", "W_in", "b_in")
    if unexpected or any(not k.endswith(expected_missing) for k in missing):
        raise RuntimeError(f"weights do not fit: missing {missing[:4]}, unexpected {unexpected[:4]}")
    return model.eval()


def exact_scores(pairs: dict, eap_graph, eap_attribute, eap_evaluate):
    """EAP-IG's get_scores_exact on the pairs: every edge of Graph.from_model(cfg) corrupted alone,
    score = metric(intervened) - metric(clean), metric = -(mean answer - foil logit) (MIB's loss).
    Returns (graph, clean and counterfactual metric by the converted model)."""
    import torch

    model = hooked_transformer(pairs)
    example, position = torch.tensor(pairs["example_index"]), torch.tensor(pairs["positions"])
    answers, foils = torch.tensor(pairs["answers"]), torch.tensor(pairs["foils"])

    def logit_diff(logits):
        scored = logits[example, position]
        return (scored.gather(-1, answers[:, None]) - scored.gather(-1, foils[:, None]))[:, 0].mean()

    def loss(logits, clean_logits, input_lengths, label):
        return -logit_diff(logits)[None]

    def tokens(rows):
        # The pairs are toylens token ids, not text: EAP-IG's tokenize_plus would run a tokenizer.
        ids = torch.tensor(rows)
        return ids, torch.ones_like(ids), torch.full((len(ids),), ids.shape[1]), ids.shape[1]

    eap_evaluate.tokenize_plus = lambda model, rows: tokens(rows)
    data = [(pairs["clean"], pairs["counterfactual"], None)]
    with torch.no_grad():
        metrics = (
            logit_diff(model(torch.tensor(pairs["clean"]))).item(),
            logit_diff(model(torch.tensor(pairs["counterfactual"]))).item(),
        )
    cfg = {
        "n_layers": model.cfg.n_layers,
        "n_heads": model.cfg.n_heads,
        "parallel_attn_mlp": False,
        "d_model": model.cfg.d_model,
    }
    graph = eap_graph.Graph.from_model(cfg)
    eap_attribute.get_scores_exact(model, graph, data, loss, quiet=True)
    return graph, metrics


@functools.cache
def exact_for_run(pairs_file: Path, eap):
    """exact_scores once per run: its report file and its export's oracle file hold the same scores."""
    return exact_scores(json.loads(pairs_file.read_text()), *eap)


def check_mib(path: Path, pairs_dir: Path, eap, say) -> None:
    eap_graph, eap_attribute, eap_evaluate = eap
    name = str(path)
    try:
        graph = eap_graph.Graph.from_json(str(path))
    except Exception as error:  # noqa: BLE001 -- the point is to record whatever their reader raises
        say(False, name, f"Graph.from_json raised {type(error).__name__}: {error}")
        return
    data = json.loads(path.read_text())
    say(True, name, f"loaded by Graph.from_json ({len(graph.edges)} edges, {len(graph.nodes)} nodes)")
    reference = eap_graph.Graph.from_model(data["cfg"])
    same = set(data["edges"]) == set(reference.edges) and set(data["nodes"]) == set(reference.nodes)
    say(
        same,
        name,
        f"edge names {'are exactly' if same else 'differ from'} Graph.from_model(cfg)'s "
        f"({len(data['edges'])} written, {len(reference.edges)} in its graph)",
    )
    import torch

    worst = max(
        abs(graph.edges[e].score.item() - torch.tensor(v["score"]).float().item()) for e, v in data["edges"].items()
    )
    flags = all(bool(graph.edges[e].in_graph) == v["in_graph"] for e, v in data["edges"].items()) and all(
        bool(graph.nodes[n].in_graph) == v["in_graph"] for n, v in data["nodes"].items()
    )
    marked = sum(v["in_graph"] for v in data["edges"].values())
    say(
        worst == 0 and flags,
        name,
        f"scores read back equal the file's (as float32: max |diff| {worst:.1e}); "
        f"in_graph flags {'as written' if flags else 'DIFFER'} ({marked} edges marked)",
    )
    graph.prune()
    dropped = sorted(e for e, v in data["edges"].items() if v["in_graph"] and not graph.edges[e].in_graph)
    # Not a failure: toylens picks a circuit's edges by their effect, EAP-IG keeps only those on a
    # path from input to logits; a dropped edge feeds a node none of whose outputs is kept, so under
    # either reader's patching it changes nothing.
    say(
        True,
        name,
        f"EAP-IG's prune (run first by evaluate_graph) keeps {marked - len(dropped)} of the {marked} "
        f"marked edges" + (f", dropping {', '.join(dropped)}" if dropped else ""),
    )
    match = MIB_NAME.match(path.name)
    if not is_oracle(path):
        return
    pairs_file = pairs_dir / f"{match['model']}_seed{match['seed']}.json"
    pairs = json.loads(pairs_file.read_text())
    if unconvertible(pairs["spec"]):
        say(None, name, f"EAP-IG's exact patching not run: {unconvertible(pairs['spec'])}")
        return
    if not pairs["every_position_has_a_foil"]:
        say(
            None,
            name,
            "EAP-IG's exact patching not run: the metric here is the answer - foil logit, and "
            "some scored positions have no foil (toylens scores those by log-prob)",
        )
        return
    try:
        theirs, (clean, other) = exact_for_run(pairs_file, eap)
    except Exception as error:  # noqa: BLE001 -- whatever their code raises is the finding
        say(False, name, f"EAP-IG's get_scores_exact raised {type(error).__name__}: {error}")
        return
    conversion = max(abs(clean - pairs["clean_metric"]), abs(other - pairs["counterfactual_metric"]))
    diffs = [abs(theirs.edges[e].score.item() - v["score"]) for e, v in data["edges"].items()]
    largest = max(abs(v["score"]) for v in data["edges"].values())
    # float32 forwards of a metric near 10 differ by ~1e-6; below this floor a sign is noise.
    floor = 1e-4 * max(largest, 1.0)
    signed = [
        (theirs.edges[e].score.item() > 0) == (v["score"] > 0)
        for e, v in data["edges"].items()
        if abs(v["score"]) > floor
    ]
    say(
        max(diffs) <= floor and conversion <= floor and all(signed),
        name,
        f"EAP-IG's exact patching: max |file - theirs| {max(diffs):.1e} (largest |score| {largest:.3f}); "
        f"sign agrees on {sum(signed)}/{len(signed)} edges above {floor:.0e}; converted model's clean / "
        f"counterfactual logit difference {clean:.4f} / {other:.4f} (toylens: {pairs['clean_metric']:.4f} / "
        f"{pairs['counterfactual_metric']:.4f}, |diff| {conversion:.1e})",
    )


def check_attribution(path: Path, validator, tracer_model, say) -> None:
    data = json.loads(path.read_text())
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    say(
        not errors,
        str(path),
        "graph-schema.json: valid"
        if not errors
        else f"graph-schema.json: {len(errors)} error(s), first at {'/'.join(map(str, errors[0].absolute_path))}: "
        f"{errors[0].message}",
    )
    if tracer_model is not None:
        try:
            tracer_model.model_validate(data)
            say(True, str(path), "circuit-tracer's graph Model: valid")
        except Exception as error:  # noqa: BLE001 -- whatever their validator raises is the finding
            say(False, str(path), f"circuit-tracer's graph Model: {str(error).splitlines()[0]} ...")


def read(args) -> int:
    import importlib.metadata as metadata
    import importlib.util
    import warnings

    import jsonschema
    import torch

    # TL 3.9 warns that HookedTransformer is deprecated: it is, and EAP-IG reads nothing else.
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    torch.set_num_threads(1)  # small forwards: threads only contend (73 s against ~300 s for block-2)
    sys.path.insert(0, str(Path(args.eap_ig) / "src"))
    from eap import attribute, evaluate, graph

    tracer_model = None
    if args.circuit_tracer:
        # The module alone: importing the circuit_tracer package pulls in its models and GPU stack.
        spec = importlib.util.spec_from_file_location(
            "graph_models", Path(args.circuit_tracer) / "circuit_tracer" / "frontend" / "graph_models.py"
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        tracer_model = module.Model
    print(
        f"readers: transformer_lens {metadata.version('transformer_lens')}, torch {metadata.version('torch')}, "
        f"jsonschema {metadata.version('jsonschema')}, pydantic {metadata.version('pydantic')}; "
        f"EAP-IG at {args.eap_ig}, schema {args.schema}, circuit-tracer at {args.circuit_tracer}"
    )
    tally = {True: 0, False: 0, None: 0}

    def say(ok: bool | None, where: str, text: str) -> None:
        """ok True: passed; False: failed; None: not checked (the reason is in `text`)."""
        tally[ok] += 1
        print(f"{ {True: 'ok  ', False: 'FAIL', None: 'skip'}[ok] } {where}: {text}")

    runs_dir = Path(args.runs_dir)
    for path in mib_files(runs_dir):
        check_mib(path, Path(args.pairs), (graph, attribute, evaluate), say)
    validator = jsonschema.Draft7Validator(json.loads(Path(args.schema).read_text()))
    for path in attribution_files(runs_dir):
        check_attribution(path, validator, tracer_model, say)
    print(
        f"{tally[True]} passed, {tally[False]} failed, {tally[None]} skipped "
        f"({len(mib_files(runs_dir))} MIB files, {len(attribution_files(runs_dir))} attribution graphs)"
    )
    return 1 if tally[False] else 0


def main() -> None:
    from common.cli import Parser  # argparse's errors on one line, as every toylens command's

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("runs_dir", type=Path)
    parser.add_argument("--reader-python", help="python of the environment with TransformerLens < 4")
    parser.add_argument("--eap-ig", required=True, help="an EAP-IG checkout (its src/eap is imported)")
    parser.add_argument("--schema", required=True, help="Neuronpedia's apps/webapp/app/api/graph/graph-schema.json")
    parser.add_argument("--circuit-tracer", help="a circuit-tracer checkout (its frontend/graph_models.py)")
    parser.add_argument("--pairs", help=argparse.SUPPRESS)  # set when the script calls itself
    args = parser.parse_args()
    for given, what in ((args.eap_ig, "src/eap/graph.py"), (args.schema, "")):
        if not (Path(given) / what).exists():
            parser.error(f"{Path(given) / what} does not exist")
    if not (args.runs_dir.is_dir() and (mib_files(args.runs_dir) or attribution_files(args.runs_dir))):
        parser.error(
            f"{args.runs_dir} holds no */mib/*.json or */attribution/*.json; run toylens export mib|attribution first"
        )
    if args.pairs:
        sys.exit(read(args))
    if not args.reader_python:
        parser.error("give --reader-python: the readers need TransformerLens < 4, toylens needs 4")
    with tempfile.TemporaryDirectory() as folder:
        write_pairs(args.runs_dir, Path(folder))
        command = [
            args.reader_python,
            __file__,
            str(args.runs_dir),
            "--eap-ig",
            args.eap_ig,
            "--schema",
            args.schema,
            "--pairs",
            folder,
        ]
        if args.circuit_tracer:
            command += ["--circuit-tracer", args.circuit_tracer]
        # EAP-IG's evaluate_baseline draws a progress bar per edge whatever `quiet` says.
        sys.exit(subprocess.run(command, env={**os.environ, "TQDM_DISABLE": "1"}).returncode)


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(main)  # a UsageError raised anywhere in it: one line, exit 2
