"""One frozen dataclass describes a model; `build_model` turns it into a TransformerLens bridge.

Variants the bridge config cannot express are realised here and nowhere else, so a model loaded
from a checkpoint is built by the same function and behaves exactly like the trained one:
- uniform attention: W_Q and b_Q are zeroed and frozen, so every score is exactly 0 and the causal
  softmax is the plain prefix average (row t puts 1/(t+1) on 0..t) under any input or hook;
- no positions: boot_native refuses "none" (and None silently means learned), so W_pos is zeroed
  and frozen;
- no score scaling: the native attention ignores use_attn_scale=False (it still divides by
  sqrt(d_head)), so the divisor is set to 1 on each attention module;
- no attention ("none": each position sees only its own token): every attention weight and bias
  (Q, K, V, O) is zeroed and frozen, so the attention output is exactly 0 and the block is the
  residual stream (plus the MLP, when present);
- sinusoidal positions: W_pos is set to the fixed sinusoid table and frozen;
- ALiBi: boot_native refuses "alibi", so W_pos is zeroed and frozen and each attention module's
  rotary slot gets `models.variants.AlibiBias`, which adds -m_h * (i - j) to the scores;
- no residual around attention: the native block's class becomes `models.variants.ReplacingBlock`,
  whose attention output replaces the stream instead of being added to it;
- post-norm (LN(x + f(x)), the original Transformer's order): the native block's class becomes
  `models.variants.PostNormBlock`, which normalises after each residual add instead of before each
  sublayer (same parameters, so the state dict is that of the pre-norm model).
Fields added after the first release default to the old behaviour, and `from_dict` fills such a
field with its default when a config lacks it, so runs written before it existed load as trained.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import StrEnum

from common.cli import UsageError
from common.jsonfiles import short
from models.bridge import Model, native, native_attention, use_fused_layer_norm


class Attention(StrEnum):
    SOFTMAX = "softmax"  # learned query-key scores
    UNIFORM = "uniform"  # every score 0: the causal prefix average
    NONE = "none"  # each position sees only its own token


class Positions(StrEnum):
    LEARNED = "learned"
    ROTARY = "rotary"
    NONE = "none"
    SINUSOIDAL = "sinusoidal"
    ALIBI = "alibi"


ROTARY_BASE = 10000  # rotary frequencies base ** (-2i / d_head); TransformerLens's default, stated for exports


class Norm(StrEnum):
    LN = "LN"  # LayerNorm; a spec without normalisation has norm None


class NormPlace(StrEnum):
    PRE = "pre"  # x + f(LN(x))
    POST = "post"  # LN(x + f(x))


# The spec's enum fields. A spec is built from JSON and command lines as well as from code, so each
# value is turned into its enum member on construction, and refused there if it names none.
CHOICES = {"attention": Attention, "positions": Positions, "norm_place": NormPlace}
# Far beyond a toy model, small enough that a typo (or an edited config.json) fails at once
# instead of in the allocator.
LIMITS = {"n_layers": 256, "d_model": 16384, "n_heads": 1024, "n_ctx": 65536, "d_vocab": 1_000_000}
MEMORY_LIMIT = 16 * 2**30


@dataclass(frozen=True)
class ModelSpec:
    n_layers: int = 1
    d_model: int = 128
    n_heads: int = 4
    mlp: bool = True
    attention: Attention = Attention.SOFTMAX
    positions: Positions = Positions.LEARNED
    norm: Norm | None = Norm.LN
    scale_scores: bool = True
    residual: bool = True  # False: attention's output replaces the stream instead of adding to it
    norm_place: NormPlace = NormPlace.PRE
    n_ctx: int = 32
    d_vocab: int = 0

    def __post_init__(self):
        for field, kind in CHOICES.items():
            object.__setattr__(self, field, choice(kind, field, getattr(self, field)))
        if self.norm is not None:
            object.__setattr__(self, "norm", choice(Norm, "norm", self.norm, "must be 'LN' or null"))

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def validate(self) -> "ModelSpec":
        for field, value in {
            "n_layers": self.n_layers,
            "d_model": self.d_model,
            "n_heads": self.n_heads,
            "n_ctx": self.n_ctx,
            "d_vocab": self.d_vocab,
        }.items():
            if type(value) is not int or not 0 < value <= LIMITS[field]:
                raise UsageError(f"model {field} must be an integer from 1 to {LIMITS[field]}, got {short(value)}")
        for field in ("mlp", "scale_scores"):
            if type(getattr(self, field)) is not bool:
                raise UsageError(f"model {field} must be true or false, got {short(getattr(self, field))}")
        if self.d_model % self.n_heads:
            raise UsageError(
                f"n_heads={self.n_heads} does not divide d_model={self.d_model}; "
                "pick a head count that divides the width"
            )
        if not isinstance(self.residual, bool):
            raise UsageError(f"residual must be true or false, got {short(self.residual)}")
        if self.attention == Attention.UNIFORM and self.positions == Positions.ALIBI:
            raise UsageError(
                "uniform attention cannot take ALiBi positions (the bias would re-weight the "
                "average); use positions learned, sinusoidal or none"
            )
        if self.attention == Attention.NONE and not self.residual:
            raise UsageError("attention 'none' with residual off leaves nothing of the input; keep residual on")
        if self.norm_place == NormPlace.POST and (self.norm is None or not self.residual):
            raise UsageError("norm_place 'post' normalises after each residual add: it needs norm 'LN' and residual on")
        return self

    def parameter_count(self) -> int:
        d, layers = self.d_model, self.n_layers
        per_layer = 4 * d * d + 4 * d + (8 * d * d + 5 * d if self.mlp else 0) + 4 * d
        positions = 0 if self.positions == Positions.ROTARY else self.n_ctx * d  # rotary has no position table
        return layers * per_layer + 2 * self.d_vocab * d + positions + self.d_vocab + 2 * d

    def memory_bytes(self, batch: int = 64) -> int:
        """Rough float32 bytes to train at `batch`: weights, gradients and two AdamW moments, plus
        activations (residual-sized tensors and attention patterns, kept for the backward pass)."""
        weights = 16 * self.parameter_count()
        residual = batch * self.n_ctx * self.d_model * self.n_layers * (12 + (16 if self.mlp else 0))
        patterns = 3 * batch * self.n_heads * self.n_ctx * self.n_ctx * self.n_layers
        logits = 3 * batch * self.n_ctx * self.d_vocab
        return 4 * (residual + patterns + logits) + weights

    def check_memory(self, batch: int = 64) -> "ModelSpec":
        """Refuse before allocating when the model could not fit a toy-model budget."""
        need = self.memory_bytes(batch)
        if need > MEMORY_LIMIT:
            raise UsageError(
                f"model n_layers={self.n_layers} d_model={self.d_model} n_ctx={self.n_ctx} "
                f"d_vocab={self.d_vocab} would need ~{need / 2**30:.1f} GiB at batch {batch}, "
                f"more than toylens's limit of {MEMORY_LIMIT / 2**30:.0f} GiB for toy models; "
                "use a smaller model, context or batch"
            )
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, fields: dict) -> "ModelSpec":
        if not isinstance(fields, dict):
            raise UsageError(f"model spec must be an object of ModelSpec fields, got {type(fields).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise UsageError(
                f"model spec has unknown field(s) {short(unknown)}; "
                "it was written by another toylens version or edited by hand"
            )
        # A field absent from `fields` was added after the run was written: its default is the
        # behaviour that run was trained with, so old runs load unchanged.
        return cls(**fields).validate()


def choice(kind: type[StrEnum], field: str, value, rule: str = "") -> StrEnum:
    """`value` as a member of `kind`, or a UsageError naming the field and its choices."""
    try:
        return kind(value)
    except (ValueError, TypeError):
        rule = rule or f"must be one of {', '.join(kind)}"
        raise UsageError(f"{field} {rule}, got {short(value)}") from None


def stored_spec(fields, where) -> ModelSpec:
    """The spec a stored file records (a run's config.json): untrusted, so any refusal is one
    line naming the file, the field and the fix."""
    try:
        return ModelSpec.from_dict(fields)
    except UsageError as error:
        raise UsageError(f"{where}: spec: {error}; restore the file or retrain the run") from None


def build_model(spec: ModelSpec, seed: int = 0) -> Model:
    """A randomly initialised `TransformerBridge` realising `spec`, in eval mode."""
    from transformer_lens import TransformerBridge, TransformerBridgeConfig

    spec.validate()  # memory is checked where weights are allocated for real (training, loading), not here: probes.chapter.params builds on the meta device
    config = TransformerBridgeConfig(
        d_model=spec.d_model,
        d_head=spec.d_head,
        n_heads=spec.n_heads,
        n_layers=spec.n_layers,
        n_ctx=spec.n_ctx,
        d_vocab=spec.d_vocab,
        d_mlp=4 * spec.d_model,
        act_fn="gelu",
        attn_only=not spec.mlp,
        normalization_type=spec.norm,
        positional_embedding_type="rotary" if spec.positions == Positions.ROTARY else "standard",
        rotary_base=ROTARY_BASE,
        seed=seed,
    )
    model = TransformerBridge.boot_native(config)
    use_fused_layer_norm(model)
    apply_variant(model, spec)
    model.eval()
    return model


def apply_variant(model, spec: ModelSpec) -> None:
    """Zero-and-freeze the weights and set the constants that realise the spec's variant."""
    import torch

    from models.variants import AlibiBias, PostNormBlock, ReplacingBlock, sinusoid_table

    with torch.no_grad():
        if spec.positions in (Positions.NONE, Positions.ALIBI):
            freeze_at_zero(model.pos_embed.weight)
        if spec.positions == Positions.SINUSOIDAL:
            model.pos_embed.weight.copy_(sinusoid_table(spec.n_ctx, spec.d_model))
            model.pos_embed.weight.requires_grad_(False)
        for block in model.blocks:
            attention = native_attention(block)
            if spec.attention == Attention.UNIFORM:
                freeze_at_zero(block.attn.q.weight)
                freeze_at_zero(block.attn.q.bias)
            if spec.attention == Attention.NONE:
                for projection in (block.attn.q, block.attn.k, block.attn.v, block.attn.o):
                    freeze_at_zero(projection.weight)
                    freeze_at_zero(projection.bias)
            if not spec.scale_scores:
                attention.scale = 1.0
            if spec.positions == Positions.ALIBI:
                attention.rotary = AlibiBias(spec.n_heads, attention.scale)
            if not spec.residual:
                native(block).__class__ = ReplacingBlock
            if spec.norm_place == NormPlace.POST:
                native(block).__class__ = PostNormBlock


def freeze_at_zero(parameter) -> None:
    parameter.zero_()
    parameter.requires_grad_(False)
