"""What attention costs as the sequence grows: one 512-wide, 8-head attention layer's forward time and
peak memory at sequence lengths 64, 128, ... (doubling while a forward takes under --budget seconds,
at least three lengths), with power laws fitted on log-log axes, for two implementations on the same weights:

- "TL bridge": the attention of a 1-layer toylens model (`build_model`, TransformerLens's bridge
  attention with its hooks): scores and pattern are materialised, n x n per head;
- "torch SDPA": `torch.nn.functional.scaled_dot_product_attention(is_causal=True)` between the same
  q, k, v and output maps (a fused kernel: on CPU it works through key blocks and never holds the
  n x n matrix).

Peak memory is read from torch's profiler (`profile_memory=True`): every op's own allocations at its
start and every free at its time, summed in time order; the peak is the most bytes torch held at once
above what existed before the forward (inputs and weights excluded). Time is the fastest of repeated
forwards (no grad, batch 1, float32) in one torch thread: with two threads on a shared 2-core
machine a forward waited on the slower thread and times jumped 3x between runs (measured).

`toylens cost` prints the table and fits and writes cost.json and cost.png to --out.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from common.cli import Bounded, Parser, UsageError, run_cli

OUT = Path("runs/chapter/cost")
D_MODEL, N_HEADS = 512, 8
EXTRAPOLATE_TO = 16_384
FLOAT_BYTES = 4
MIN_LENGTHS = 3  # measured whatever the budget, so there is always something to fit
FIT_FROM = 256  # shorter sequences are dominated by per-call overhead, not the n^2 work


@dataclass(frozen=True)
class CostPoint:
    n: int
    seconds: float  # fastest forward
    peak_bytes: int  # most bytes torch held at once during the forward, above the start
    repeats: int


@dataclass(frozen=True)
class CostCurve:
    implementation: str
    points: list[CostPoint]
    time_exponent: float
    memory_exponent: float
    peak_bytes_extrapolated: float  # the fitted memory law at EXTRAPOLATE_TO


@dataclass(frozen=True)
class CostResult:
    d_model: int
    n_heads: int
    threads: int
    fit_from: int
    curves: list[CostCurve]
    score_matrix_bytes: int  # n_heads x EXTRAPOLATE_TO^2 x 4 bytes: one float32 score tensor
    max_output_difference: float  # SDPA vs TL bridge output, largest |difference|, at the first length


def fit_exponent(ns, values, fit_from: int = FIT_FROM) -> tuple[float, float]:
    """(exponent, log coefficient) of values ~ c n^exponent, least squares on log-log axes over
    n >= fit_from (all points when fewer than two qualify)."""
    import numpy as np

    pairs = [(n, v) for n, v in zip(ns, values) if n >= fit_from and v > 0]
    if len(pairs) < 2:
        pairs = [(n, v) for n, v in zip(ns, values) if v > 0]
    if len(pairs) < 2:
        raise UsageError("need at least two sequence lengths to fit an exponent; raise --max-len")
    slope, intercept = np.polyfit(np.log([n for n, _ in pairs]), np.log([v for _, v in pairs]), 1)
    return float(slope), float(intercept)


def attention_layer(max_len: int):
    from models import ModelSpec, build_model

    spec = ModelSpec(n_layers=1, d_model=D_MODEL, n_heads=N_HEADS, mlp=False, norm=None, n_ctx=max_len, d_vocab=8)
    return build_model(spec).blocks[0].attn


def tl_forward(attention):
    return lambda x: attention(x)[0]


def sdpa_forward(attention):
    """The same maps as `attention`, with torch's fused causal attention in the middle."""
    import torch

    from models.bridge import native

    module = native(attention)

    def forward(x):
        batch, seq, _ = x.shape
        q, k, v = (
            linear(x).view(batch, seq, module.n_heads, module.d_head).transpose(1, 2)
            for linear in (module.q, module.k, module.v)
        )
        z = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1 / module.scale)
        return module.o(z.transpose(1, 2).reshape(batch, seq, -1))

    return forward


def peak_bytes(forward, x) -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        forward(x)
    held, peak = 0, 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        held += event.self_cpu_memory_usage
        peak = max(peak, held)
    return peak


def time_forward(forward, x, budget: float) -> tuple[float, int]:
    """Fastest of at least 3 forwards (one warm-up first), more while under `budget`: on a shared
    machine the other processes only ever add time, so the minimum is the least disturbed."""
    import torch

    times = []
    with torch.no_grad():
        forward(x)
        while len(times) < 3 or (sum(times) < budget and len(times) < 20):
            start = time.perf_counter()
            forward(x)
            times.append(time.perf_counter() - start)
    return min(times), len(times)


def measure_cost(max_len: int = 4096, budget: float = 1.0, progress: bool = True) -> CostResult:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return measure_lengths(max_len, budget, progress)
    finally:
        torch.set_num_threads(threads)


def measure_lengths(max_len: int, budget: float, progress: bool) -> CostResult:
    import torch
    from tqdm.auto import tqdm

    attention = attention_layer(max_len)
    forwards = {"TL bridge": tl_forward(attention), "torch SDPA": sdpa_forward(attention)}
    generator = torch.Generator().manual_seed(0)
    lengths = [64 * 2**i for i in range(int(math.log2(max_len / 64)) + 1)] if max_len >= 64 else [max_len]
    with torch.no_grad():
        x = torch.randn(1, lengths[0], D_MODEL, generator=generator)
        difference = (forwards["TL bridge"](x) - forwards["torch SDPA"](x)).abs().max().item()
    points = {name: [] for name in forwards}
    for n in tqdm(lengths, desc="sequence lengths", disable=not progress, leave=False):
        x = torch.randn(1, n, D_MODEL, generator=generator)
        slowest = 0.0
        for name, forward in forwards.items():
            seconds, repeats = time_forward(forward, x, budget)
            points[name].append(CostPoint(n, seconds, peak_bytes(forward, x), repeats))
            slowest = max(slowest, seconds)
        if slowest > budget and len(points["TL bridge"]) >= MIN_LENGTHS:  # the next would take ~4x as long
            break
    curves = [curve(name, pts) for name, pts in points.items()]
    return CostResult(
        D_MODEL,
        N_HEADS,
        torch.get_num_threads(),
        FIT_FROM,
        curves,
        N_HEADS * EXTRAPOLATE_TO**2 * FLOAT_BYTES,
        difference,
    )


def curve(name: str, points: list[CostPoint]) -> CostCurve:
    ns = [p.n for p in points]
    time_exponent, _ = fit_exponent(ns, [p.seconds for p in points])
    memory_exponent, log_c = fit_exponent(ns, [p.peak_bytes for p in points])
    return CostCurve(name, points, time_exponent, memory_exponent, math.exp(log_c) * EXTRAPOLATE_TO**memory_exponent)


# Rendering ----------------------------------------------------------------------------------------


def cost_table(result: CostResult) -> str:
    from probes.report.render import table

    by_n = {}
    for c in result.curves:
        for p in c.points:
            by_n.setdefault(p.n, {})[c.implementation] = p
    names = [c.implementation for c in result.curves]
    rows = [
        [n, f"{result.n_heads * n * n * FLOAT_BYTES / 2**20:,.1f}"]
        + [f"{row[name].seconds * 1e3:,.1f} ms / {row[name].peak_bytes / 2**20:,.1f} MiB" for name in names]
        for n, row in by_n.items()
    ]
    fits = [
        f"{c.implementation}: time ~ n^{c.time_exponent:.2f}, peak memory ~ n^{c.memory_exponent:.2f} "
        f"(fitted on n >= {result.fit_from}); memory law at {EXTRAPOLATE_TO:,} tokens: "
        f"{c.peak_bytes_extrapolated / 2**30:,.2f} GiB"
        for c in result.curves
    ]
    return "\n".join(
        [
            table(["n", "one score tensor (MiB)", *[f"{n}: time / peak" for n in names]], rows),
            "",
            *fits,
            f"one float32 score tensor at {EXTRAPOLATE_TO:,} tokens, {result.n_heads} heads: "
            f"{result.score_matrix_bytes:,} bytes = {result.score_matrix_bytes / 2**30:.1f} GiB "
            f"({result.score_matrix_bytes / 1e9:.1f} GB)",
            f"SDPA vs TL bridge output: max |difference| {result.max_output_difference:.1e}; "
            f"{result.threads} torch thread(s)",
        ]
    )


def cost_figure(result: CostResult):
    from common.figure import Figure

    fig = Figure(figsize=(11, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    for c in result.curves:
        ns = [p.n for p in c.points]
        axes[0].plot(
            ns, [p.seconds for p in c.points], marker="o", label=f"{c.implementation} (n^{c.time_exponent:.2f})"
        )
        axes[1].plot(
            ns,
            [p.peak_bytes / 2**20 for p in c.points],
            marker="o",
            label=f"{c.implementation} (n^{c.memory_exponent:.2f})",
        )
    ns = [p.n for p in result.curves[0].points]
    axes[1].plot(
        ns,
        [result.n_heads * n * n * FLOAT_BYTES / 2**20 for n in ns],
        color="gray",
        linestyle=":",
        label="one score tensor (8 n^2 x 4 B)",
    )
    for ax, label in zip(axes, ("forward time (s, fastest of repeats)", "peak memory above start (MiB, profiler)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
    fig.suptitle(f"one attention layer, d_model {result.d_model}, {result.n_heads} heads, batch 1, float32, CPU")
    return fig


def cost_command(max_len: int, budget: float, out: Path) -> None:
    from common.atomic import write_json
    from common.ownership import claim_check
    from probes.report.figures import save

    if max_len < 128:
        raise UsageError(f"--max-len {max_len} leaves fewer than two lengths to fit (64, 128, ...); use >= 128")
    if max_len > 8192:
        raise UsageError(
            f"--max-len {max_len}: one n x n score tensor alone would need "
            f"{N_HEADS * max_len**2 * FLOAT_BYTES / 2**30:.0f} GiB; use at most 8192"
        )
    if not 0 < budget <= 60:
        raise UsageError(f"--budget {budget} must lie in (0, 60] seconds per forward")
    out = Path(out)
    for name in ("cost.json", "cost.png"):  # a user's file there: refused before the measurement
        claim_check(out / name)
    result = measure_cost(max_len, budget)
    print(cost_table(result))
    write_json(out / "cost.json", asdict(result))
    save(cost_figure(result), out / "cost.png")
    print(f"\nwrote {out / 'cost.json'} and {out / 'cost.png'}")


def main(argv=None) -> None:
    from common.cli import out_path

    parser = Parser(
        prog="toylens cost", description="Attention's time and memory against sequence length, with fitted exponents."
    )
    parser.add_argument(
        "--max-len",
        type=Bounded(int, 1, 65_536, "tokens; memory grows with its square"),
        default=4096,
        help="longest sequence (default 4096)",
    )
    parser.add_argument(
        "--budget",
        type=Bounded(float, 0.001, 60, "seconds per forward"),
        default=1.0,
        help="stop doubling once a forward takes longer than this many seconds",
    )
    parser.add_argument("--out", type=out_path, default=OUT)
    args = parser.parse_args(argv)
    run_cli(cost_command, args.max_len, args.budget, args.out)
