"""Activation patching and head ablation: toylens's batched sweeps vs transformer_lens.patching
(one forward per patched index) on the same inputs, equal results, speed ratio.

    .venv/bin/python benchmarks/sweeps.py [--pairs 64] [--rounds 8]

Uses freshly initialised models shaped like the Winograd family's blocks (4 heads, MLP; activation
patching on 2 blocks, the ablation sweep on 1 and 2 blocks) on Winograd held-out pairs, so it needs
no trained run; the work per patch does not depend on the weights. Each round runs both sides back
to back (interleaved, so both see the same load); the speed-up is the mean of the per-round ratios
with its 95% t interval.
"""

from __future__ import annotations

import os

os.environ.setdefault("TQDM_DISABLE", "1")  # transformer_lens.patching draws a bar per sweep

import torch

from models import ModelSpec, build_model
from probes.ablation import Ablation
from probes.ablation_sweep import head_ablation_sweep
from probes.patching import activation_patching, corrupt_inputs, scored_metric
from tasks.data import spread_subset
from tasks.data import task_dataset, to_batch
from tasks.evaluate import logits_at_scored
from tasks.winograd import WinogradTask
from timing import interleaved_ratio, spread


def main() -> None:
    from common.cli import Parser  # argparse's errors on one line, as every toylens command's

    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=8, help="interleaved repeats of each pair")
    args = parser.parse_args()
    torch.set_num_threads(1)  # what the report uses
    from transformer_lens import patching

    task = WinogradTask()
    pairs = spread_subset(to_batch(task_dataset(task, 0)["heldout"]), args.pairs)

    def metric(logits):
        return scored_metric(logits_at_scored(logits, pairs), pairs).mean()

    with torch.no_grad():
        model = winograd_model(task, pairs, n_layers=2)
        speedup, ours, theirs, _ = interleaved_ratio(
            lambda: activation_patching(model, pairs),
            lambda: theirs_patching(patching, model, pairs, metric),
            args.rounds,
        )
        worst = max((getattr(ours, name) - value.float()).abs().max().item() for name, value in theirs.items())
        print(
            f"activation patching, 2 blocks ({args.pairs} pairs, every head x position, head x all positions, "
            f"resid; {args.rounds} interleaved rounds):"
        )
        print(f"  speed-up over transformer_lens.patching {describe(speedup)}  max |difference| {worst:.1e}")

        print("zero-ablation sweep (every head; toylens also scores each whole layer):")
        for n_layers in (1, 2):
            model = winograd_model(task, pairs, n_layers)
            speedup, sweep, theirs, _ = interleaved_ratio(
                lambda: head_ablation_sweep(model, pairs, Ablation.ZERO),
                lambda: theirs_ablation(patching, model, pairs, metric),
                args.rounds,
            )
            n_heads = model.cfg.n_layers * model.cfg.n_heads
            ours_grid = torch.tensor([r.logit_diff for r in sweep[1 : 1 + n_heads]])
            worst = (ours_grid - theirs.flatten().float()).abs().max().item()
            print(f"  {n_layers} block(s): speed-up {describe(speedup)}  max |difference| {worst:.1e}", flush=True)


def describe(speedup) -> str:
    return f"{spread(speedup, 'x', 1)} (95% interval, {speedup.n} rounds)"


def winograd_model(task, pairs, n_layers: int):
    spec = ModelSpec(n_layers=n_layers, n_heads=4, n_ctx=pairs.inputs.shape[1], d_vocab=len(task.vocabulary()))
    return build_model(spec, seed=0)


def theirs_patching(patching, model, pairs, metric) -> dict:
    _, clean_cache = model.run_with_cache(pairs.inputs)
    corrupt = corrupt_inputs(pairs)
    return {
        "head_out": patching.get_act_patch_attn_head_out_by_pos(model, corrupt, clean_cache, metric),
        "head_all": patching.get_act_patch_attn_head_out_all_pos(model, corrupt, clean_cache, metric),
        "resid_pre": patching.get_act_patch_resid_pre(model, corrupt, clean_cache, metric),
    }


def theirs_ablation(patching, model, pairs, metric):
    """Zero-ablating each head = patching its z from an all-zero cache, one forward per head."""
    _, cache = model.run_with_cache(pairs.inputs)
    for name in list(cache.keys()):
        cache.cache_dict[name] = torch.zeros_like(cache[name])
    return patching.get_act_patch_attn_head_out_all_pos(model, pairs.inputs, cache, metric)


if __name__ == "__main__":
    from common.cli import run_cli

    run_cli(main)  # a UsageError raised anywhere in it: one line, exit 2
