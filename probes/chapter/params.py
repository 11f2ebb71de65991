"""What a model costs in parameters, per component, counted from a built model and checked against
the chapter's formula: per block 4d^2+4d (attention with biases) + 8d^2+5d (MLP, 4x, with biases) +
4d (two LayerNorms) = 12d^2+13d, plus token and position embeddings, the final LayerNorm and the
unembedding (untied in toylens; tied in GPT-2).

Counting builds the model with `build_model` on torch's meta device: the same modules and shapes as a
real build, no memory and nothing downloaded, so GPT-2 small's shape counts in well under a second.

`toylens params n_layers=2 d_model=128 d_vocab=64 n_ctx=32`, `toylens params
RUN_FOLDER`, or `toylens params gpt2`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from common.cli import Parser, UsageError, run_cli
from models.spec import ModelSpec, Positions

GPT2_SMALL = ModelSpec(n_layers=12, d_model=768, n_heads=12, d_vocab=50257, n_ctx=1024)
GPT2_SMALL_TIED = 124_439_808  # the chapter's number, for the table; the probe recomputes it
BLOCK_PARTS = ("ln1", "attn", "ln2", "mlp")
MODEL_PARTS = ("embed", "pos_embed", "ln_final", "unembed")


@dataclass(frozen=True)
class ParamCount:
    spec: ModelSpec
    counted: dict[str, int]  # component -> parameters of the built model (blocks summed)
    formula: dict[str, int]  # component -> the chapter's formula for this spec
    frozen: int  # parameters the variant freezes (W_Q of uniform attention, W_pos of "none")
    per_block_counted: int
    per_block_formula: int
    mlp_share_of_block: float  # counted MLP / counted block (0 without an MLP)
    tied_total: int  # counted total with the unembedding tied to the embedding
    buffers: dict[str, int]  # the unembedding's non-parameter tensors (TL's zero bias)

    @property
    def total(self) -> int:
        return sum(self.counted.values())

    @property
    def formula_total(self) -> int:
        return sum(self.formula.values())


def formula_counts(spec, tied: bool = False) -> dict[str, int]:
    """The chapter's arithmetic, written out per component for `spec` (hand-written: it is what the
    counted model is checked against)."""
    d, layers = spec.d_model, spec.n_layers
    ln = 2 * d if spec.norm else 0
    counts = {
        "embed": spec.d_vocab * d,
        "pos_embed": spec.n_ctx * d if spec.positions != Positions.ROTARY else 0,
        "ln1": layers * ln,
        "attn": layers * (4 * d * d + 4 * d),
        "ln2": layers * ln if spec.mlp else 0,
        "mlp": layers * (8 * d * d + 5 * d) if spec.mlp else 0,
        "ln_final": ln,
        "unembed": 0 if tied else spec.d_vocab * d,
    }
    return counts


def numel(module) -> int:
    return 0 if module is None else sum(p.numel() for p in module.parameters())


def count_parameters(spec) -> ParamCount:
    import torch

    from models import build_model

    with torch.device("meta"):
        model = build_model(spec)
    counted = {name: numel(getattr(model, name, None)) for name in MODEL_PARTS}
    for part in BLOCK_PARTS:
        counted[part] = sum(numel(getattr(block, part, None)) for block in model.blocks)
    counted = {name: counted[name] for name in formula_counts(spec)}
    per_block = numel(model.blocks[0])
    # TL's bridge keeps a zero unembedding bias as a buffer: in the state dict, never trained.
    buffers = {f"unembed.{name.rsplit('.', 1)[-1]}": tensor.numel() for name, tensor in model.unembed.named_buffers()}
    return ParamCount(
        spec=spec,
        counted=counted,
        formula=formula_counts(spec),
        frozen=sum(p.numel() for p in model.parameters() if not p.requires_grad),
        per_block_counted=per_block,
        per_block_formula=sum(formula_counts(dataclasses.replace(spec, n_layers=1))[p] for p in BLOCK_PARTS),
        mlp_share_of_block=numel(getattr(model.blocks[0], "mlp", None)) / per_block,
        tied_total=sum(counted.values()) - counted["unembed"],
        buffers=buffers,
    )


# Arguments -------------------------------------------------------------------------------------


def parse_value(field, text: str):
    if field.type in ("int", int):
        try:
            return int(text)
        except ValueError:
            raise UsageError(f"{field.name}={text!r}: expected an integer") from None
    if field.type in ("bool", bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise UsageError(f"{field.name}={text!r}: expected true or false")
        return text.lower() in ("true", "1")
    if field.name == "norm":
        return None if text.lower() in ("none", "null", "") else text
    return text


def spec_from_args(items: list[str]):
    """A ModelSpec from `gpt2`, a run folder, or key=value fields."""
    if items == ["gpt2"]:
        return GPT2_SMALL.validate()
    if len(items) == 1 and "=" not in items[0]:
        if not Path(items[0]).is_dir():
            raise UsageError(
                f"{items[0]!r} is neither gpt2, a run folder nor key=value; "
                "e.g. n_layers=2 d_model=128 d_vocab=64 n_ctx=32"
            )
        from tasks.training.runs import Run

        return Run(Path(items[0])).spec
    fields = {f.name: f for f in dataclasses.fields(ModelSpec)}
    values = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in fields:
            raise UsageError(f"{item!r} is not FIELD=VALUE with a ModelSpec field; fields: {', '.join(fields)}")
        if key in values:  # the last would silently win
            raise UsageError(f"{key} is given twice ({key}={values[key]} and {item}); give each field once")
        values[key] = parse_value(fields[key], text)
    if "d_vocab" not in values:
        raise UsageError("give d_vocab=N (the vocabulary size); a spec without one has no embedding")
    return ModelSpec(**values).validate()


# Rendering -------------------------------------------------------------------------------------


def params_table(result: ParamCount) -> str:
    from probes.report.render import table

    rows = [
        [
            name,
            f"{result.counted[name]:,}",
            f"{result.formula[name]:,}",
            "" if result.counted[name] == result.formula[name] else "differs",
            f"{result.counted[name] / result.total:.1%}",
        ]
        for name in result.counted
    ]
    rows.append(["total", f"{result.total:,}", f"{result.formula_total:,}", "", "100%"])
    d = result.spec.d_model
    lines = [
        table(["component", "counted (built model)", "formula", "", "share"], rows),
        "",
        f"one block: {result.per_block_counted:,} counted, {result.per_block_formula:,} by formula "
        f"(12d^2+13d = {12 * d * d + 13 * d:,} for a full block at d={d}); "
        f"MLP share of a block {result.mlp_share_of_block:.1%}",
        f"with the unembedding tied to the embedding: {result.tied_total:,}",
    ]
    if result.frozen:
        lines.append(f"frozen by the spec's variant (not trained): {result.frozen:,}")
    if result.buffers:
        lines.append(
            "in the state dict but not parameters: "
            + ", ".join(f"{k} ({v:,}, a zero buffer)" for k, v in result.buffers.items())
        )
    return "\n".join(lines)


def params_figure(result: ParamCount):
    from common.figure import Figure

    names = [n for n in result.counted if result.counted[n] or result.formula[n]]
    fig = Figure(figsize=(7, 0.4 * len(names) + 1.5), layout="constrained")
    ax = fig.subplots()
    y = range(len(names))
    ax.barh([i - 0.2 for i in y], [result.counted[n] for n in names], height=0.4, label="counted (built model)")
    ax.barh([i + 0.2 for i in y], [result.formula[n] for n in names], height=0.4, label="formula")
    ax.set_yticks(list(y), names)
    ax.set_xlabel("parameters")
    ax.set_title(f"parameters per component: d_model {result.spec.d_model}, {result.spec.n_layers} block(s)")
    ax.legend()
    return fig


def params_command(items: list[str], out: Path | None) -> None:
    """Print the table; write params.json and params.png only into an --out the user asked for (a
    command that prints leaves the current folder as it found it)."""
    from common.atomic import write_json
    from probes.report.figures import save

    spec = spec_from_args(items)
    result = count_parameters(spec)
    print(params_table(result))
    if items == ["gpt2"]:
        print(
            f"GPT-2 small, tied: {result.tied_total:,} (source: {GPT2_SMALL_TIED:,}); as toylens builds it "
            f"(untied unembedding): {result.total:,}"
        )
    if out is None:
        return
    out = Path(out)
    write_json(
        out / "params.json",
        {
            **dataclasses.asdict(result),
            "total": result.total,
            "formula_total": result.formula_total,
            "counted_on": "meta device (build_model, shapes only)",
        },
    )
    save(params_figure(result), out / "params.png")
    print(f"\nwrote {out / 'params.json'} and {out / 'params.png'}")


def main(argv=None) -> None:
    from common.cli import out_path

    parser = Parser(
        prog="toylens params", description="Parameters per component of a model spec, counted and by formula."
    )
    parser.add_argument("spec", nargs="+", help="gpt2, a run folder, or ModelSpec fields as key=value")
    parser.add_argument(
        "--out",
        type=out_path,
        default=None,
        help="also write params.json and params.png into this folder (default: print only)",
    )
    args = parser.parse_args(argv)
    run_cli(params_command, args.spec, args.out)
