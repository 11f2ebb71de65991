"""The baseline for benchmarks only: the same architecture as a toylens model, written in plain
PyTorch (fused scaled_dot_product_attention, no TransformerLens). Never used by the toolkit."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from models import ModelSpec


class Block(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        d = spec.d_model
        self.spec = spec
        self.ln1 = nn.LayerNorm(d) if spec.norm else nn.Identity()
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        if spec.mlp:
            self.ln2 = nn.LayerNorm(d) if spec.norm else nn.Identity()
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        batch, length, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        heads = lambda t: t.view(batch, length, self.spec.n_heads, -1).transpose(1, 2)  # noqa: E731
        attended = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.out(attended.transpose(1, 2).reshape(batch, length, d))
        if self.spec.mlp:
            x = x + self.mlp(self.ln2(x))
        return x


class PlainGPT(nn.Module):
    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.embed = nn.Embedding(spec.d_vocab, spec.d_model)
        self.pos = nn.Embedding(spec.n_ctx, spec.d_model)
        self.blocks = nn.ModuleList(Block(spec) for _ in range(spec.n_layers))
        self.ln = nn.LayerNorm(spec.d_model) if spec.norm else nn.Identity()
        self.unembed = nn.Linear(spec.d_model, spec.d_vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.unembed(self.ln(x))
