"""TopK sparse dictionaries: an SAE (reads and rebuilds one hook's activations) or a transcoder
(reads an MLP's input and rebuilds its output), trained on activations already in memory.

Why by hand: the two well-kept trainers do not train on arbitrary tensors here. SAELens 6.54.12
(its `SAETrainer`) pins transformer-lens<4 and its import fails on TransformerLens 4.3
(`transformer_lens.HookedTransformer` and `transformer_lens.components` are gone), so it cannot run
beside toylens at all; EleutherAI's sparsify (eai-sparsify 1.3.3) trains only through its
`Trainer`, which hooks a Hugging Face `PreTrainedModel` over a token dataset, not a TL bridge or a
tensor of activations (checked 2026-12). The method is theirs: TopK activation (Gao et al. 2024),
decoder rows kept at unit norm, encoder initialised as the decoder's transpose, decoder bias at the
data mean, AuxK loss on latents that stopped firing; the weights use SAELens's names and shapes
(W_enc [d_in, d_sae], b_enc [d_sae], W_dec [d_sae, d_out], b_dec [d_out]) so `store` writes them as
SAELens does.

Deterministic by seed: initialisation and minibatch order come from one torch.Generator.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from common.cli import UsageError

KINDS = ("sae", "transcoder")
AUX_WEIGHT = 1 / 32  # Gao et al.'s AuxK coefficient


@dataclass(frozen=True)
class DictionaryConfig:
    """What defines one dictionary: which activations it reads and writes, its size and training."""

    kind: str  # "sae": hook_in -> hook_in; "transcoder": an MLP's input hook -> its output hook
    hook_in: str
    hook_out: str
    d_in: int
    d_out: int
    d_sae: int
    k: int
    steps: int = 600
    batch_size: int = 256
    lr: float = 2e-3
    seed: int = 0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise UsageError(f"dictionary kind must be one of {KINDS}, got {self.kind!r}")
        if self.kind == "sae" and (self.hook_in != self.hook_out or self.d_in != self.d_out):
            raise UsageError(f"an SAE rebuilds the activations it reads; got {self.hook_in} -> {self.hook_out}")
        if not 1 <= self.k <= self.d_sae:
            raise UsageError(
                f"k must be from 1 to the dictionary size {self.d_sae}, got k={self.k}; "
                "choose a smaller --k or a larger --sizes"
            )
        for name in ("d_in", "d_out", "d_sae", "steps", "batch_size"):
            if getattr(self, name) < 1:
                raise UsageError(f"dictionary {name} must be positive, got {getattr(self, name)}")

    @property
    def name(self) -> str:
        return f"{self.kind}-d{self.d_sae}-k{self.k}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> DictionaryConfig:
        return cls(**data)


@dataclass(frozen=True)
class Dictionary:
    """Trained weights (SAELens's names) and how well they rebuild the training activations."""

    config: DictionaryConfig
    weights: dict = field(hash=False)  # W_enc, b_enc, W_dec, b_dec
    fvu: float  # fraction of variance unexplained (0 = exact, 1 = the mean)
    dead: float  # share of features that never fire on the training data

    def pre_activations(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weights
        centred = x - w["b_dec"] if self.config.kind == "sae" else x  # SAELens's apply_b_dec_to_input
        return centred @ w["W_enc"] + w["b_enc"]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return topk(self.pre_activations(x), self.config.k)

    def decode(self, acts: torch.Tensor) -> torch.Tensor:
        return acts @ self.weights["W_dec"] + self.weights["b_dec"]


def topk(pre: torch.Tensor, k: int) -> torch.Tensor:
    """The k largest pre-activations per row, ReLU'd (SAELens's TopK); zeros elsewhere."""
    values, indices = pre.topk(k, dim=-1)
    return torch.zeros_like(pre).scatter(-1, indices, values.relu())


def train_dictionary(
    x_in: torch.Tensor, x_out: torch.Tensor, config: DictionaryConfig, progress: bool = True
) -> Dictionary:
    """Train on rows of `x_in` [n, d_in] -> `x_out` [n, d_out] (the same tensor for an SAE)."""
    from tqdm import tqdm

    x_in, x_out = x_in.detach().float(), x_out.detach().float()
    generator = torch.Generator().manual_seed(config.seed)
    params = initial_weights(x_in, x_out, config, generator)
    optimizer = torch.optim.Adam(params.values(), lr=config.lr)
    variance = (x_out - x_out.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-12)
    since_fired = torch.zeros(config.d_sae)
    dead_after = max(10, config.steps // 10)  # steps without firing before AuxK revives a latent
    with torch.enable_grad():
        for _ in tqdm(
            range(config.steps),
            desc=f"dictionary {config.name} {config.hook_in}",
            unit="step",
            disable=not progress,
            leave=False,
        ):
            rows = torch.randint(0, len(x_in), (config.batch_size,), generator=generator)
            loss, fired = step_loss(params, x_in[rows], x_out[rows], config, variance, since_fired > dead_after)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            with torch.no_grad():
                params["W_dec"] /= params["W_dec"].norm(dim=1, keepdim=True).clamp_min(1e-8)
            since_fired = torch.where(fired, torch.zeros_like(since_fired), since_fired + 1)
    weights = {name: tensor.detach().clone() for name, tensor in params.items()}
    return finished(config, weights, x_in, x_out, variance)


def initial_weights(x_in, x_out, config: DictionaryConfig, generator) -> dict:
    w_dec = torch.randn(config.d_sae, config.d_out, generator=generator)
    w_dec /= w_dec.norm(dim=1, keepdim=True)
    # Tied start (the encoder as the decoder's transpose) where the spaces agree; otherwise a scaled
    # random encoder, scaled to the input's spread so pre-activations start comparable.
    w_enc = (
        w_dec.T.clone()
        if config.d_in == config.d_out
        else torch.randn(config.d_in, config.d_sae, generator=generator) / config.d_in**0.5
    )
    params = {"W_enc": w_enc, "b_enc": torch.zeros(config.d_sae), "W_dec": w_dec, "b_dec": x_out.mean(0).clone()}
    return {name: tensor.requires_grad_(True) for name, tensor in params.items()}


def step_loss(params, x_in, x_out, config, variance, dead):
    """(normalised reconstruction loss + AuxK on dead latents, which features fired)."""
    centred = x_in - params["b_dec"] if config.kind == "sae" else x_in
    pre = centred @ params["W_enc"] + params["b_enc"]
    acts = topk(pre, config.k)
    recon = acts @ params["W_dec"] + params["b_dec"]
    loss = (recon - x_out).pow(2).sum(-1).mean() / variance
    if bool(dead.any()):
        # AuxK: the dead latents' own top-k rebuild what the live ones missed (Gao et al. 2024).
        residual = (x_out - recon).detach()
        k_aux = min(int(dead.sum()), 2 * config.k)
        aux = topk(pre.masked_fill(~dead, float("-inf")), k_aux).nan_to_num(0.0) @ params["W_dec"]
        loss = loss + AUX_WEIGHT * (aux - residual).pow(2).sum(-1).mean() / residual.pow(2).sum(-1).mean().clamp_min(
            1e-12
        )
    return loss, (acts > 0).any(0)


def finished(config, weights, x_in, x_out, variance) -> Dictionary:
    draft = Dictionary(config, weights, fvu=float("nan"), dead=float("nan"))
    with torch.no_grad():
        acts = draft.encode(x_in)
        fvu = float((draft.decode(acts) - x_out).pow(2).sum(-1).mean() / variance)
        dead = float(((acts > 0).sum(0) == 0).float().mean())
    return Dictionary(config, weights, fvu=fvu, dead=dead)
