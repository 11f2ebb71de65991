"""MLPs ablated, and where along the residual stream the answer appears.

- MLP ablation: an MLP's output (hook_mlp_out, every position) replaced by its mean over the
  reference's training rows at each position (MEAN) or by zero (ZERO), and the task re-scored
  (probes.ablation_sweep.mlp_ablation_sweep, the same hooks as for heads' z).
- Decodability: a linear probe (multinomial logistic regression, fit on training rows' scored
  positions) for the answer token from the residual stream after the embeddings and after each
  attention and MLP sublayer, scored on held-out rows. 1 = the answer can be read linearly there;
  chance is 1 / the number of answer tokens. Beside it a closed-form ridge probe (probes.ridge_probe,
  its penalty chosen on held-out training rows): no optimiser, so a stage's readability does not
  depend on one; a stage is readable by the better of the two held-out scores.
Why by hand: TL 4.3 ablates through hooks only (no MLP ablation helper) and has no probing
utility; the probe is a few lines of LBFGS on torch, so no scikit-learn dependency.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformer_lens.utilities import get_act_name

from models.bridge import device_of, post_norm
from models import Model
from probes.ablation import Ablation, Reference, chunked_cache
from probes.ablation_sweep import mlp_ablation_sweep
from probes.ridge_probe import fit_ridge
from tasks.data import Batch
from tasks.evaluate import logits_at_scored, score_logits

PROBE_STEPS = 100  # LBFGS iterations of the linear probe
PROBE_DECAY = 1e-3  # L2 penalty on its weights (the residual is 32-256 wide; rows are hundreds)


@dataclass(frozen=True)
class Scores:
    accuracy: float
    logit_diff: float  # mean answer - foil logit (nan without foils)
    n: int  # held-out scored positions


@dataclass(frozen=True)
class MLPAblation:
    layer: int
    method: Ablation
    scores: Scores


@dataclass(frozen=True)
class Decodable:
    after: str  # "embeddings", "attention 0", "MLP 0", ...
    hook: str
    accuracy: float  # the logistic probe's held-out accuracy
    train_rows: int
    heldout_rows: int
    classes: int  # answer tokens the probe tells apart (chance = 1 / classes)
    ridge: float = float("nan")  # the closed-form ridge probe's held-out accuracy
    ridge_penalty: float = float("nan")  # its lambda, chosen on held-out training rows

    @property
    def best(self) -> float:
        """The better of the two probes' held-out accuracies."""
        return max(self.accuracy, self.ridge) if self.ridge == self.ridge else self.accuracy


@dataclass(frozen=True)
class Sublayers:
    intact: Scores
    mlps: tuple[MLPAblation, ...]
    profile: tuple[Decodable, ...]


@torch.no_grad()
def scores(model: Model, batch: Batch, hooks: list) -> Scores:
    logits = model.run_with_hooks(batch.inputs, fwd_hooks=hooks)
    scored = score_logits(logits_at_scored(logits, batch), batch)
    diff = scored.logit_diff
    return Scores(scored.accuracy, diff.nanmean().item() if len(diff) else float("nan"), len(scored.predicted))


def stages(model: Model) -> list[tuple[str, str]]:
    """(what the residual has been through, its hook) in order. Between a block's attention and its
    MLP the stream is at hook_resid_mid, which TL 4's block bridge aliases to ln2's input: a post-norm
    block calls ln2 after its MLP, so there the stream after attention is the MLP's input."""
    out = [("embeddings", get_act_name("resid_pre", 0))]
    for layer in range(model.cfg.n_layers):
        if model.cfg.attn_only:
            out.append((f"attention {layer}", get_act_name("resid_post", layer)))
        else:
            middle = f"blocks.{layer}.mlp.hook_in" if post_norm(model) else get_act_name("resid_mid", layer)
            out += [(f"attention {layer}", middle), (f"MLP {layer}", get_act_name("resid_post", layer))]
    return out


def scored_residuals(
    model: Model, batch: Batch, hooks: list[str], cached: dict | None = None
) -> dict[str, torch.Tensor]:
    """The stream at `hooks` at the batch's scored positions; from `cached` (hook name -> [n, pos,
    ...] over this batch's rows, at least to its last scored position) where it holds them all."""
    cache = cached if cached is not None and all(name in cached for name in hooks) else None
    if cache is None:
        _, cache = chunked_cache(model, batch.inputs, hooks)
    return {name: cache[name][batch.example_index, batch.positions].float() for name in hooks}


def fit_probe(x: torch.Tensor, y: torch.Tensor, classes: int) -> torch.nn.Linear:
    # A fixed start makes the probe repeatable without reseeding the caller's global generator.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        probe = torch.nn.Linear(x.shape[1], classes, device=x.device)
    optimiser = torch.optim.LBFGS(probe.parameters(), max_iter=PROBE_STEPS, line_search_fn="strong_wolfe")

    def closure():
        optimiser.zero_grad()
        loss = torch.nn.functional.cross_entropy(probe(x), y) + PROBE_DECAY * probe.weight.square().sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimiser.step(closure)
    return probe


def decodability(
    model: Model, train: Batch, heldout: Batch, cached: tuple[dict | None, dict | None] = (None, None)
) -> tuple[Decodable, ...]:
    """`cached`: the stages' activations over train and held-out rows, where the caller has them
    from a forward of its own (scored_residuals)."""
    train, heldout = train.to(device_of(model)), heldout.to(device_of(model))
    named = stages(model)
    hooks = [hook for _, hook in named]
    tokens = sorted(set(train.answers.tolist()))
    index = {t: i for i, t in enumerate(tokens)}
    y_train = torch.tensor([index[t] for t in train.answers.tolist()], device=train.answers.device)
    # A held-out answer the training rows never had is one the probe cannot name: it counts as wrong.
    y_heldout = torch.tensor([index.get(t, -1) for t in heldout.answers.tolist()], device=heldout.answers.device)
    fit_on, scored_on = (scored_residuals(model, rows, hooks, c) for rows, c in zip((train, heldout), cached))
    out = []
    for after, hook in named:
        mean, scale = fit_on[hook].mean(0), fit_on[hook].std(0).clamp(min=1e-6)
        probe = fit_probe((fit_on[hook] - mean) / scale, y_train, len(tokens))
        with torch.no_grad():
            predicted = probe((scored_on[hook] - mean) / scale).argmax(-1)
            ridge = fit_ridge((fit_on[hook] - mean) / scale, y_train, len(tokens))
            by_ridge = ridge.predict((scored_on[hook] - mean) / scale)
        accuracy = (predicted == y_heldout).float().mean().item()
        ridge_accuracy = (by_ridge == y_heldout).float().mean().item()
        out.append(
            Decodable(after, hook, accuracy, len(y_train), len(y_heldout), len(tokens), ridge_accuracy, ridge.penalty)
        )
    return tuple(out)


def sublayers(
    model: Model,
    train: Batch,
    heldout: Batch,
    reference: Reference,
    mlp_ablations: dict | None = None,
    cached: tuple[dict | None, dict | None] = (None, None),
) -> Sublayers:
    """`train`: the rows the probe is fit on; `heldout`: the rows ablations and the probe are scored on;
    `mlp_ablations`: Ablation -> probes.ablation_sweep.mlp_ablation_sweep on `heldout` with `reference`
    (measured when not given; the report passes the ones its ablation table shows); `cached`: the
    `stages` activations over train and held-out rows, where the caller has them (decodability)."""
    methods = (Ablation.MEAN, Ablation.ZERO)
    found = mlp_ablations or {m: mlp_ablation_sweep(model, heldout, m, reference=reference) for m in methods}
    layers = [] if model.cfg.attn_only else range(model.cfg.n_layers)
    mlps = tuple(
        MLPAblation(layer, m, Scores(found[m][layer].accuracy, found[m][layer].logit_diff, found[m][layer].n))
        for layer in layers
        for m in methods
    )
    return Sublayers(scores(model, heldout.to(device_of(model)), []), mlps, decodability(model, train, heldout, cached))
