"""The hook preflight: before anything is measured on a model, check that its hooks intervene.

A probe's patch is an edit at a hook; on a model whose hook fires but whose edit is dropped (a
bypassed hook point, an adapter that recomputes the value after the hook), every patching number
would be 0 and read as "this component does nothing". So, on one short input:
- each hook the circuit report uses fires (it is captured by `run_with_cache`);
- an edit there changes the logits (the activation plus noise of its own scale);
- writing the clean value back gives the clean logits bitwise (the hook path itself is exact);
- per-head hooks exist: `hook_z` (and q, k, v where edges are measured) has a head axis of n_heads
  (k and v: n_key_value_heads under grouped-query attention), and editing the LAST head alone
  changes the logits (a slice that edits nothing for heads 1 and up is caught);
- with the HF model the bridge wraps, the bridge's logits equal the HF model's (eager attention)
  within `TOLERANCE` of the logits' scale.
What fails is named in one line (`Preflight.refusal`); `require` refuses to go on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dataclasses
import time
from dataclasses import dataclass

from common.cli import UsageError

if TYPE_CHECKING:
    from models.bridge import Model

TOLERANCE = 1e-4  # |bridge - HF| logits, relative to max(1, max |logit|); measured <= 3e-7 on float32
NOISE_SEED = 0
PER_HEAD = ("hook_z", "hook_q", "hook_k", "hook_v")  # [batch, pos, head, d_head]: edits by head


@dataclass(frozen=True)
class Check:
    name: str  # what was checked, e.g. "blocks.3.attn.hook_z: edit changes logits"
    passed: bool
    detail: str  # the number it rests on


@dataclass(frozen=True)
class Preflight:
    checks: tuple[Check, ...]
    seconds: float
    forwards: int

    @property
    def passed(self) -> bool:
        return all(check.passed for check in self.checks)

    def failures(self) -> list[Check]:
        return [check for check in self.checks if not check.passed]

    def refusal(self) -> str:
        failed = self.failures()
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        return (
            f"preflight failed: {failed[0].name} ({failed[0].detail}){more}; nothing is measured on a model "
            "whose hooks do not intervene"
        )


def report_hooks(model: Model, edges: bool = False) -> list[str]:
    """The hooks a circuit measurement edits or reads on any bridge: each block's residual input, its
    heads' outputs (per head) and its MLP's output; with `edges`, also what the edge oracle edits (each
    head's query, key and value, each MLP's input, the residual entering the final norm and the
    unembedding's input). probes.circuits.scaled says which a model's measurement uses."""
    names = []
    for layer in range(model.cfg.n_layers):
        block = f"blocks.{layer}."
        names += [block + "hook_resid_pre", block + "attn.hook_z"]
        if edges:
            names += [block + "attn.hook_q", block + "attn.hook_k", block + "attn.hook_v"]
        if not model.cfg.attn_only:
            names += [block + "mlp.hook_in", block + "hook_mlp_out"] if edges else [block + "hook_mlp_out"]
    return names + (["ln_final.hook_in", "unembed.hook_in"] if edges else [])


def preflight(model: Model, tokens, hf_model=None, names: list[str] | None = None) -> Preflight:
    """Every check of the module docstring on `tokens` ([batch, pos] ids), at the hooks `names`
    (default: `report_hooks(model)`)."""
    import torch

    began, forwards = time.perf_counter(), 0
    names = report_hooks(model) if names is None else names
    with torch.no_grad():
        clean, cache = model.run_with_cache(tokens, names_filter=names)
        forwards += 1
        checks = [
            Check(f"{name}: fires", name in cache, "captured" if name in cache else "never fired") for name in names
        ]
        generator = torch.Generator(device="cpu").manual_seed(NOISE_SEED)
        for name in (n for n in names if n in cache):
            value = cache[name]
            noise = torch.randn(value.shape, generator=generator).to(value.device) * (value.std() + 1e-3)
            checks.append(changes(model, tokens, clean, name, lambda act, hook, v=value, n=noise: v + n))
            checks.append(restores(model, tokens, clean, name, value))
            forwards += 2
            if name.endswith(PER_HEAD):
                checks += per_head(model, tokens, clean, name, value, noise)
                forwards += 1
        if hf_model is not None:
            checks.append(same_as_hf(clean, hf_model(tokens).logits))
            forwards += 1
    return Preflight(tuple(checks), time.perf_counter() - began, forwards)


def changes(model: Model, tokens, clean, name: str, edit) -> Check:
    moved = float((model.run_with_hooks(tokens, fwd_hooks=[(name, edit)]) - clean).abs().max())
    return Check(f"{name}: an edit changes the logits", moved > 0, f"max |change| {moved:.3g}")


def restores(model: Model, tokens, clean, name: str, value) -> Check:
    import torch

    again = model.run_with_hooks(tokens, fwd_hooks=[(name, lambda act, hook: value.clone())])
    same = torch.equal(again, clean)
    detail = "bitwise equal" if same else f"max |difference| {float((again - clean).abs().max()):.3g}"
    return Check(f"{name}: the clean value written back restores the logits", same, detail)


def per_head(model: Model, tokens, clean, name: str, value, noise) -> list[Check]:
    from models.graph import port_heads

    heads = port_heads(model.cfg, name.rsplit("hook_", 1)[-1])
    if value.ndim != 4 or value.shape[2] != heads:
        return [Check(f"{name}: per-head axis", False, f"shape {tuple(value.shape)}, no axis of {heads} heads")]

    def last_head(act, hook):
        act = act.clone()
        act[:, :, heads - 1] = act[:, :, heads - 1] + noise[:, :, heads - 1]
        return act

    moved = changes(model, tokens, clean, name, last_head)
    return [dataclasses.replace(moved, name=f"{name}: an edit of head {heads - 1} alone changes the logits")]


def same_as_hf(bridge_logits, hf_logits) -> Check:
    scale = max(1.0, float(hf_logits.abs().max()))
    difference = float((bridge_logits - hf_logits).abs().max())
    return Check(
        "bridge logits equal the HF model's (eager attention)",
        difference <= TOLERANCE * scale,
        f"max |difference| {difference:.3g}, tolerance {TOLERANCE:g} x {scale:.3g}",
    )


def require(result: Preflight) -> Preflight:
    if not result.passed:
        raise UsageError(result.refusal())
    return result
