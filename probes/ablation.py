"""Component ablation: replace chosen heads' outputs (`hook_z`) and MLPs' outputs (`hook_mlp_out`),
at every position, and re-score the task.

Methods (`Ablation`): ZERO (z = 0), MEAN (z = its mean over a reference batch at the same position) and
RESAMPLE (z from another, randomly drawn reference example at the same position). Mean and
resample statistics come from `reference` (a Batch, or a `Reference` holding its
activations), which they require: the report uses the run's training rows
(`training_reference(run)`), and a notebook that passes the same gets the report's numbers. Mean is the default method, as in `probes.heads.head_report` and the report.
Every head, layer and MLP ablated in turn (the report's ablation tables): probes.ablation_sweep.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import torch
from transformer_lens.utilities import get_act_name

from common.cli import UsageError
from common.stages import timed
from models.bridge import device_of
from models.components import Head
from models.graph import MLP
from models import Model
from tasks.data import Batch
from tasks.evaluate import TOKENS_PER_FORWARD, Scored, logits_at_scored, score_logits


class Ablation(StrEnum):
    """What an ablated component carries instead of its clean output: the counterfactual run's
    (interchange ablation), its mean over a reference batch at each position, zero, or a randomly
    drawn reference example's (resample). Head ablation (here) takes ZERO, MEAN and RESAMPLE; the
    edge graph (probes.circuits.ablations) COUNTERFACTUAL, MEAN and ZERO. A StrEnum, so report.json
    and the report's tables write the plain names."""

    COUNTERFACTUAL = "counterfactual"
    MEAN = "mean"
    ZERO = "zero"
    RESAMPLE = "resample"


ABLATION_METHODS = (Ablation.ZERO, Ablation.MEAN, Ablation.RESAMPLE)  # what head ablation takes


def ablation_named(name: str, choices: tuple[Ablation, ...] = tuple(Ablation)) -> Ablation:
    """The Ablation a CLI flag or notebook parameter names, one of `choices`."""
    method = next((a for a in choices if a.value == name), None)
    if method is None:
        raise UsageError(f"ablation method must be one of {', '.join(choices)}, got {name!r}")
    return method


def parse_heads(heads) -> tuple[Head, ...]:
    """Distinct `Head`s, in order, from Heads, (layer, head) pairs or names like "L0H1"."""
    return tuple(dict.fromkeys(Head.of(head) for head in heads))


def parse_components(components) -> tuple[tuple[Head, ...], tuple[MLP, ...]]:
    """(heads, MLPs), each distinct and in order, from Heads, (layer, head) pairs, names like "L0H1",
    MLPs or names like "MLP0"."""
    mlps = [c for c in components if isinstance(c, MLP) or (isinstance(c, str) and c.startswith("MLP"))]
    return parse_heads(c for c in components if c not in mlps), tuple(dict.fromkeys(map(mlp_of, mlps)))


def mlp_of(value) -> MLP:
    if isinstance(value, MLP):
        return value
    if not value[3:].isdigit():
        raise UsageError(f"MLP name {value!r} is not MLP<layer>, e.g. MLP0")
    return MLP(int(value[3:]))


def check_heads(model: Model, heads, mlps=()) -> None:
    for layer, head in heads:
        if not (0 <= layer < model.cfg.n_layers and 0 <= head < model.cfg.n_heads):
            raise UsageError(
                f"head {Head(layer, head)} does not exist: the model has "
                f"{model.cfg.n_layers} layers of {model.cfg.n_heads} heads"
            )
    for mlp in mlps:
        if model.cfg.attn_only or not 0 <= mlp.layer < model.cfg.n_layers:
            has = "no MLPs (attention only)" if model.cfg.attn_only else f"MLP0 to MLP{model.cfg.n_layers - 1}"
            raise UsageError(f"{mlp} does not exist: the model has {has}")


@dataclass(frozen=True)
class AblationResult:
    heads: tuple[Head, ...]  # () with no mlps is the unablated baseline
    method: Ablation
    accuracy: float
    logit_diff: float  # mean answer - foil logit over scored positions with a foil
    foil_rate: float
    by_group: dict[str, dict]  # group -> {"n", "accuracy", "logit_diff"}
    n: int = 0  # scored positions measured
    top_token: int = -1  # the most often predicted token ...
    top_share: float = 0.0  # ... and its share of the scored positions (a constant output: ~1)
    mlps: tuple[MLP, ...] = ()  # MLPs ablated with the heads

    @property
    def label(self) -> str:
        return ", ".join(map(str, (*self.heads, *self.mlps))) or "none"


def fit_width(values: torch.Tensor, width: int, fill: torch.Tensor) -> torch.Tensor:
    """Cut or extend dim 1 (positions) to `width`, extending with `fill`."""
    if values.shape[1] >= width:
        return values[:, :width]
    extra = fill.expand(values.shape[0], width - values.shape[1], *values.shape[2:])
    return torch.cat([values, extra], dim=1)


def chunked_cache(model: Model, tokens: torch.Tensor, names: list[str], keep_logits: bool = False):
    """(logits or None, {name: activation}) of run_with_cache over whole rows, at most
    TOKENS_PER_FORWARD tokens a forward: one forward over 512 reference rows holds all their
    attention scores at once (for a plugin's 2000-token sequences, tens of GB)."""
    step = max(1, TOKENS_PER_FORWARD // max(tokens.shape[1], 1))
    logits, caches = [], []
    for start in range(0, len(tokens), step):
        chunk_logits, cache = model.run_with_cache(tokens[start : start + step], names_filter=names)
        logits += [chunk_logits] if keep_logits else []
        caches.append(cache)
    return (
        torch.cat(logits) if keep_logits else None,
        {name: torch.cat([cache[name] for cache in caches]) for name in names},
    )


@torch.no_grad()
def cached_z(model: Model, tokens: torch.Tensor, layers) -> dict[int, torch.Tensor]:
    names = [get_act_name("z", layer) for layer in layers]
    _, cache = chunked_cache(model, tokens, names)
    return {layer: cache[name] for layer, name in zip(layers, names)}


@dataclass(frozen=True)
class Reference:
    """Reference examples with every layer's z from one forward: a report ablates with the same
    reference many times (three sweeps, the circuit search, the circuit itself, head roles). From
    the same forward, the other residual writes (hook name -> activation: the embeddings'
    resid_pre 0, each MLP's mlp_out) that the edge graph's mean ablation averages
    (probes.circuits.ablations)."""

    batch: Batch
    z: dict[int, torch.Tensor]
    writes: dict = field(default_factory=dict)
    observed: dict = field(default_factory=dict)  # hook name -> activation, as the caller asked

    def __len__(self) -> int:
        return len(self.batch)


@timed("reference rows")
def reference_activations(model: Model, batch: Batch, observe: tuple[str, ...] = ()) -> Reference:
    """`observe`: more hook names to keep from the same forward (Reference.observed)."""
    batch = batch.to(device_of(model))
    layers = range(model.cfg.n_layers)
    writes = [get_act_name("resid_pre", 0)] + (
        [] if model.cfg.attn_only else [get_act_name("mlp_out", l) for l in layers]
    )
    names = list(dict.fromkeys([get_act_name("z", l) for l in layers] + writes + list(observe)))
    _, cache = chunked_cache(model, batch.inputs, names)
    return Reference(
        batch,
        {l: cache[get_act_name("z", l)] for l in layers},
        {name: cache[name] for name in writes},
        {name: cache[name] for name in observe},
    )


def replacement_z(
    model: Model, batch: Batch, layers, method: Ablation, seed: int, reference: "Batch | Reference | None"
) -> dict:
    """Per layer, the [n, pos, head, d_head] values the ablated heads' z is replaced with."""
    width = batch.inputs.shape[1]
    if method is Ablation.ZERO or not layers:
        return {layer: None for layer in layers}
    assert reference is not None, "check_method refuses a mean or resample ablation without reference="
    if isinstance(reference, Reference):
        z, reference = reference.z, reference.batch
    else:
        reference = reference.to(device_of(model))
        z = cached_z(model, reference.inputs, layers)
    if method is Ablation.MEAN:
        return {layer: position_mean(z[layer], reference, width).expand(len(batch), -1, -1, -1) for layer in layers}
    rows = resample_rows(batch, reference, seed)
    return {layer: fit_width(z[layer][rows], width, real_mean(z[layer], reference)[None, None]) for layer in layers}


def position_mean(values: torch.Tensor, reference: Batch, width: int) -> torch.Tensor:
    """[width, ...]: `values` ([reference rows, pos, ...]) averaged at each position over the
    reference's real positions."""
    valid = real_mask(values, reference)
    total = (values * valid).sum(0)
    # Positions no reference row reaches fall back to the mean over all real positions.
    overall = total.sum(0) / valid.sum()
    per_position = total / valid.sum(0).clamp(min=1)
    per_position = torch.where(valid.sum(0) > 0, per_position, overall)
    return fit_width(per_position[None], width, overall[None, None])[0]


def real_mask(values: torch.Tensor, reference: Batch) -> torch.Tensor:
    """1 at the reference's real positions, 0 at padding, shaped to broadcast over `values`."""
    return reference.real_positions().float().view(*values.shape[:2], *[1] * (values.dim() - 2))


def real_mean(values: torch.Tensor, reference: Batch) -> torch.Tensor:
    """`values` ([reference rows, pos, ...]) averaged over every real position of the reference."""
    valid = real_mask(values, reference)
    return (values * valid).sum((0, 1)) / valid.sum()


def resample_rows(batch: Batch, reference: Batch, seed: int) -> torch.Tensor:
    """For each row, a random reference row at least as long (so no real position reads padding).
    Drawn on the CPU: the same rows whichever device the model is on."""
    generator = torch.Generator("cpu").manual_seed(seed)
    ref_lengths = reference.lengths.cpu()
    rows = []
    for length in batch.lengths.tolist():
        candidates = torch.nonzero(ref_lengths >= length)[:, 0]
        if len(candidates) == 0:
            candidates = torch.arange(len(reference), device="cpu")
        rows.append(int(candidates[torch.randint(len(candidates), (1,), generator=generator, device="cpu")]))
    return torch.tensor(rows, dtype=torch.long, device=batch.lengths.device)


def check_method(method: Ablation, reference) -> None:
    if not isinstance(method, Ablation) or method not in ABLATION_METHODS:
        raise UsageError(
            f"head ablation method must be an Ablation, one of {', '.join(ABLATION_METHODS)} "
            f"(a name converts with probes.ablation.ablation_named), got {method!r}"
        )
    if method is not Ablation.ZERO and reference is None:
        raise UsageError(
            f"{method} ablation needs reference=, the examples whose activations replace "
            "the heads' output: pass probes.ablation.training_reference(run) for the training "
            "rows the report uses, or the batch itself"
        )


def training_reference(run, rows: int | None = None) -> Batch:
    """The run's training rows that the report's mean and resample ablations average over
    (ReportSettings.reference_rows of them, evenly spread; all when there are fewer)."""
    from probes.settings import DEFAULT
    from tasks.data import spread_subset

    return spread_subset(run.batches()["train"], rows or DEFAULT.reference_rows)


def ablation_hooks(
    model: Model,
    batch: Batch,
    components,
    method: Ablation = Ablation.MEAN,
    seed: int = 0,
    reference: "Batch | Reference | None" = None,
) -> list:
    """Forward hooks that ablate `components` (heads and MLPs, see `parse_components`) for a run over
    `batch.inputs` (or any tensor of its shape)."""
    heads, mlps = parse_components(components)
    check_heads(model, heads, mlps)
    check_method(method, reference)
    batch = batch.to(device_of(model))
    layers = sorted({layer for layer, _ in heads})
    values = replacement_z(model, batch, layers, method, seed, reference)

    def hook(layer, indices):
        def replace(z, hook):
            z = z.clone()
            z[:, :, indices] = 0.0 if values[layer] is None else values[layer][:, :, indices]
            return z

        return replace

    head_hooks = [(get_act_name("z", layer), hook(layer, [h for l, h in heads if l == layer])) for layer in layers]
    return head_hooks + mlp_ablation_hooks(model, batch, mlps, method, seed, reference)


def mlp_ablation_hooks(model: Model, batch: Batch, mlps, method: Ablation, seed: int, reference) -> list:
    """Hooks that replace each MLP's output (hook_mlp_out) as `replacement_z` does a head's z."""
    values = mlp_replacements(model, batch, mlps, method, seed, reference)
    return [
        (name, lambda out, hook: torch.zeros_like(out))
        if value is None
        else (name, lambda out, hook, value=value: value[:, : out.shape[1]].expand_as(out).clone())
        for name, value in values.items()
    ]


def mlp_replacements(model: Model, batch: Batch, mlps, method: Ablation, seed: int, reference) -> dict:
    """hook_mlp_out name -> what replaces that MLP's output over `batch` ([1 or n, pos, d_model]; None:
    zero), as `replacement_z` does a head's z."""
    names = [get_act_name("mlp_out", mlp.layer) for mlp in mlps]
    if method is Ablation.ZERO or not names:
        return {name: None for name in names}
    if isinstance(reference, Reference) and all(name in reference.writes for name in names):
        writes, reference = reference.writes, reference.batch
    else:
        reference = reference.batch if isinstance(reference, Reference) else reference.to(device_of(model))
        writes = chunked_cache(model, reference.inputs, names)[1]
    width = batch.inputs.shape[1]
    if method is Ablation.MEAN:
        return {name: position_mean(writes[name], reference, width)[None] for name in names}
    rows = resample_rows(batch, reference, seed)
    return {
        name: fit_width(writes[name][rows], width, real_mean(writes[name], reference)[None, None]) for name in names
    }


@torch.no_grad()
def ablated_scored(
    model: Model,
    batch: Batch,
    heads,
    method: Ablation = Ablation.MEAN,
    seed: int = 0,
    reference: "Batch | Reference | None" = None,
) -> Scored:
    batch = batch.to(device_of(model))
    hooks = ablation_hooks(model, batch, heads, method, seed, reference)
    logits = model.run_with_hooks(batch.inputs, fwd_hooks=hooks)
    return score_logits(logits_at_scored(logits, batch), batch)


def ablation_result(scored: Scored, batch: Batch, components, method: Ablation) -> AblationResult:
    row_groups = [batch.groups[i] for i in scored.example_index.tolist()]
    by_group = {}
    for group in sorted(set(row_groups)):
        mask = torch.tensor([g == group for g in row_groups], device=scored.correct.device)
        by_group[group] = {
            "n": int(mask.sum()),
            "accuracy": scored.correct[mask].float().mean().item(),
            "logit_diff": nanmean(scored.logit_diff[mask]),
        }
    heads, mlps = parse_components(components)
    return AblationResult(
        heads=heads,
        method=method,
        accuracy=scored.accuracy,
        logit_diff=nanmean(scored.logit_diff),
        foil_rate=scored.foil_rate,
        by_group=by_group,
        n=len(scored.predicted),
        top_token=scored.top_prediction[0],
        top_share=scored.top_prediction[1],
        mlps=mlps,
    )


def nanmean(values: torch.Tensor) -> float:
    return values.nanmean().item() if len(values) else float("nan")


def ablate(
    model: Model,
    batch: Batch,
    heads,
    method: Ablation = Ablation.MEAN,
    seed: int = 0,
    reference: "Batch | Reference | None" = None,
) -> AblationResult:
    """Score `batch` with `heads` (heads "L0H1" or (0, 1), MLPs "MLP0" or models.graph.MLP) ablated at
    every position; mean and resample take their values from `reference` (see `training_reference`)."""
    scored = ablated_scored(model, batch, heads, method, seed, reference)
    return ablation_result(scored, batch, heads, method)
