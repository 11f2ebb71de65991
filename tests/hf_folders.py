"""Tiny Hugging Face checkpoints built here with random weights (`from_config` + `save_pretrained`),
one per supported family, each with a word-level tokenizer of the IOI task's words saved beside it:
nothing loads from a hub. Also `no_network`, which makes any connection attempt fail the test."""

from __future__ import annotations

import socket
from pathlib import Path

FAMILIES = ("gpt2", "gpt_neox", "llama")


def word_tokenizer(words):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {word: i for i, word in enumerate(["<unk>", *words])}
    inner = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    inner.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=inner, unk_token="<unk>", pad_token="<unk>")


def hf_config(family: str, vocab: int, layers: int = 2, width: int = 64, heads: int = 4):
    from transformers import GPT2Config, GPTNeoXConfig, LlamaConfig

    if family == "gpt2":
        return GPT2Config(vocab_size=vocab, n_positions=32, n_embd=width, n_layer=layers, n_head=heads)
    if family == "gpt_neox":
        return GPTNeoXConfig(
            vocab_size=vocab,
            max_position_embeddings=32,
            hidden_size=width,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=4 * width,
        )
    return LlamaConfig(
        vocab_size=vocab,
        max_position_embeddings=32,
        hidden_size=width,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        intermediate_size=2 * width,
    )


def build_folder(folder: Path, family: str, seed: int = 0) -> Path:
    """A random-weight checkpoint of `family` with the IOI words as its tokenizer's vocabulary."""
    import torch
    from transformers import AutoModelForCausalLM

    from tasks.ioi import IOITask

    words = IOITask().vocabulary()
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(family, len(words) + 1))
    model.save_pretrained(folder)
    word_tokenizer(words).save_pretrained(folder)
    return folder


def no_network(monkeypatch) -> None:
    """Every socket connection raises: a load that reached for the hub fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a test tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


def bypass(point) -> None:
    """Make a hook point fire its hooks on a copy and hand the model the unedited value: hooks see the
    activation, their edits are dropped (what an adapter that recomputes a value after its hook does)."""

    class Bypassed(type(point)):
        def __call__(self, x, *args, **kwargs):
            super().__call__(x.clone(), *args, **kwargs)
            return x

    point.__class__ = Bypassed
