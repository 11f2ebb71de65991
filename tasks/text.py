"""Text: next-token prediction on any UTF-8 file, every position scored; held-out perplexity.

The corpus is cut, at line breaks, into three stretches in reading order: the first
(1 - heldout_share) of its characters train, then validation, then held-out (half of heldout_share
each), so the held-out text is a later passage the model never read. A byte-level BPE tokenizer
(HF `tokenizers`, the source chapter's vocabulary of 1024) is trained on the training stretch only;
each stretch is then tokenized and cut into non-overlapping windows of context + 1 tokens (a
trailing partial window is dropped). Every position of a window is scored, so the loss at the
scored positions is the language-modelling loss and exp(held-out loss) is held-out perplexity.

The default corpus is the English documentation every CPython install carries
(`pydoc_data.topics`: the language reference topics behind `help()`, ~465 kB), joined in topic-name
order; it differs slightly between Python versions, and the tokenizer, so the vocabulary, with it.
"""

from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

from models import ModelSpec, UsageError
from tasks.base import Example, Task

DEFAULT_CORPUS = "pydoc_data.topics"
MAX_CORPUS_BYTES = 64 * 2**20  # a toy model's corpus; the tokenizer trains in seconds below this
MIN_CONTEXT, MAX_CONTEXT = 2, 1024


@dataclass(frozen=True)
class TextParams:
    corpus: str = ""  # a UTF-8 text file; "" = Python's documentation (pydoc_data.topics)
    vocab: int = 1024  # BPE vocabulary size (at most; a small corpus may yield fewer merges)
    context: int = 128  # tokens the model reads per window
    heldout_share: float = 0.1  # the end of the text, half validation and half held-out


class TextTask(Task):
    """Language modelling on a text file, byte-level BPE; held-out perplexity."""

    name = "text"
    Params = TextParams
    # Windows are cut from separate stretches of the text; a stretch that repeats itself verbatim
    # (a licence header, say) may yield the same window twice, which is still unseen text.
    disjoint_splits = False

    def __init__(self, params=None):
        super().__init__(params)
        p = self.params
        if not isinstance(p.vocab, int) or not 257 <= p.vocab <= 65_536:
            raise UsageError(
                f"vocab must be an integer from 257 (the 256 bytes and one merge) to 65536, got {p.vocab!r}"
            )
        if not isinstance(p.context, int) or not MIN_CONTEXT <= p.context <= MAX_CONTEXT:
            raise UsageError(f"context must be an integer from {MIN_CONTEXT} to {MAX_CONTEXT}, got {p.context!r}")
        if not isinstance(p.heldout_share, (int, float)) or not 0.02 <= p.heldout_share <= 0.5:
            raise UsageError(f"heldout_share must lie in [0.02, 0.5], got {p.heldout_share!r}; try 0.1")
        corpus_text(p.corpus)  # a bad file is refused now, with one line, not deep in training

    @property
    def version(self) -> str:
        """The data cache's generator key: the corpus content, so an edited file is re-tokenized."""
        return "text-1-" + hashlib.sha256(corpus_text(self.params.corpus).encode()).hexdigest()[:16]

    def corpus_name(self) -> str:
        return self.params.corpus or f"{DEFAULT_CORPUS} (Python's documentation)"

    def stretches(self) -> dict[str, str]:
        return split_text(corpus_text(self.params.corpus), self.params.heldout_share)

    def tokenizer(self):
        return trained_tokenizer(self.stretches()["train"], self.params.vocab)

    def vocabulary(self) -> list[str]:
        by_id = self.tokenizer().get_vocab()
        return sorted(by_id, key=by_id.get)

    def decode(self, tokens) -> str:
        return self.tokenizer().decode([int(t) for t in tokens])

    def generate(self, seed: int) -> dict[str, list[Example]]:
        # The text decides the data; the seed only decides the model's start and batch order.
        tokenizer, size = self.tokenizer(), self.params.context + 1
        splits = {}
        for split, text in self.stretches().items():
            ids = tokenizer.encode(text).ids
            if len(ids) < size:
                raise UsageError(
                    f"the {split} part of {self.corpus_name()} is {len(ids)} tokens, fewer than one "
                    f"window of context + 1 = {size}; use a longer file, a smaller --context or a "
                    "larger --heldout-share"
                )
            splits[split] = [
                Example(tokens=tuple(ids[start : start + size]), positions=tuple(range(size - 1)), group="text")
                for start in range(0, len(ids) - size + 1, size)
            ]
        return splits

    def default_models(self) -> dict[str, ModelSpec]:
        return {
            "block-1": ModelSpec(n_layers=1, d_model=128, n_heads=4),
            "block-2": ModelSpec(n_layers=2, d_model=128, n_heads=4),
        }

    def default_training(self) -> dict:
        # The source's recipe (3000 AdamW steps, lr 1e-3, batch 64). Validation accuracy on text
        # never nears stop_accuracy, so a run stops at the budget or when validation stalls.
        return {"max_steps": 3000, "batch_size": 64, "lr": 1e-3, "eval_every": 100, "plateau_steps": 500}


def perplexity(loss: float) -> float:
    """exp(mean next-token cross-entropy in nats): 1 = always certain and right; the vocabulary size
    = uniform guessing."""
    return math.exp(loss)


@functools.lru_cache(maxsize=4)
def corpus_text(corpus: str) -> str:
    if not corpus:
        from pydoc_data.topics import topics

        return "\n\n".join(topics[name] for name in sorted(topics))
    path = Path(corpus)
    if not path.is_file():
        raise UsageError(
            f"--corpus {corpus}: no such file; name a UTF-8 text file, or leave --corpus out for {DEFAULT_CORPUS}"
        )
    size = path.stat().st_size
    if size > MAX_CORPUS_BYTES:
        raise UsageError(
            f"--corpus {corpus} is {size / 2**20:.0f} MiB, more than toylens's limit of "
            f"{MAX_CORPUS_BYTES // 2**20} MiB for a toy model's corpus; use an excerpt"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(
            f"--corpus {corpus} is not UTF-8 text (byte {error.start}); convert it, e.g. iconv -t utf-8"
        ) from None
    except OSError as error:
        raise UsageError(f"--corpus {corpus} cannot be read ({error.strerror}); check its permissions") from None
    if not text.strip():
        raise UsageError(f"--corpus {corpus} holds no text; name a file with some")
    return text


def split_text(text: str, heldout_share: float) -> dict[str, str]:
    """Train, validation and held-out stretches in reading order, each cut at a line break when
    one is near (else mid-line)."""

    def cut(share: float) -> int:
        at = int(len(text) * share)
        newline = text.find("\n", at)
        return newline + 1 if 0 <= newline < at + 2_000 else at

    first, second = cut(1 - heldout_share), cut(1 - heldout_share / 2)
    return {"train": text[:first], "validation": text[first:second], "heldout": text[second:]}


@functools.lru_cache(maxsize=4)
def trained_tokenizer(text: str, vocab: int):
    """A byte-level BPE tokenizer of at most `vocab` tokens trained on `text`: the 256 byte symbols
    first, so any UTF-8 text encodes, then merges. HF `tokenizers`, as the source chapter used."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(text.splitlines(keepends=True), trainer)
    return tokenizer
