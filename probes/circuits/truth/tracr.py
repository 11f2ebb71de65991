"""The field's ground truth: RASP programs compiled by Tracr into transformer weights, run as
TransformerLens bridges, with their true edges derived from the compiled weights.

Compiling needs the optional extra `[tracr]` (tracr-pypi, jax, dm-haiku) and runs only in
`compile_program` (benchmarks/make_tracr_fixtures.py stores the result); everything else reads the
stored fixture (safetensors + JSON), so the methods run on the compiled models without jax.
The conversion is TransformerLens's (`transformer_lens.utilities.tracr`: the boot_native config and
state dict); a numerical output (frac_prevs) has no categorical unembedding there, so its one
output dimension is read as logit 0 against a zero logit 1 (`numerical_unembed`).

True edges: Tracr names every residual dimension `variable:value` (or `variable` for a numerical
one) in `residual_labels`; a component writes a variable when its output weights have a nonzero
row in one of the variable's dimensions, and a receiver input reads it when its input weights
(W_Q, W_K, W_V, the MLP's W_in, the unembedding) have one. An edge sender -> input is true (read)
when the sender writes a variable the input reads: read off the weights, not typed in. A read the
outputs never depend on is inert (zero-ablating the edge alone moves no logit after BOS on any
input of the domain, every length: e.g. a query term every key scores alike); the used edges,
read and not inert, are the reference the AUROC is scored against.

Pairs: inputs are `BOS x1 .. xN` at the full length N the program was compiled for (Tracr's models
are not causal, so padding would be read; a batch has one length), the counterfactual an
independent random input (ACDC's random ablation); `acdc_pairs` draws ACDC's inputs instead
(reverse: permutations of the 3 tokens, length 3), where the length sub-circuit is not constant. A position is scored where the two outputs differ; the metric is the
clean output's logit minus the counterfactual's (categorical), or +-the output value signed so the
clean run scores higher (numerical).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import torch

from common.cli import UsageError
from common.store import parse_json, read_tensors
from models import ModelSpec
from models.graph import MLP, Embed, Graph, Head, Input, Logits, Sender, graph_of
from models import Model
from probes.ablation import Ablation
from probes.circuits.truth.tracr_programs import PROGRAMS, Program
from tasks.base import NO_FOIL
from tasks.data import Batch

FIXTURES = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "tracr"
WEIGHT_ZERO = 1e-6  # |weight| below this is no read or write (Tracr's weights are exact 0 or O(1))
OUTPUT_NOISE = 1e-4  # a logit moving less than this has not moved (Tracr's logits are O(1))


# ACDC's reference circuit for reverse (acdc/tracr_task/utils.py, get_tracr_reverse_edges: "edges
# generated from ACDC run with threshold epsilon, metric l2 and zero ablation"), in this graph's
# names: its token and position embeddings are our one embed, its head-internal q/k/v edges dropped.
ACDC_REVERSE = (
    "embed -> L0H0.v",
    "embed -> MLP0",
    "L0H0 -> MLP0",
    "embed -> MLP1",
    "MLP0 -> MLP1",
    "MLP1 -> MLP2",
    "MLP2 -> L3H0.q",
    "embed -> L3H0.k",
    "embed -> L3H0.v",
    "L3H0 -> logits",
)


@dataclass(frozen=True)
class Compiled:
    """What a fixture holds: the bridge config and state dict, and Tracr's encodings."""

    name: str
    config: dict  # TransformerBridgeConfig fields
    state: dict  # native state dict (tensors)
    residual_labels: tuple[str, ...]
    input_map: dict  # input value (as str) -> token id
    output_map: dict | None  # categorical output value (as str) -> logit index; None: numerical
    output_label: str
    truth: dict | None = None  # "read" / "used" -> the edges as strings (derive_truth), as the fixture records them
    provenance: dict | None = None  # the program's source, the versions that compiled and converted it, the date


class NumericalOutput:
    """Duck-typed stand-in for a numerical output encoder: one "value" column, so TL's categorical
    unembedding puts the output dimension in logit 0 (logit 1 is appended as zero)."""

    encoding_map = {"value": 0}


def compile_program(program: Program) -> Compiled:
    """Compile with Tracr (needs the `[tracr]` extra) and convert with TransformerLens's helpers."""
    import types

    try:
        from tracr.compiler import compiling, lib
        from tracr.rasp import rasp
    except ImportError as error:  # tracr itself, or the jax it imports
        raise UsageError(
            f"compiling Tracr programs needs the tracr extra ({error.name or error} is not installed): "
            "pip install -e .[tracr]; the stored fixtures run without it"
        ) from None
    from transformer_lens.utilities.tracr import (
        make_tracr_transformer_bridge_config,
        make_tracr_transformer_bridge_state_dict,
    )

    output = program.build(rasp, lib)
    model = compiling.compile_rasp_to_model(
        output, vocab=set(program.vocab), max_seq_len=program.max_seq_len, compiler_bos="BOS"
    )
    labels = tuple(str(label) for label in model.residual_labels)
    categorical = getattr(model.output_encoder, "encoding_map", None) is not None
    view, output_label = model, output.label  # the output SOp's residual name (its label carries RASP's id)
    if not categorical:
        view = types.SimpleNamespace(
            params=model.params,
            model_config=model.model_config,
            output_encoder=NumericalOutput(),
            residual_labels=[f"{l}:value" if l == output_label else l for l in labels],
        )
    config = make_tracr_transformer_bridge_config(view)
    state = make_tracr_transformer_bridge_state_dict(view, output_label)
    fields = {
        name: getattr(config, name)
        for name in (
            "n_layers",
            "d_model",
            "d_head",
            "n_ctx",
            "d_vocab",
            "d_vocab_out",
            "d_mlp",
            "n_heads",
            "act_fn",
            "normalization_type",
        )
    }
    fields["attention_dir"] = "causal" if model.model_config.causal else "bidirectional"
    if not categorical:
        state["head.weight"] = torch.cat([state["head.weight"], torch.zeros_like(state["head.weight"])])
        fields["d_vocab_out"] = 2
    return Compiled(
        program.name,
        fields,
        state,
        labels,
        {str(k): int(v) for k, v in model.input_encoder.encoding_map.items()},
        {str(k): int(v) for k, v in model.output_encoder.encoding_map.items()} if categorical else None,
        output_label,
    )


def with_truth(compiled: Compiled, program: Program) -> Compiled:
    """The compiled program with what its fixture records besides the weights: its read and used
    edges (derived from the converted weights here, so the fixture states them without jax) and
    where it came from."""
    import datetime
    from importlib.metadata import version

    model, graph = bridge(compiled), shape_graph(compiled)
    order = lambda edges: [str(e) for e in graph.edges if e in edges]  # noqa: E731
    truth = {"read": order(true_edges(model, compiled, graph)), "used": order(used_edges(model, compiled, graph))}
    provenance = {
        "program": program.source,
        "vocab": list(program.vocab),
        "max_seq_len": program.max_seq_len,
        "tracr": f"tracr-pypi {version('tracr-pypi')} (jax {version('jax')})",
        "converter": f"transformer-lens {version('transformer-lens')} transformer_lens.utilities.tracr",
        "compiled": datetime.date.today().isoformat(),
    }
    return dataclasses.replace(compiled, truth=truth, provenance=provenance)


def recorded_edges(compiled: Compiled, graph: Graph, kind: str) -> frozenset:
    """The fixture's recorded edges of `kind` ("read" or "used") as edges of `graph`."""
    if compiled.truth is None or kind not in compiled.truth:
        raise UsageError(
            f"Tracr fixture {compiled.name!r} records no {kind} edges; remake it with `python benchmarks/make_tracr_fixtures.py`"
        )
    by_name = {str(e): e for e in graph.edges}
    unknown = [name for name in compiled.truth[kind] if name not in by_name]
    if unknown:
        raise UsageError(
            f"Tracr fixture {compiled.name!r} records edges its graph lacks ({', '.join(unknown[:3])}); remake it"
        )
    return frozenset(by_name[name] for name in compiled.truth[kind])


def save(compiled: Compiled, folder: Path) -> None:
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in compiled.state.items()}, str(folder / f"{compiled.name}.safetensors"))
    meta = {
        "name": compiled.name,
        "config": compiled.config,
        "residual_labels": list(compiled.residual_labels),
        "input_map": compiled.input_map,
        "output_map": compiled.output_map,
        "output_label": compiled.output_label,
        "truth": compiled.truth,
        "provenance": compiled.provenance,
    }
    (folder / f"{compiled.name}.json").write_text(json.dumps(meta, indent=1) + "\n")


def load(name: str, folder: Path = FIXTURES) -> Compiled:
    weights, meta_path = folder / f"{name}.safetensors", folder / f"{name}.json"
    if not weights.is_file() or not meta_path.is_file():
        raise UsageError(
            f"no Tracr fixture {name!r} in {folder}; make it with "
            "`python benchmarks/make_tracr_fixtures.py` (needs `pip install -e .[tracr]`)"
        )
    remake = "remake it with `python benchmarks/make_tracr_fixtures.py` (needs `pip install -e .[tracr]`)"
    try:
        meta = parse_json(meta_path)
        compiled = Compiled(
            meta["name"],
            dict(meta["config"]),
            {},
            tuple(meta["residual_labels"]),
            dict(meta["input_map"]),
            meta["output_map"],
            str(meta["output_label"]),
            meta.get("truth"),
            meta.get("provenance"),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as error:  # not JSON, not UTF-8, a field missing
        raise UsageError(f"{meta_path} is not a Tracr fixture toylens wrote ({str(error)[:120]}); {remake}") from None
    state = read_tensors(
        weights, lambda error: f"{weights} is not a complete safetensors file ({str(error)[:120]}); {remake}"
    )
    check_weights(compiled, state, weights, remake)
    return dataclasses.replace(compiled, state=state)


def check_weights(compiled: Compiled, state: dict, weights: Path, remake: str) -> None:
    """The weights are the shapes the config names (a fixture whose two files do not belong together
    would otherwise fail deep inside the bridge)."""
    c = compiled.config
    try:
        wanted = {
            "tok_embed.weight": (c["d_vocab"], c["d_model"]),
            "pos.weight": (c["n_ctx"], c["d_model"]),
            "head.weight": (c["d_vocab_out"], c["d_model"]),
        }
    except (KeyError, TypeError) as error:
        raise UsageError(f"{weights}: its config lacks {error}; {remake}") from None
    for key, shape in wanted.items():
        if key not in state or tuple(state[key].shape) != tuple(shape):
            found = f"has shape {tuple(state[key].shape)}" if key in state else "is missing"
            raise UsageError(f"{weights}: {key} {found}, not {tuple(shape)} as its config says; {remake}")


def bridge(compiled: Compiled):
    from transformer_lens import TransformerBridge, TransformerBridgeConfig

    model = TransformerBridge.boot_native(TransformerBridgeConfig(**compiled.config))
    model.load_state_dict(compiled.state, strict=False)
    return model.eval()


def shape_graph(compiled: Compiled) -> Graph:
    """The edge graph of the compiled shape (graph_of reads only layers, heads, MLP and attention)."""
    c = compiled.config
    return graph_of(ModelSpec(n_layers=c["n_layers"], d_model=c["d_model"], n_heads=c["n_heads"], mlp=True))


def variables(dims: torch.Tensor, labels: tuple[str, ...]) -> frozenset:
    return frozenset(labels[i].split(":")[0] for i in torch.nonzero(dims).flatten().tolist())


def read_write_dims(model: Model) -> tuple[dict[Sender, torch.Tensor], dict[Input, torch.Tensor]]:
    """(sender -> [d_model] bool: the residual dimensions it writes, receiver input -> those it reads)."""
    nz = lambda w, dim: (w.detach().abs() > WEIGHT_ZERO).any(dim)  # noqa: E731
    writes: dict[Sender, torch.Tensor] = {Embed(): nz(model.W_E, 0) | nz(model.W_pos, 0)}
    reads = {Input(Logits()): nz(model.W_U, 1)}
    for layer in range(model.cfg.n_layers):
        for head in range(model.cfg.n_heads):
            writes[Head(layer, head)] = nz(model.W_O[layer, head], 0)
            for port, weight in (("q", model.W_Q), ("k", model.W_K), ("v", model.W_V)):
                reads[Input(Head(layer, head), port)] = nz(weight[layer, head], 1)
        writes[MLP(layer)] = nz(model.blocks[layer].mlp.W_out, 0)
        reads[Input(MLP(layer))] = nz(model.blocks[layer].mlp.W_in, 1)
    return writes, reads


def reads_and_writes(model: Model, compiled: Compiled) -> tuple[dict, dict]:
    """(sender -> variables written, receiver input -> variables read) from the bridge's weights."""
    writes, reads = read_write_dims(model)
    labels = compiled.residual_labels
    return ({s: variables(d, labels) for s, d in writes.items()}, {r: variables(d, labels) for r, d in reads.items()})


def true_edges(model: Model, compiled: Compiled, graph: Graph) -> frozenset:
    writes, reads = reads_and_writes(model, compiled)
    return frozenset(e for e in graph.edges if writes[e.sender] & reads[e.receiver])


def outputs(model: Model, tokens: torch.Tensor, compiled: Compiled) -> torch.Tensor:
    """[n, pos] the categorical output index, or the numerical output value."""
    with torch.no_grad():
        logits = model(tokens)
    return logits.argmax(-1) if compiled.output_map is not None else logits[..., 0]


def body_values(compiled: Compiled) -> torch.Tensor:
    """The input token ids a position after BOS may hold."""
    return torch.tensor([i for v, i in compiled.input_map.items() if v not in ("BOS", "compiler_pad")])


def with_bos(compiled: Compiled, body: torch.Tensor) -> torch.Tensor:
    """[n, length + 2]: BOS, the body, and a last column the model never reads (Batch.inputs drops it)."""
    n = body.shape[0]
    return torch.cat([torch.full((n, 1), compiled.input_map["BOS"]), body, torch.zeros(n, 1, dtype=torch.long)], 1)


def pairs(
    model: Model,
    compiled: Compiled,
    n: int = 64,
    seed: int = 0,
    length: int | None = None,
    distinct: bool | None = None,
) -> Batch:
    """`n` random inputs of `length` tokens after BOS (default: the full compiled length; `distinct`:
    no token twice, default the program's premise) and independent random counterfactuals of the
    same length, scored where their outputs differ."""
    generator = torch.Generator().manual_seed(seed)
    ids = body_values(compiled)
    length = compiled.config["n_ctx"] - 1 if length is None else length
    distinct = PROGRAMS[compiled.name].distinct if distinct is None else distinct

    def draw():
        if distinct:
            body = torch.stack([ids[torch.randperm(len(ids), generator=generator)[:length]] for _ in range(n)])
        else:
            body = ids[torch.randint(0, len(ids), (n, length), generator=generator)]
        return with_bos(compiled, body)

    clean, counterfactual = draw(), draw()
    a, b = outputs(model, clean[:, :-1], compiled), outputs(model, counterfactual[:, :-1], compiled)
    differ = (a != b) if compiled.output_map is not None else (a - b).abs() > WEIGHT_ZERO
    differ[:, 0] = False  # BOS carries no output
    rows, positions = torch.nonzero(differ, as_tuple=True)
    if compiled.output_map is not None:
        answers, foils = a[rows, positions], b[rows, positions]
    else:
        higher = a[rows, positions] > b[rows, positions]
        answers, foils = torch.where(higher, 0, 1), torch.where(higher, 1, 0)
    return Batch(
        tokens=clean,
        lengths=torch.full((n,), clean.shape[1]),
        example_index=rows,
        positions=positions,
        answers=answers,
        foils=foils,
        groups=[compiled.name] * n,
        counterfactual=counterfactual,
    )


def domain(compiled: Compiled, length: int) -> torch.Tensor:
    """Every input of the program's domain with `length` tokens after BOS, as with_bos rows."""
    import itertools

    ids = body_values(compiled).tolist()
    bodies = (
        itertools.permutations(ids, length)
        if PROGRAMS[compiled.name].distinct
        else itertools.product(ids, repeat=length)
    )
    return with_bos(compiled, torch.tensor(list(bodies)))


def every_position(compiled: Compiled, tokens: torch.Tensor) -> Batch:
    """`tokens` with every position after BOS scored (the metric is not read: the answer and foil are
    placeholders) and themselves as counterfactual (zero ablation reads no other input)."""
    n, width = tokens.shape[0], tokens.shape[1] - 1
    rows, positions = torch.meshgrid(torch.arange(n), torch.arange(1, width), indexing="ij")
    rows, positions = rows.flatten(), positions.flatten()
    return Batch(
        tokens=tokens,
        lengths=torch.full((n,), tokens.shape[1]),
        example_index=rows,
        positions=positions,
        answers=torch.zeros_like(rows),
        foils=torch.full_like(rows, NO_FOIL),
        groups=[compiled.name] * n,
        counterfactual=tokens,
    )


def zero_logit_moves(model: Model, compiled: Compiled, graph: Graph, edges: list, length: int) -> list[float]:
    """Per edge: the largest |logit change| at any position after BOS, over every input of the
    domain with `length` tokens, when that edge alone is zero-ablated."""
    from probes.circuits.ablations import ablated_runs
    from probes.circuits.oracle import patched_runs
    from probes.circuits.edge_hooks import LOGITS_IN

    batch = every_position(compiled, domain(compiled, length))
    runs = ablated_runs(model, batch, graph, Ablation.ZERO)
    with torch.no_grad():
        clean = model(batch.inputs)[:, 1:]
    patched = patched_runs(model, batch, graph, [frozenset([e]) for e in edges], runs, observe=(LOGITS_IN,))
    W_U, b_U = model.W_U.detach(), model.b_U.detach()
    return [float((p.observed[LOGITS_IN][:, 1:] @ W_U + b_U - clean).abs().max()) for p in patched]


def inert_edges(model: Model, compiled: Compiled, graph: Graph, truth: frozenset) -> frozenset:
    """True edges (read off the weights) that no output uses: zero-ablating one alone moves no logit
    after BOS by OUTPUT_NOISE on any input of the domain at any length 1..N (exhaustive: at most
    516 inputs per length here). The rest of the true edges is what zero ablation can find at all
    (ACDC's own Tracr reference sets are ACDC's zero-ablation circuits: acdc/tracr_task/utils.py)."""
    edges, moved = sorted(truth, key=graph.edges.index), {}
    for length in range(1, compiled.config["n_ctx"]):
        for edge, move in zip(edges, zero_logit_moves(model, compiled, graph, edges, length)):
            moved[edge] = max(moved.get(edge, 0.0), move)
    return frozenset(e for e in edges if moved[e] < OUTPUT_NOISE)


def acdc_pairs(model: Model, compiled: Compiled, n: int) -> Batch:
    """Pairs as ACDC's experiment draws them (permutations of the vocabulary at its length)."""
    return pairs(model, compiled, n, length=PROGRAMS[compiled.name].acdc_length, distinct=True)


def used_edges(model: Model, compiled: Compiled, graph: Graph) -> frozenset:
    """The true edges read off the weights, less the inert ones (inert_edges): the reference set the
    AUROC table scores against. On reverse it is exactly ACDC's reference edges (tested)."""
    truth = true_edges(model, compiled, graph)
    return truth - inert_edges(model, compiled, graph, truth)


@dataclass(frozen=True)
class TracrRow:
    program: str
    inputs: str  # "full" (every input at the compiled length) or "ACDC's" (acdc_pairs)
    length: int  # tokens after BOS
    ablation: Ablation
    edges: int
    read_edges: int  # true_edges: read off the weights
    used_edges: int  # used_edges: read and not inert
    scored: int  # scored positions (where the clean and counterfactual outputs differ)
    auroc: dict  # method -> AUROC of recovering the used edges by |score|
    oracle_read: float  # the oracle's AUROC against the read edges
    seconds: dict  # method -> seconds


def tracr_table(names=tuple(PROGRAMS), ablations=None, n: int = 64, folder: Path = FIXTURES) -> list[TracrRow]:
    """Every method under every ablation on each stored program, on full-length pairs and, where
    the program names one, on ACDC's inputs: AUROC against its used edges."""
    from probes.circuits.ablations import EDGE_ABLATIONS, ablated_runs
    from probes.circuits.methods.compare import every_method
    from probes.circuits.methods.scores import auroc

    rows = []
    for name in names:
        compiled = load(name, folder)
        model, graph = bridge(compiled), shape_graph(compiled)
        read, used = true_edges(model, compiled, graph), used_edges(model, compiled, graph)
        positive = torch.tensor([e in used for e in graph.edges])
        read_positive = torch.tensor([e in read for e in graph.edges])
        batches = [("full", pairs(model, compiled, n))]
        if PROGRAMS[name].acdc_length:
            batches.append(("ACDC's", acdc_pairs(model, compiled, n)))
        for inputs, batch in batches:
            for ablation in ablations or EDGE_ABLATIONS:
                runs = ablated_runs(model, batch, graph, ablation)
                methods = every_method(model, batch, graph, runs)
                rows.append(
                    TracrRow(
                        name,
                        inputs,
                        batch.inputs.shape[1] - 1,
                        ablation,
                        len(graph.edges),
                        len(read),
                        len(used),
                        len(batch.positions),
                        {m.method: auroc(m.score.abs(), positive) for m in methods},
                        auroc(methods[0].score.abs(), read_positive),
                        {m.method: m.seconds for m in methods},
                    )
                )
    return rows
