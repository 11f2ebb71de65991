"""Exact path patching: a sender head's clean output reaches ONLY one receiver head's query, key or
value input; every other reader keeps the corrupt run's value.

Written by hand because TL's `patching.get_act_patch_direct_path` needs the bridge's split-QKV fork
(`use_split_qkv_input`), which the native attention of `boot_native` models refuses; it also
patches every position at once, where we need one sender position at a time. Here the receiver's
own Q/K/V is recomputed in the same forward from (its block's corrupt residual + the sender's
clean-minus-corrupt write), through its own LayerNorm and projection, and swapped in for that head
only. Real forward passes, nothing linearised.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from probes.ablation import head_name, z_name
from probes.attention import pattern_name
from probes.patching import (ROWS_PER_FORWARD, Outcome, corrupt_inputs, live_positions, outcome,
                             replica_scored, run_outcome)
from tasks.data import Batch

COMPONENTS = ("q", "k", "v")


@dataclass(frozen=True)
class PathPatch:
    sender: str                 # "L0H0"
    positions: tuple[int, ...] | None   # sender positions patched; None = every position
    receiver: str
    component: str              # q | k | v
    metric: float
    recovered: float            # share of the clean - corrupt gap closed
    restored: float             # share of scored positions predicting the clean answer again
    attention_moved: float      # receiver's scored rows: total variation, patched vs corrupt
    attention_recovered: float  # 1 - TV(patched, clean) / TV(corrupt, clean)

    @property
    def where(self) -> str:
        return "all positions" if self.positions is None else ",".join(f"p{p}" for p in self.positions)


@dataclass(frozen=True)
class PathTarget:
    sender: tuple[int, int]
    positions: tuple[int, ...] | None
    receiver: tuple[int, int]
    component: str


def head_writes(model, batch: Batch, senders) -> dict[tuple[int, int], torch.Tensor]:
    """Per sender, [n, pos, d_model] clean minus corrupt residual write (z @ W_O; b_O cancels)."""
    layers = sorted({layer for layer, _ in senders})
    names = [z_name(layer) for layer in layers]
    with torch.no_grad():
        _, clean = model.run_with_cache(batch.inputs, names_filter=names)
        _, corrupt = model.run_with_cache(corrupt_inputs(batch), names_filter=names)
        W_O = model.W_O
        return {(l, h): (clean[z_name(l)][:, :, h] - corrupt[z_name(l)][:, :, h]) @ W_O[l, h]
                for l, h in senders}


def receiver_input(model, layer: int, component: str, residual: torch.Tensor) -> torch.Tensor:
    """[n, pos, head, d_head]: the block's own LayerNorm and Q/K/V projection of `residual`.
    The raw torch modules are called so no hook fires inside a hook."""
    block = model.blocks[layer]
    normed = block.ln1.original_component(residual)
    projection = getattr(block.attn, component).original_component
    out = projection(normed)
    return out.view(*out.shape[:2], model.cfg.n_heads, model.cfg.d_head)


class PathHooks:
    """Hooks for one forward over replicas of the corrupt batch, one PathTarget per replica."""

    def __init__(self, model, targets: list[PathTarget], writes: dict, n: int):
        self.model, self.targets, self.writes, self.n = model, targets, writes, n
        self.residual = {}

    def keep_residual(self, layer):
        def hook(resid, hook):
            self.residual[layer] = resid
        return hook

    def patch(self, layer, component):
        def hook(act, hook):
            act = act.clone()
            view = act.view(len(self.targets), self.n, *act.shape[1:])
            residual = self.residual[layer].view(len(self.targets), self.n, *act.shape[1:2], -1)
            for replica, target in enumerate(self.targets):
                if target.receiver[0] != layer or target.component != component:
                    continue
                delta = self.writes[target.sender]
                if target.positions is not None:
                    mask = torch.zeros(delta.shape[1], dtype=torch.bool)
                    mask[list(target.positions)] = True
                    delta = delta * mask[None, :, None]
                value = receiver_input(self.model, layer, component, residual[replica] + delta)
                view[replica, :, :, target.receiver[1]] = value[:, :, target.receiver[1]]
            return act
        return hook

    def hooks(self) -> list:
        wanted = sorted({(t.receiver[0], t.component) for t in self.targets})
        out = [(f"blocks.{layer}.hook_resid_pre", self.keep_residual(layer)) for layer in {l for l, _ in wanted}]
        return out + [(f"blocks.{layer}.attn.hook_{c}", self.patch(layer, c)) for layer, c in wanted]


def receiver_rows(cache_pattern: torch.Tensor, batch: Batch, head: int) -> torch.Tensor:
    """[replicas, k, key] the receiver's attention rows at the scored positions."""
    pattern = cache_pattern.view(-1, len(batch), *cache_pattern.shape[1:])[:, :, head]
    return pattern[:, batch.example_index, batch.positions]


def total_variation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return 0.5 * (a - b).abs().sum(-1).mean(-1)


@torch.no_grad()
def path_patch_many(model, batch: Batch, targets: list[PathTarget]) -> list[PathPatch]:
    writes = head_writes(model, batch, sorted({t.sender for t in targets}))
    clean, corrupt = run_outcome(model, batch, batch.inputs), run_outcome(model, batch, corrupt_inputs(batch))
    receivers = sorted({t.receiver for t in targets})
    reference = {}
    for name, tokens in (("clean", batch.inputs), ("corrupt", corrupt_inputs(batch))):
        _, cache = model.run_with_cache(tokens, names_filter=[pattern_name(l) for l, _ in receivers])
        reference[name] = {r: receiver_rows(cache[pattern_name(r[0])], batch, r[1])[0] for r in receivers}
    per_forward = max(1, ROWS_PER_FORWARD // len(batch))
    results = []
    for start in range(0, len(targets), per_forward):
        chunk = targets[start:start + per_forward]
        hooks = PathHooks(model, chunk, writes, len(batch))
        names = [pattern_name(l) for l in sorted({t.receiver[0] for t in chunk})]
        with model.hooks(fwd_hooks=hooks.hooks()):
            logits, cache = model.run_with_cache(corrupt_inputs(batch).repeat(len(chunk), 1), names_filter=names)
        outcomes = outcome(replica_scored(logits, batch), batch)
        for replica, (target, result) in enumerate(zip(chunk, outcomes)):
            rows = receiver_rows(cache[pattern_name(target.receiver[0])], batch, target.receiver[1])[replica]
            results.append(summarise(target, result, clean, corrupt, rows,
                                     reference["clean"][target.receiver], reference["corrupt"][target.receiver]))
    return results


def summarise(target: PathTarget, result: Outcome, clean: Outcome, corrupt: Outcome, rows, clean_rows,
              corrupt_rows) -> PathPatch:
    gap_tv = float(total_variation(corrupt_rows, clean_rows))
    return PathPatch(
        sender=head_name(*target.sender),
        positions=target.positions,
        receiver=head_name(*target.receiver),
        component=target.component,
        metric=result.metric,
        recovered=(result.metric - corrupt.metric) / (clean.metric - corrupt.metric),
        restored=result.restored,
        attention_moved=float(total_variation(rows, corrupt_rows)),
        attention_recovered=1 - float(total_variation(rows, clean_rows)) / gap_tv if gap_tv > 1e-6 else float("nan"),
    )


def path_patch(model, batch: Batch, sender, receiver, component: str, positions=None) -> PathPatch:
    """One path: sender (layer, head) at `positions` (None = all) into receiver's `component`."""
    from probes.ablation import parse_heads

    (sender,), (receiver,) = parse_heads([sender]), parse_heads([receiver])
    if receiver[0] <= sender[0]:
        raise ValueError(f"the receiver {head_name(*receiver)} must sit in a later block than the "
                         f"sender {head_name(*sender)}")
    if component not in COMPONENTS:
        raise ValueError(f"component must be one of {COMPONENTS}, got {component!r}")
    target = PathTarget(sender, None if positions is None else tuple(positions), receiver, component)
    return path_patch_many(model, batch, [target])[0]


def head_pairs(model) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    heads = [(l, h) for l in range(n_layers) for h in range(n_heads)]
    return [(s, r) for s in heads for r in heads if r[0] > s[0]]


def path_sweep(model, batch: Batch) -> list[PathPatch]:
    """Every sender -> later receiver head, Q, K and V, sender patched at all positions."""
    targets = [PathTarget(s, None, r, c) for s, r in head_pairs(model) for c in COMPONENTS]
    return path_patch_many(model, batch, targets)


def position_sweep(model, batch: Batch, edges: list[PathPatch]) -> list[PathPatch]:
    """The given edges again, sender patched at one position at a time (positions that can matter)."""
    from probes.ablation import parse_heads

    targets = [PathTarget(parse_heads([e.sender])[0], (p,), parse_heads([e.receiver])[0], e.component)
               for e in edges for p in live_positions(batch)]
    return path_patch_many(model, batch, targets) if targets else []
