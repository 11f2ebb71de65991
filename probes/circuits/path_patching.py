"""Exact path patching: a sender head's clean output reaches ONLY one receiver head's query, key or
value input; every other reader keeps the corrupt run's value. A joint path does the same for a SET
of senders and a SET of receivers at once: the senders' summed clean-minus-corrupt writes reach only
the chosen input of every receiver (redundant heads, e.g. several induction heads, are then tested
as one circuit rather than edge by edge).

Written by hand because TL's `patching.get_act_patch_direct_path` needs the bridge's split-QKV fork
(`use_split_qkv_input`), which the native attention of `boot_native` models refuses; it also
patches every position at once, where we need one sender position at a time. Here the receiver's
own Q/K/V is recomputed in the same forward from (its block's corrupt residual + the sender's
clean-minus-corrupt write), through its own LayerNorm and projection, and swapped in for that head
only. Real forward passes, nothing linearised.

Joint receivers must share one layer: a receiver in a later layer would read a residual that already
carries an earlier receiver's patched output, mixing in a longer path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformer_lens.utilities import get_act_name

from common.cli import UsageError
from models.bridge import device_of, native
from models.resume import forward_from
from models.components import Head
from probes.patching import (Outcome, corrupt_inputs, outcome, replica_scored,
                             replicas_per_forward)
from common.stats import share
from tasks.data import Batch

COMPONENTS = ("q", "k", "v")


@dataclass(frozen=True)
class PathPatch:
    sender: str                 # "L0H0", or "L0H1+L0H3" for a joint path
    positions: tuple[int, ...] | None   # sender positions patched; None = every position
    receiver: str               # "L1H0", or "L1H0+L1H2"
    component: str              # q | k | v
    metric: float
    recovered: float            # share of the clean - corrupt gap closed
    restored: float             # share of scored positions predicting the clean answer again
    # Receivers' scored rows. Several receivers: attention_moved is the mean over receivers;
    # attention_recovered the gap-weighted mean, 1 - sum TV(patched, clean) / sum TV(corrupt, clean),
    # so a receiver whose attention the corruption barely moves cannot blow up the ratio.
    attention_moved: float      # total variation, patched vs corrupt
    attention_recovered: float  # 1 - TV(patched, clean) / TV(corrupt, clean)
    clean_values: bool = False  # receivers' values came from the clean run (see PathTarget)

    @property
    def where(self) -> str:
        if self.positions is None:
            return "all positions"
        return ",".join(f"p{p}" for p in self.positions) or "no positions"


def heads_of(value) -> tuple[Head, ...]:
    """One (layer, head) or a collection of them, as a tuple of distinct heads in the given order."""
    if len(value) == 2 and all(isinstance(v, int) for v in value):
        return (Head(*value),)
    return tuple(dict.fromkeys(Head.of(head) for head in value))


@dataclass(frozen=True)
class PathTarget:
    sender: Head | tuple[Head, ...]      # one head, or a set whose writes are summed
    positions: tuple[int, ...] | None
    receiver: Head | tuple[Head, ...]    # one head, or a set in one layer, all patched together
    component: str
    # Receivers (of a q or k path) read their values from the clean run: the path alone decides
    # where they look, the clean run what they copy. A counterfactual that changes the copied
    # tokens (induction's) needs both to restore the answer; positions=() with clean values is the
    # matching baseline (clean values, no path).
    clean_values: bool = False

    def __post_init__(self):
        senders, receivers = self.senders, self.receivers
        if not senders or not receivers:
            raise UsageError("a path needs at least one sender and one receiver head")
        if self.component not in COMPONENTS:
            raise UsageError(f"component must be one of {COMPONENTS}, got {self.component!r}")
        if self.clean_values and self.component == "v":
            raise UsageError("clean_values goes with a q or k path; a v path already sets the values")
        if len({layer for layer, _ in receivers}) > 1:
            raise UsageError(f"receivers {names(receivers)} span several layers; a later receiver would "
                             "read an earlier one's patched output, so patch one layer at a time")
        if receivers[0][0] <= max(layer for layer, _ in senders):
            raise UsageError(f"the receiver(s) {names(receivers)} must sit in a later block than the "
                             f"sender(s) {names(senders)}")

    @property
    def senders(self) -> tuple[Head, ...]:
        return heads_of(self.sender)

    @property
    def receivers(self) -> tuple[Head, ...]:
        return heads_of(self.receiver)

    @property
    def layer(self) -> int:
        return self.receivers[0][0]


def names(heads) -> str:
    """A head set's name, e.g. L0H1+L0H3; one head's is its own, e.g. L0H1."""
    return "+".join(str(Head(*head)) for head in heads)


def parse_names(name: str) -> tuple[Head, ...]:
    """Inverse of `names`."""
    from probes.ablation import parse_heads

    return parse_heads(name.split("+"))


def head_writes(model, clean: dict, corrupt: dict, senders) -> dict[tuple[int, int], torch.Tensor]:
    """Per sender, [n, pos, d_model] clean minus corrupt residual write (z @ W_O; b_O cancels), from
    the two runs' caches (holding each sender layer's z)."""
    W_O = model.W_O
    return {(l, h): (clean[get_act_name("z", l)][:, :, h] - corrupt[get_act_name("z", l)][:, :, h]) @ W_O[l, h] for l, h in senders}


def receiver_input(model, layer: int, component: str, residual: torch.Tensor) -> torch.Tensor:
    """[n, pos, head, d_head]: the block's own LayerNorm and Q/K/V projection of `residual`.
    The raw torch modules are called so no hook fires inside a hook."""
    block = model.blocks[layer]
    normed = native(block.ln1)(residual)
    projection = native(getattr(block.attn, component))
    out = projection(normed)
    return out.view(*out.shape[:2], model.cfg.n_heads, model.cfg.d_head)


def keeper(store: dict, name: str):
    """A hook that stores the activation passing it in `store[name]`, unchanged."""
    def keep(value, hook):
        store[name] = value
    return keep


class PathHooks:
    """Hooks for one forward over replicas of the corrupt batch, one PathTarget per replica."""

    def __init__(self, model, targets: list[PathTarget], writes: dict, n: int, clean_values: dict):
        self.model, self.targets, self.writes, self.n = model, targets, writes, n
        self.clean_values = clean_values    # layer -> the clean run's v, for targets that ask for it
        self.residual = {}

    def patch(self, layer, component):
        def hook(act, hook):
            act = act.clone()
            view = act.view(len(self.targets), self.n, *act.shape[1:])
            residual = self.residual[layer].view(len(self.targets), self.n, *act.shape[1:2], -1)
            for replica, target in enumerate(self.targets):
                if target.layer != layer or target.component != component:
                    continue
                delta = sum(self.writes[sender] for sender in target.senders)
                if target.positions is not None:
                    mask = torch.zeros(delta.shape[1], dtype=torch.bool, device=delta.device)
                    mask[list(target.positions)] = True
                    delta = delta * mask[None, :, None]
                value = receiver_input(self.model, layer, component, residual[replica] + delta)
                heads = [head for _, head in target.receivers]
                view[replica][:, :, heads] = value[:, :, heads]
            return act
        return hook

    def use_clean_values(self, layer):
        def hook(act, hook):
            act = act.clone()
            view = act.view(len(self.targets), self.n, *act.shape[1:])
            for replica, target in enumerate(self.targets):
                if target.layer == layer and target.clean_values:
                    heads = [head for _, head in target.receivers]
                    view[replica][:, :, heads] = self.clean_values[layer][:, :, heads]
            return act
        return hook

    def hooks(self) -> list:
        wanted = sorted({(t.layer, t.component) for t in self.targets})
        out = [(get_act_name("resid_pre", layer), keeper(self.residual, layer)) for layer in {l for l, _ in wanted}]
        out += [(get_act_name("v", layer), self.use_clean_values(layer))
                for layer in sorted({t.layer for t in self.targets if t.clean_values})]
        return out + [(get_act_name(c, layer), self.patch(layer, c)) for layer, c in wanted]



def receiver_rows(cache_pattern: torch.Tensor, batch: Batch, head: int) -> torch.Tensor:
    """[replicas, k, key] the receiver's attention rows at the scored positions."""
    pattern = cache_pattern.view(-1, len(batch), *cache_pattern.shape[1:])[:, :, head]
    return pattern[:, batch.example_index, batch.positions]


def total_variation(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return 0.5 * (a - b).abs().sum(-1).mean(-1)


@torch.no_grad()
def path_patch_many(model, batch: Batch, targets: list[PathTarget]) -> list[PathPatch]:
    batch = batch.to(device_of(model))
    senders = sorted({s for t in targets for s in t.senders})
    receivers = sorted({r for t in targets for r in t.receivers})
    value_layers = sorted({t.layer for t in targets if t.clean_values})
    first_layers = sorted({t.layer for t in targets})
    # One clean and one corrupt forward hold everything the patches compare against: the senders'
    # z, the receivers' patterns, the clean values, and the corrupt residual each forward resumes
    # from (blocks before a target's receivers compute exactly the corrupt run; equal, tested).
    shared = [get_act_name("z", l) for l in sorted({l for l, _ in senders})] + [get_act_name("pattern", l) for l, _ in receivers]
    clean_logits, clean_cache = model.run_with_cache(
        batch.inputs, names_filter=shared + [get_act_name("v", l) for l in value_layers])
    corrupt_logits, corrupt_cache = model.run_with_cache(
        corrupt_inputs(batch), names_filter=shared + [get_act_name("resid_pre", l) for l in first_layers])
    writes = head_writes(model, clean_cache, corrupt_cache, senders)
    clean, corrupt = (outcome(replica_scored(logits, batch), batch)[0] for logits in (clean_logits, corrupt_logits))
    reference = {name: {r: receiver_rows(cache[get_act_name("pattern", r[0])], batch, r[1])[0] for r in receivers}
                 for name, cache in (("clean", clean_cache), ("corrupt", corrupt_cache))}
    clean_values = {layer: clean_cache[get_act_name("v", layer)] for layer in value_layers}
    corrupt_residual = {layer: corrupt_cache[get_act_name("resid_pre", layer)] for layer in first_layers}
    per_forward = replicas_per_forward(batch)
    results = []
    for start in range(0, len(targets), per_forward):
        chunk = targets[start:start + per_forward]
        hooks = PathHooks(model, chunk, writes, len(batch), clean_values)
        first = min(t.layer for t in chunk)
        patterns = {}
        keep = [(get_act_name("pattern", l), keeper(patterns, get_act_name("pattern", l))) for l in sorted({t.layer for t in chunk})]
        with model.hooks(fwd_hooks=hooks.hooks() + keep):
            logits = forward_from(model, corrupt_residual[first].repeat(len(chunk), 1, 1), first)
        outcomes = outcome(replica_scored(logits, batch), batch)
        for replica, (target, result) in enumerate(zip(chunk, outcomes)):
            rows = {r: receiver_rows(patterns[get_act_name("pattern", r[0])], batch, r[1])[replica] for r in target.receivers}
            results.append(path_result(target, result, clean, corrupt, rows, reference))
    return results


def path_result(target: PathTarget, result: Outcome, clean: Outcome, corrupt: Outcome, rows: dict,
              reference: dict) -> PathPatch:
    """`rows`: per receiver, its patched scored rows; `reference`: clean/corrupt rows per receiver."""
    moved = [float(total_variation(rows[r], reference["corrupt"][r])) for r in target.receivers]
    left = sum(float(total_variation(rows[r], reference["clean"][r])) for r in target.receivers)
    gap_tv = sum(float(total_variation(reference["corrupt"][r], reference["clean"][r])) for r in target.receivers)
    return PathPatch(
        sender=names(target.senders),
        positions=target.positions,
        receiver=names(target.receivers),
        component=target.component,
        metric=result.metric,
        recovered=share(result.metric, corrupt.metric, clean.metric),
        restored=result.restored,
        attention_moved=sum(moved) / len(moved),
        attention_recovered=share(left, gap_tv, 0.0),
        clean_values=target.clean_values,
    )


def joint_path_patch(model, batch: Batch, senders, receivers, component: str, positions=None) -> PathPatch:
    """The senders' summed writes at `positions` (None = all) reach only the `component` input of
    every receiver (one layer, later than every sender). Heads as (layer, head) or names ("L0H1")."""
    from probes.ablation import parse_heads

    target = PathTarget(parse_heads(senders), None if positions is None else tuple(positions),
                        parse_heads(receivers), component)
    return path_patch_many(model, batch, [target])[0]


def path_patch(model, batch: Batch, sender, receiver, component: str, positions=None) -> PathPatch:
    """One path: sender (layer, head) at `positions` (None = all) into receiver's `component`."""
    return joint_path_patch(model, batch, [sender], [receiver], component, positions)


def head_pairs(model) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    heads = [(l, h) for l in range(n_layers) for h in range(n_heads)]
    return [(s, r) for s in heads for r in heads if r[0] > s[0]]


def path_sweep(model, batch: Batch) -> list[PathPatch]:
    """Every sender -> later receiver head, Q, K and V, sender patched at all positions."""
    targets = [PathTarget(s, None, r, c) for s, r in head_pairs(model) for c in COMPONENTS]
    return path_patch_many(model, batch, targets)
