"""Head roles in sequences with repeated tokens: previous-token, duplicate-token, induction
(prefix-matching) and copying scores, each ranking checked by ablation.

Attention scores reuse TransformerLens's head-detector patterns (`head_detector.get_*_detection_pattern`)
but average only over the query rows where the pattern has a target: TL's `detect_head` divides by
every row (a perfect induction head scores ~0.5 on a half-repeated sequence) and needs a tokenizer
(`to_tokens`), which our word-level models do not have. Copying is the eigenvalue positivity of the
full OV circuit W_E W_OV W_U (Elhage et al. 2021) and the head's direct effect on the answer's logit.

No attention threshold decides a role (previous-token heads were diffuse yet necessary, measured):
heads are ranked by score, and ablating them, one at a time and the top-ranked ones together,
shows whether the ranking is the one that matters for the task's answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.bridge import device_of
from models.components import Head
from models import Model
from probes.ablation import Ablation, ablate
from probes.attention import patterns
from tasks.data import Batch

ATTENTION_ROLES = ("previous_token", "duplicate_token", "induction")
ROLES = ATTENTION_ROLES + ("copying", "direct_logit")
# A role's heads: the fewest top-ranked heads of the top head's layer whose joint ablation costs this
# share of what ablating the whole layer costs.
LAYER_SHARE = 0.9


@dataclass(frozen=True)
class HeadScores:
    """[layer][head] scores. Attention scores are mean attention on the role's target over the query
    rows that have one; copying lies in [-1, 1]; direct_logit is in logits (answer minus mean)."""

    previous_token: list[list[float]]
    duplicate_token: list[list[float]]
    induction: list[list[float]]
    copying: list[list[float]]
    direct_logit: list[list[float]]

    def of(self, role: str) -> list[list[float]]:
        return getattr(self, role)


def detection_patterns(inputs: torch.Tensor, lengths: torch.Tensor) -> dict[str, torch.Tensor]:
    """Per role, [n, pos, pos] 0/1 targets built by TL's head detector on each sequence's real
    tokens (padding would count as duplicates of each other). On the CPU, with `patterns`."""
    from transformer_lens import head_detector as hd

    builders = {
        "previous_token": hd.get_previous_token_head_detection_pattern,
        "duplicate_token": hd.get_duplicate_token_head_detection_pattern,
        "induction": hd.get_induction_head_detection_pattern,
    }
    n, width = inputs.shape
    # TL's builders make their patterns on torch's default device, whatever a notebook set it to.
    with torch.device("cpu"):
        out = {role: torch.zeros(n, width, width) for role in builders}
        for row, length in enumerate((lengths - 1).tolist()):
            tokens = inputs[row, :length][None]
            for role, build in builders.items():
                out[role][row, :length, :length] = build(tokens)
    return out


@torch.no_grad()
def attention_scores(model: Model, batch: Batch) -> dict[str, torch.Tensor]:
    """Per attention role, [layer, head] mean attention on the target over rows that have one."""
    return {role: scores for role, (scores, _) in attention_spread(model, batch).items()}


@torch.no_grad()
def attention_spread(
    model: Model, batch: Batch, pattern: torch.Tensor | None = None
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per attention role, (attention_scores' [layer, head] mean, [examples, layer, head] each
    example's own mean over its rows that have a target, for the examples with one): how much the
    mean would move with other examples. `pattern`: probes.attention.patterns of the batch, when
    the caller has it."""
    batch = batch.to("cpu")
    pattern = patterns(model, batch.inputs) if pattern is None else pattern  # [n, layer, head, q, k]
    scores = {}
    for role, target in detection_patterns(batch.inputs, batch.lengths).items():
        rows = (target.sum(-1) > 0).sum(-1)  # [n]
        # The pooled mean keeps its own contraction rather than a sum of `each`: the stored detector
        # scores stay bitwise what they were (summing per-example sums rounds differently).
        mean = torch.einsum("nlhqk,nqk->lh", pattern, target) / rows.sum().clamp(min=1)
        kept = rows > 0
        each = torch.einsum("nlhqk,nqk->nlh", pattern[kept], target[kept]) / rows[kept][:, None, None]
        scores[role] = mean, each
    return scores


@torch.no_grad()
def copying_scores(model: Model) -> torch.Tensor:
    """[layer, head] sum(eigenvalues) / sum(|eigenvalues|) of W_E W_OV W_U: 1 for a head whose
    output raises the logit of the token it attends to, -1 for one that suppresses it."""
    eigenvalues = (model.W_E @ model.OV @ model.W_U).eigenvalues  # [layer, head, d_head]
    return eigenvalues.sum(-1).real / eigenvalues.abs().sum(-1).clamp(min=1e-12)


@torch.no_grad()
def direct_logit_effects(model: Model, batch: Batch) -> torch.Tensor:
    """[layer, head] mean direct contribution of each head's output to the answer logit (minus the
    mean logit) at the scored positions, through the final LayerNorm's cached scale if any."""
    batch = batch.to(device_of(model))
    _, cache = model.run_with_cache(batch.inputs)
    stack = cache.stack_head_results(layer=-1, apply_ln=True)  # [layer*head, n, pos, d_model]
    at_scored = stack[:, batch.example_index, batch.positions]  # [layer*head, k, d_model]
    W_U = model.W_U
    directions = (W_U - W_U.mean(-1, keepdim=True))[:, batch.answers]  # [d_model, k]
    effect = (at_scored * directions.T[None]).sum(-1).mean(-1)
    return effect.view(model.cfg.n_layers, model.cfg.n_heads)


def head_scores(model: Model, batch: Batch) -> HeadScores:
    attention = attention_scores(model, batch)
    return HeadScores(
        **{role: attention[role].tolist() for role in ATTENTION_ROLES},
        copying=copying_scores(model).tolist(),
        direct_logit=direct_logit_effects(model, batch).tolist(),
    )


@dataclass(frozen=True)
class RoleEvidence:
    """A role's ranking and what ablating the ranked heads does to accuracy at the scored positions."""

    role: str
    ranking: list[Head]  # every head, highest score first
    scores: dict[Head, float]
    layer: int  # the top-ranked head's layer
    cumulative: list[float]  # accuracy with that layer's top-1, top-2, ... heads ablated
    layer_ablated: float  # accuracy with the whole layer ablated
    heads: list[Head]  # fewest top-ranked heads reaching LAYER_SHARE of the layer's cost
    top_is_most_harmful: bool  # the top head's ablation costs the most of any head in its layer


@dataclass(frozen=True)
class HeadReport:
    method: Ablation
    baseline_accuracy: float
    ablated_accuracy: dict[Head, float]  # each head ablated alone
    scores: HeadScores
    roles: dict[str, RoleEvidence]


def ranked(scores: list[list[float]]) -> list[Head]:
    heads = [Head(layer, head) for layer, row in enumerate(scores) for head in range(len(row))]
    return sorted(heads, key=lambda h: -scores[h.layer][h.head])


def role_evidence(
    model: Model,
    batch: Batch,
    role: str,
    scores: HeadScores,
    baseline: float,
    single: dict[Head, float],
    method: Ablation,
    reference: Batch | None,
) -> RoleEvidence:
    order = ranked(scores.of(role))
    layer = order[0].layer
    in_layer = [h for h in order if h.layer == layer]
    cumulative = [
        ablate(model, batch, in_layer[:k], method, reference=reference).accuracy for k in range(1, len(in_layer))
    ]
    layer_ablated = ablate(model, batch, in_layer, method, reference=reference).accuracy
    cumulative.append(layer_ablated)
    cost = baseline - layer_ablated
    needed = next(
        (k for k, accuracy in enumerate(cumulative, 1) if cost > 0 and baseline - accuracy >= LAYER_SHARE * cost), 0
    )
    harm = {h: baseline - single[h] for h in in_layer}
    return RoleEvidence(
        role=role,
        ranking=order,
        scores={h: scores.of(role)[h.layer][h.head] for h in order},
        layer=layer,
        cumulative=cumulative,
        layer_ablated=layer_ablated,
        heads=in_layer[:needed],
        top_is_most_harmful=harm[order[0]] >= max(harm.values()) and cost > 0,
    )


def head_report(
    model: Model, batch: Batch, method: Ablation = Ablation.MEAN, reference: Batch | None = None
) -> HeadReport:
    """Scores of every head for every role, each ranking checked by `method` ablation (mean and
    resample over `reference`, e.g. probes.ablation.training_reference(run))."""
    scores = head_scores(model, batch)
    baseline = ablate(model, batch, (), method, reference=reference).accuracy
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    single = {
        head: ablate(model, batch, [head], method, reference=reference).accuracy
        for head in (Head(l, h) for l in range(n_layers) for h in range(n_heads))
    }
    roles = {role: role_evidence(model, batch, role, scores, baseline, single, method, reference) for role in ROLES}
    return HeadReport(method, baseline, single, scores, roles)


def induction_share(batch: Batch) -> float:
    """Share of scored positions whose answer is the one token that followed earlier copies of the
    current token: the data property that makes previous-token and induction heads worth ranking."""
    hits = 0
    for row, position, answer in zip(batch.example_index.tolist(), batch.positions.tolist(), batch.answers.tolist()):
        tokens = batch.tokens[row, : position + 1].tolist()
        successors = {tokens[i + 1] for i in range(position) if tokens[i] == tokens[position]}
        hits += successors == {answer}
    return hits / max(len(batch.answers), 1)
