"""Activation patching over a task's counterfactual pairs (clean = tokens, corrupt = counterfactual).

Denoising, as `transformer_lens.patching`: run the corrupt input, restore one clean activation,
measure the metric at the scored positions. Written here rather than looping over TL's
`get_act_patch_*` because those run one forward per patched index; we stack many interventions as
replicas of the batch in one forward (tests check the numbers equal TL's).

The metric at a scored position is the answer-minus-foil logit where the task names a foil, else
the answer's log-probability; "restored" is the share of scored positions where the clean answer
wins again: over the foil where there is one, else as the top prediction. Patching runs on the
model's device; the grids it returns are on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformer_lens.utilities import get_act_name

from common.cli import UsageError
from common.stages import timed
from models.bridge import device_of, post_norm
from models.resume import forward_from
from models import Model
from tasks.base import NO_FOIL
from tasks.data import Batch

# Tokens in one patched forward (replicas of a batch), a quarter of scoring's TOKENS_PER_FORWARD
# (tasks.evaluate): a patched forward also holds its hooks' copies of the stream, and an MLP's hidden
# activations at 8192 tokens (16 MiB at d_mlp 512) spill a core's 1 MiB L2 and, with two workers,
# the shared L3. benchmarks/patch_chunk.py times both sizes against each other on a run's oracle.
PATCH_TOKENS = 2048


def replicas_per_forward(batch: Batch) -> int:
    """Replicas of `batch` that share one forward (PATCH_TOKENS tokens at most, one replica at least)."""
    return max(1, PATCH_TOKENS // batch.inputs.numel())


def scored_metric(scored_logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """[..., k] metric from [..., k, vocab] logits at the scored positions."""
    answers = batch.answers.expand(*scored_logits.shape[:-1])
    answer = scored_logits.gather(-1, answers[..., None])[..., 0]
    foil = scored_logits.gather(-1, batch.foils.clamp(min=0).expand_as(answers)[..., None])[..., 0]
    log_prob = answer - scored_logits.logsumexp(-1)
    return torch.where(batch.foils != NO_FOIL, answer - foil, log_prob)


def metric_name(batch: Batch) -> str:
    """What scored_metric measures: a task may give foils at some scored positions only."""
    has_foil = batch.foils != NO_FOIL
    if bool(has_foil.all()):
        return "answer - foil logit"
    return (
        "answer - foil logit where a foil is given, else answer log-prob" if bool(has_foil.any()) else "answer log-prob"
    )


def replica_scored(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """[replicas, k, vocab] from the logits of `replicas` stacked copies of the batch."""
    n = len(batch)
    logits = logits.view(-1, n, *logits.shape[1:])
    return logits[:, batch.example_index, batch.positions]


def scored_logits(model: Model, residual, start: int, batch: Batch, replicas: int) -> torch.Tensor:
    """[replicas, k, vocab]: forward_from on `replicas` stacked copies of `batch` ([replicas * n,
    pos, d] entering block `start`), its last block's MLP and the unembedding run at the k scored
    positions of each copy alone (models.resume's `at`)."""
    offsets = torch.arange(replicas, device=batch.example_index.device)[:, None] * len(batch)
    at = (offsets + batch.example_index[None]).flatten(), batch.positions.repeat(replicas)
    return forward_from(model, residual, start, at).view(replicas, len(batch.positions), -1)


def require_pairs(batch: Batch) -> torch.Tensor:
    """The batch's counterfactual partners; a one-line refusal when it has none."""
    if batch.counterfactual is None:
        raise UsageError(
            "the task declares no counterfactual pairs, so patching has nothing to "
            "compare; give each Example a counterfactual"
        )
    return batch.counterfactual


def corrupt_inputs(batch: Batch) -> torch.Tensor:
    return require_pairs(batch)[:, :-1]


@dataclass(frozen=True)
class Outcome:
    """Mean metric and restored share of one forward over the pairs."""

    metric: float
    restored: float


def outcome(scored_logits: torch.Tensor, batch: Batch) -> list[Outcome]:
    """One Outcome per replica from [replicas, k, vocab]."""
    metric = scored_metric(scored_logits, batch)
    top = scored_logits.argmax(-1) == batch.answers
    restored = torch.where(batch.foils != NO_FOIL, metric > 0, top).float().mean(-1)
    return [Outcome(m, r) for m, r in zip(metric.mean(-1).tolist(), restored.tolist())]


@torch.no_grad()
def run_outcome(model: Model, batch: Batch, tokens: torch.Tensor, hooks=()) -> Outcome:
    batch = batch.to(device_of(model))
    logits = model.run_with_hooks(tokens.to(batch.tokens.device), fwd_hooks=list(hooks))
    return outcome(replica_scored(logits, batch), batch)[0]


@torch.no_grad()
def clean_activations(model: Model, batch: Batch, names: list[str]) -> dict:
    _, cache = model.run_with_cache(batch.inputs, names_filter=names)
    return {name: cache[name] for name in names}


@torch.no_grad()
def patch_many(model: Model, batch: Batch, activation: str, targets: list[tuple]) -> list[Outcome]:
    """Restore clean `activation` ("z" or "resid_pre") at each target (layer, position|None,
    head|None; None = all) in the corrupt run; replicas of the batch carry many targets per forward.
    A position may be a [n] tensor, one position per example (a role's, tasks.data.Batch.roles).
    Blocks before a forward's first patched layer compute what the corrupt run did, so each forward
    resumes there from the corrupt run's residual, its last block's MLP and the unembedding at the
    scored positions alone (`scored_logits`; a post-norm model runs its last block whole: that
    shortcut adds the MLP's output the pre-norm way)."""
    batch = batch.to(device_of(model))
    layers = sorted({t[0] for t in targets})
    clean = clean_activations(model, batch, [get_act_name(activation, layer) for layer in layers])
    _, corrupt = model.run_with_cache(
        corrupt_inputs(batch), names_filter=[get_act_name("resid_pre", layer) for layer in layers]
    )
    per_forward = replicas_per_forward(batch)
    order = sorted(range(len(targets)), key=lambda i: targets[i][0])
    results: dict[int, Outcome] = {}
    for first in range(0, len(order), per_forward):
        indices = order[first : first + per_forward]
        chunk = [targets[i] for i in indices]
        start = chunk[0][0]
        hooks = [
            (get_act_name(activation, layer), patch_hook(clean, activation, layer, chunk, len(batch)))
            for layer in sorted({t[0] for t in chunk})
        ]
        residual = corrupt[get_act_name("resid_pre", start)].repeat(len(chunk), 1, 1)
        with model.hooks(fwd_hooks=hooks):
            if post_norm(model):
                logits = replica_scored(forward_from(model, residual, start), batch)
            else:
                logits = scored_logits(model, residual, start, batch, len(chunk))
        results.update(zip(indices, outcome(logits, batch)))
    return [results[i] for i in range(len(targets))]


def patch_hook(clean: dict, activation: str, layer: int, chunk: list[tuple], n: int):
    """The hook restoring each replica's target of `layer` from the clean run (patch_many)."""

    def patch(act, hook):
        act = act.clone()
        view = act.view(len(chunk), n, *act.shape[1:])
        source = clean[get_act_name(activation, layer)]
        for replica, (target_layer, position, *head) in enumerate(chunk):
            if target_layer != layer:
                continue
            index: tuple = (
                (torch.arange(n, device=act.device), position.to(act.device))
                if isinstance(position, torch.Tensor)
                else (slice(None), slice(None) if position is None else position)
            )
            if head and head[0] is not None:
                index += (head[0],)
            view[(replica,) + index] = source[index]
        return act

    return patch


@dataclass(frozen=True)
class ActivationPatching:
    metric: str
    pairs: int
    clean: Outcome
    corrupt: Outcome
    head_out: torch.Tensor  # [layer, pos, head] metric with that head's output restored there
    head_out_restored: torch.Tensor
    head_all: torch.Tensor  # [layer, head] output restored at every position
    head_all_restored: torch.Tensor
    resid_pre: torch.Tensor  # [layer, pos] residual stream restored before the block
    resid_pre_restored: torch.Tensor

    def recovered(self, values):
        """Share of the clean - corrupt gap a patch closes (1 = clean, 0 = corrupt)."""
        from common.stats import share

        return share(values, self.corrupt.metric, self.clean.metric)

    def restored_share(self, values):
        """Share of answers a patch restores on the same scale: 0 = the corrupt run's own rate (a
        patch that changes nothing), 1 = the clean run's."""
        from common.stats import share

        return share(values, self.corrupt.restored, self.clean.restored)


def grid(outcomes: list[Outcome], shape) -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.tensor([o.metric for o in outcomes], device="cpu").view(shape),
        torch.tensor([o.restored for o in outcomes], device="cpu").view(shape),
    )


def live_positions(batch: Batch) -> list[int]:
    """Positions where a clean activation can differ from the corrupt one and still reach a scored
    position: from the first token the pair differs in to the last scored position. Patching
    anywhere else leaves the corrupt run exactly as it is, so those forwards are skipped."""
    differs = (batch.inputs != corrupt_inputs(batch)).any(0).nonzero()
    if len(differs) == 0:
        return []
    return list(range(int(differs[0]), int(batch.positions.max()) + 1))


def patch_grid(
    model: Model, batch: Batch, activation: str, targets: list[tuple], matters, corrupt: Outcome
) -> list[Outcome]:
    """patch_many over the targets where `matters(target)`; the others leave every scored logit as
    in the corrupt run, so they get the corrupt outcome they would measure, without a forward."""
    run = [t for t in targets if matters(t)]
    measured = iter(patch_many(model, batch, activation, run))
    return [next(measured) if matters(t) else corrupt for t in targets]


@timed("activation patching")
def activation_patching(model: Model, batch: Batch) -> ActivationPatching:
    """Every head's output at every position, every head at all positions, the residual stream
    per layer and position, each restored from clean into corrupt on its own."""
    require_pairs(batch)
    batch = batch.to(device_of(model))
    n_layers, n_heads, width = model.cfg.n_layers, model.cfg.n_heads, batch.inputs.shape[1]
    corrupt = run_outcome(model, batch, corrupt_inputs(batch))
    live = set(live_positions(batch))
    # A last-layer head's output at position p reaches only position p's logits (the MLP, final
    # norm and unembedding act per position), so off the scored positions it changes nothing.
    last_layer_reach = live & set(batch.positions.tolist())

    def z_matters(target) -> bool:
        layer, position, _ = target
        return position is None or position in (last_layer_reach if layer == n_layers - 1 else live)

    def resid_matters(target) -> bool:
        return target[1] is None or target[1] in live

    by_pos = [(l, p, h) for l in range(n_layers) for p in range(width) for h in range(n_heads)]
    all_pos = [(l, None, h) for l in range(n_layers) for h in range(n_heads)]
    resid = [(l, p) for l in range(n_layers) for p in range(width)]
    head_out, head_out_restored = grid(
        patch_grid(model, batch, "z", by_pos, z_matters, corrupt), (n_layers, width, n_heads)
    )
    head_all, head_all_restored = grid(patch_many(model, batch, "z", all_pos), (n_layers, n_heads))
    resid_pre, resid_restored = grid(
        patch_grid(model, batch, "resid_pre", resid, resid_matters, corrupt), (n_layers, width)
    )
    return ActivationPatching(
        metric=metric_name(batch),
        pairs=len(batch),
        clean=run_outcome(model, batch, batch.inputs),
        corrupt=corrupt,
        head_out=head_out,
        head_out_restored=head_out_restored,
        head_all=head_all,
        head_all_restored=head_all_restored,
        resid_pre=resid_pre,
        resid_pre_restored=resid_restored,
    )
