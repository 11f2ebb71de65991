"""Ablation sweeps: each component of a kind ablated in turn and the task re-scored, the rows of
the report's ablation tables. Heads: no heads, each head alone, then each whole layer
(`sweep_targets`). MLPs: each alone (`mlp_ablation_sweep`), the rows the head table gains.

Apart from probes.ablation (what an ablation is and one ablated forward) because the head sweep
replays one clean run (`CleanRun`, `replayed_scores`) rather than running one forward per target:
a layer's output is linear in each head's z, so the blocks before the ablated layer need not run
again. It scores what `probes.ablation.ablate` does for every target (tested); a post-norm model,
which the replay cannot serve, is ablated with hooks.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformer_lens.utilities import get_act_name

from common.stages import timed
from models.bridge import attention_adds_residual, device_of, post_norm
from models.graph import MLP
from models.resume import resumable, resume
from models import Model
from probes.ablation import (
    Ablation,
    AblationResult,
    Reference,
    ablate,
    ablated_scored,
    ablation_result,
    check_method,
    chunked_cache,
    mlp_replacements,
    replacement_z,
)
from tasks.data import Batch
from tasks.evaluate import TOKENS_PER_FORWARD, Scored, logits_at_scored, score_logits


@timed("mlp ablations")
def mlp_ablation_sweep(
    model: Model,
    batch: Batch,
    method: Ablation = Ablation.MEAN,
    seed: int = 0,
    reference: "Batch | Reference | None" = None,
    clean: "CleanRun | None" = None,
) -> list[AblationResult]:
    """Each MLP alone ablated (none for an attention-only model): the rows the head sweep's table
    gains, so it can say whether an MLP computes or only carries. Replayed from one clean run like
    the head sweep (an MLP's output is added to the stream after its block's attention, so only the
    blocks after it run again; equal to ablating it with hooks, tested); a post-norm model, whose
    block normalises after that add, is ablated with hooks."""
    check_method(method, reference)
    batch = batch.to(device_of(model))
    mlps = [] if model.cfg.attn_only else [MLP(layer) for layer in range(model.cfg.n_layers)]
    if post_norm(model) or not mlps:
        return [ablate(model, batch, [mlp], method, seed, reference) for mlp in mlps]
    clean = clean or clean_run(model, batch)
    values = mlp_replacements(model, batch, mlps, method, seed, reference)
    modules, at = resumable(model), (batch.example_index, batch.positions)
    out = []
    for mlp in mlps:
        value = values[get_act_name("mlp_out", mlp.layer)]
        residual = clean.resid_mid[mlp.layer]
        if value is not None:
            residual = residual + value[:, : clean.width]
        with torch.no_grad():
            logits = resume(modules, residual, mlp.layer + 1, at=at)
        out.append(ablation_result(score_logits(logits, batch), batch, [mlp], method))
    return out


def sweep_targets(model: Model) -> list[tuple[tuple[int, int], ...]]:
    """No heads, each head, then each whole layer (skipped when a layer has one head: same thing)."""
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    singles = [((layer, head),) for layer in range(n_layers) for head in range(n_heads)]
    layers = [tuple((layer, head) for head in range(n_heads)) for layer in range(n_layers)]
    return [()] + singles + (layers if n_heads > 1 else [])


@timed("head ablations")
def head_ablation_sweep(
    model: Model,
    batch: Batch,
    method: Ablation = Ablation.MEAN,
    seed: int = 0,
    reference: "Batch | Reference | None" = None,
    clean: "CleanRun | None" = None,
) -> list[AblationResult]:
    """Every target of `sweep_targets`, scored from one clean run replayed (see `replayed_scores`)
    rather than one forward per target. Equal to ablating each target with hooks (tested), which is
    what a post-norm model gets: the replay adds the ablation's change to the stream after the
    layer's attention and runs its MLP from there, where a post-norm block normalises first. Sweeps
    of several methods over one batch can share `clean` (`clean_run(model, batch)`)."""
    check_method(method, reference)
    batch = batch.to(device_of(model))
    targets = sweep_targets(model)
    if post_norm(model):
        scores = [ablated_scored(model, batch, heads, method, seed, reference) for heads in targets]
    else:
        values = replacement_z(model, batch, list(range(model.cfg.n_layers)), method, seed, reference)
        scores = replayed_scores(model, batch, clean or clean_run(model, batch), targets, values)
    return [ablation_result(scored, batch, heads, method) for heads, scored in zip(targets, scores)]


@dataclass(frozen=True)
class CleanRun:
    """The unablated run over a batch's positions up to its last scored one (`width` of them)."""

    logits: torch.Tensor  # [n, width, vocab]
    z: dict[int, torch.Tensor]  # layer -> [n, width, head, d_head]
    resid_mid: dict[int, torch.Tensor]  # layer -> [n, width, d_model]: residual + attention output
    W_O: torch.Tensor  # [layer, head, d_head, d_model]
    observed: dict  # hook name -> [n, width, ...], as the caller asked

    @property
    def width(self) -> int:
        return self.logits.shape[1]


@torch.no_grad()
@timed("clean run")
def clean_run(model: Model, batch: Batch, observe: tuple[str, ...] = ()) -> CleanRun:
    """Positions after the last scored one are left out: attention is causal, so no scored logit
    depends on them, with or without an ablation. `observe`: more hook names to keep from the same
    forward (CleanRun.observed)."""
    batch = batch.to(device_of(model))
    layers = range(model.cfg.n_layers)
    names = [
        n for l in layers for n in (get_act_name("resid_pre", l), get_act_name("attn_out", l), get_act_name("z", l))
    ]
    names = list(dict.fromkeys(names + list(observe)))
    width = int(batch.positions.max()) + 1 if len(batch.positions) else 1
    logits, cache = chunked_cache(model, batch.inputs[:, :width], names, keep_logits=True)
    kept = {l: cache[get_act_name("resid_pre", l)] if attention_adds_residual(model.blocks[l]) else 0 for l in layers}
    return CleanRun(
        logits=logits,
        z={l: cache[get_act_name("z", l)] for l in layers},
        resid_mid={l: kept[l] + cache[get_act_name("attn_out", l)] for l in layers},
        W_O=model.W_O,
        observed={name: cache[name] for name in observe},
    )


@torch.no_grad()
def replayed_scores(model: Model, batch: Batch, clean: CleanRun, targets, values: dict) -> list[Scored]:
    """The scores with each target's heads (all in one layer; () is the clean run) ablated, without
    rerunning what an ablation cannot change. A layer's output is its clean output plus
    (replacement - z) @ W_O of the ablated heads (the output projection is linear in each head's
    z); the blocks before it computed what the clean run did, so only its MLP and the blocks after
    it run again, and after the last attention only at the scored positions (`forward_from`'s
    `at`); positions after the last scored one never run (attention is causal: no scored position
    reads them). Targets of one layer share forwards (their residuals stacked, at most
    TOKENS_PER_FORWARD tokens each). Equal to ablating each target with hooks (tested)."""
    scores = {(): score_logits(logits_at_scored(clean.logits, batch), batch)}
    modules = resumable(model)
    for layer in range(model.cfg.n_layers):
        last = layer == model.cfg.n_layers - 1
        group = [heads for heads in targets if heads and heads[0][0] == layer]
        rows, width = (len(batch.positions), 1) if last else (len(batch), clean.width)
        per_forward = max(1, TOKENS_PER_FORWARD // (rows * width))
        for start in range(0, len(group), per_forward):
            chunk = group[start : start + per_forward]
            stacked = torch.cat([ablated_residual(model, batch, clean, heads, values) for heads in chunk])
            if not model.cfg.attn_only:
                block = modules.blocks[layer]
                mlp, ln2 = block.mlp, block.ln2
                # nn.Module's __getattr__ is typed Tensor | Module; a block's mlp and ln2 are modules.
                assert isinstance(mlp, torch.nn.Module) and isinstance(ln2, torch.nn.Module)
                stacked = stacked + mlp(ln2(stacked))
            if last:
                logits = resume(modules, stacked, layer + 1)[:, 0]
            else:
                copies = torch.arange(len(chunk), device=stacked.device).repeat_interleave(len(batch.positions))
                at = (batch.example_index.repeat(len(chunk)) + copies * len(batch), batch.positions.repeat(len(chunk)))
                logits = resume(modules, stacked, layer + 1, at=at)
            for heads, target_logits in zip(chunk, logits.split(len(batch.positions))):
                scores[heads] = score_logits(target_logits, batch)
    return [scores[heads] for heads in targets]


def ablated_residual(model: Model, batch: Batch, clean: CleanRun, heads, values: dict) -> torch.Tensor:
    """The residual stream after the attention of the heads' layer with `heads` ablated, at the
    clean run's positions, or (the last layer) at the scored positions only, as [scored, 1, d_model]."""
    (layer,) = {l for l, _ in heads}
    indices = [h for _, h in heads]
    z, residual = clean.z[layer][:, :, indices], clean.resid_mid[layer]
    replacement = torch.zeros_like(z) if values[layer] is None else values[layer][:, : clean.width, indices]
    if layer == model.cfg.n_layers - 1:
        scored = (batch.example_index, batch.positions)
        z, replacement, residual = z[scored][:, None], replacement[scored][:, None], residual[scored][:, None]
    return residual + torch.einsum("nphd,hdm->npm", replacement - z, clean.W_O[layer, indices])
