"""The chapter's two equalities, measured (SEED_NOTES sections 1 and 3):

- the head: TransformerLens's attention, run on the bridge (its `hook_attn_out`, from the input it
  actually received at `ln1.hook_out`), equals `torch.nn.MultiheadAttention` loaded with the same
  weights and `F.scaled_dot_product_attention` on the same q, k, v (causal, in float32);
- the average: the prefix average as a loop, as a matrix product with the row-normalised
  lower-triangular matrix, and as softmax over scores 0 on and below the diagonal and -inf above
  agree; and the uniform-attention variant's pattern on the bridge is that same matrix.

Each equality holds by construction up to float32 rounding; what is measured is the rounding (max
|difference| over every entry, against the largest |value| compared). `python -m
probes.chapter.equalities` prints them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from common.cli import Bounded, Parser, run_cli, seed_number, width_number

# The source's figures (float32; their shapes are not stated).
SOURCE = {"head": 1.8e-7, "average": 6e-8}
FLOAT32_EPSILON = 2.0**-23


@dataclass(frozen=True)
class Equality:
    left: str
    right: str
    shape: tuple[int, ...]  # of the compared tensors
    max_abs_difference: float
    max_abs_value: float  # of the left side: the difference reads against it
    source: float  # the source chapter's figure for this equality


@dataclass(frozen=True)
class Equalities:
    seed: int
    d_model: int
    n_heads: int
    length: int
    batch: int
    rows: list[Equality]


def compared(left: str, right: str, a, b, source: float) -> Equality:
    return Equality(left, right, tuple(a.shape), float((a - b).abs().max()), float(a.abs().max()), source)


def head_equalities(d_model: int, n_heads: int, length: int, batch: int, seed: int) -> list[Equality]:
    import torch

    from models import ModelSpec, build_model

    spec = ModelSpec(n_layers=1, d_model=d_model, n_heads=n_heads, mlp=False, n_ctx=length, d_vocab=64)
    model = build_model(spec, seed=seed)
    tokens = torch.randint(spec.d_vocab, (batch, length), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens)
        x, bridge = cache["blocks.0.ln1.hook_out"], cache["blocks.0.hook_attn_out"]
        attn = model.blocks[0].attn
        projections = [attn.q, attn.k, attn.v]
        mha = torch.nn.MultiheadAttention(d_model, n_heads, bias=True, batch_first=True)
        mha.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
        mha.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))
        mha.out_proj.weight.copy_(attn.o.weight)
        mha.out_proj.bias.copy_(attn.o.bias)
        future = torch.triu(torch.ones(length, length, dtype=torch.bool), 1)
        by_mha, _ = mha(x, x, x, attn_mask=future, need_weights=False)

        def heads(projection):  # [batch, heads, pos, d_head], the split both modules use
            return (
                torch.nn.functional.linear(x, projection.weight, projection.bias)
                .view(batch, length, n_heads, d_model // n_heads)
                .transpose(1, 2)
            )

        q, k, v = map(heads, projections)
        z = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        by_sdpa = torch.nn.functional.linear(
            z.transpose(1, 2).reshape(batch, length, d_model), attn.o.weight, attn.o.bias
        )
    return [
        compared("TL attention (bridge)", "nn.MultiheadAttention", bridge, by_mha, SOURCE["head"]),
        compared("TL attention (bridge)", "F.scaled_dot_product_attention", bridge, by_sdpa, SOURCE["head"]),
    ]


def average_equalities(d_model: int, length: int, seed: int) -> list[Equality]:
    import torch

    from models import ModelSpec, build_model
    from models.spec import Attention, Positions

    x = torch.randn(length, d_model, generator=torch.Generator().manual_seed(seed))
    by_loop = torch.stack([x[: t + 1].mean(0) for t in range(length)])
    lower = torch.tril(torch.ones(length, length))
    weights = lower / lower.sum(1, keepdim=True)
    scores = torch.zeros(length, length).masked_fill(lower == 0, float("-inf"))
    by_softmax = torch.softmax(scores, -1)
    spec = ModelSpec(
        n_layers=1,
        d_model=d_model,
        n_heads=1,
        mlp=False,
        attention=Attention.UNIFORM,
        positions=Positions.NONE,
        n_ctx=length,
        d_vocab=64,
    )
    tokens = torch.randint(spec.d_vocab, (1, length), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        _, cache = build_model(spec, seed=seed).run_with_cache(tokens)
    return [
        compared("loop of prefix means", "lower-triangular matmul", by_loop, weights @ x, SOURCE["average"]),
        compared("loop of prefix means", "softmax(0 / -inf) @ x", by_loop, by_softmax @ x, SOURCE["average"]),
        compared(
            "averaging matrix",
            "uniform variant's pattern (bridge)",
            weights,
            cache["blocks.0.attn.hook_pattern"][0, 0],
            SOURCE["average"],
        ),
    ]


def measure_equalities(
    d_model: int = 128, n_heads: int = 4, length: int = 64, batch: int = 8, seed: int = 0
) -> Equalities:
    return Equalities(
        seed,
        d_model,
        n_heads,
        length,
        batch,
        head_equalities(d_model, n_heads, length, batch, seed) + average_equalities(d_model, length, seed),
    )


def equalities_table(result: Equalities) -> str:
    from probes.report.render import table

    rows = [
        [
            e.left,
            e.right,
            "x".join(map(str, e.shape)),
            f"{e.max_abs_difference:.1e}",
            f"{e.max_abs_value:.2f}",
            f"{e.max_abs_difference / e.max_abs_value:.1e}",
            f"~{e.source:.1e}",
        ]
        for e in result.rows
    ]
    return (
        f"float32, seed {result.seed}: a random 1-layer model (d_model {result.d_model}, {result.n_heads} heads) "
        f"on {result.batch} random sequences of {result.length} tokens; prefix averages of a random "
        f"{result.length} x {result.d_model} matrix. Equal by construction: the difference is float rounding, "
        f"which scales with the values (float32 machine epsilon {FLOAT32_EPSILON:.2e}, relative).\n"
        + table(["left", "right", "shape", "max |left - right|", "max |left|", "relative", "source"], rows)
    )


def equalities_command(d_model: int, n_heads: int, length: int, batch: int, seed: int, out) -> None:
    from common.cli import UsageError
    from common.atomic import write_json
    from common.ownership import claim_check

    if d_model % n_heads or d_model > 4096 or length > 4096 or batch > 1024:
        raise UsageError(
            f"--d-model {d_model} must be a multiple of --heads {n_heads} and at most 4096; "
            f"--length {length} at most 4096, --batch {batch} at most 1024"
        )
    if out is not None:
        claim_check(out)
    result = measure_equalities(d_model, n_heads, length, batch, seed)
    print(equalities_table(result))
    if out is not None:
        write_json(out, asdict(result))
        print(f"\nwrote {out}")


def main(argv=None) -> None:
    from common.cli import out_path

    parser = Parser(
        prog="toylens equalities",
        description="The hand-written head equals nn.MultiheadAttention and F.scaled_dot_product_attention; "
        "the averaging loop equals the matmul and the softmax.",
    )
    parser.add_argument("--d-model", type=width_number, default=128)
    parser.add_argument("--heads", type=Bounded(int, 1, 1024, "heads"), default=4)
    parser.add_argument("--length", type=Bounded(int, 1, 65_536, "tokens; memory grows with its square"), default=64)
    parser.add_argument("--batch", type=Bounded(int, 1, 65_536, "sequences"), default=8)
    parser.add_argument("--seed", type=seed_number, default=0)
    parser.add_argument("--out", type=out_path, help="also write the result as JSON to this file")
    args = parser.parse_args(argv)
    run_cli(equalities_command, args.d_model, args.heads, args.length, args.batch, args.seed, args.out)
