"""Tasks that speak text: a plugin states its examples as strings, and the same task runs on toylens's
tiny models (a word-level vocabulary of the task's own words) and on a loaded checkpoint (that
model's own tokenizer). Tokenising happens here, at the edge of tasks/, and nowhere above it.

A `TemplateTask` implements `text_examples(seed)`: per split, `TextExample`s whose prompt is a
sequence of words (read left to right; the answer follows the last word) with a foil and a
counterfactual prompt of as many words. `generate` encodes them with the task's own vocabulary (one
id per word, for training); `tokenised(task, seed, tokenizer)` encodes them with an outside
tokenizer, each word read mid-sentence (after a space), and refuses a tokenizer that does not
encode every word as exactly one token (then positions, foils and counterfactual partners would not
line up).
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

from models import UsageError
from tasks.base import SPLITS, Example, Task


@dataclass(frozen=True)
class TextExample:
    words: tuple[str, ...]  # the prompt; the scored position is its last word
    answer: str
    foil: str
    counterfactual: tuple[str, ...] = ()  # as many words as `words` (empty: none)
    group: str = ""

    def all_words(self) -> tuple[str, ...]:
        return (*self.words, self.answer, self.foil, *self.counterfactual)


class TemplateTask(Task):
    """A task whose examples are strings; subclasses implement `text_examples` and `default_models`."""

    @abstractmethod
    def text_examples(self, seed: int) -> dict[str, list[TextExample]]:
        """TextExamples for each of SPLITS, a deterministic function of (params, seed)."""

    def words(self) -> list[str]:
        """Every word any example uses, in a fixed order (the vocabulary of a tiny model)."""
        return sorted({word for examples in self.text_examples(0).values() for e in examples for word in e.all_words()})

    def vocabulary(self) -> list[str]:
        return self.words()

    def generate(self, seed: int) -> dict[str, list[Example]]:
        ids = {word: i for i, word in enumerate(self.vocabulary())}
        return encode(self.text_examples(seed), ids)


def encode(splits: dict[str, list[TextExample]], ids: dict[str, int]) -> dict[str, list[Example]]:
    """Examples whose token ids are `ids[word]`: the answer follows the prompt, scored at its last word."""

    def example(e: TextExample) -> Example:
        tokens = tuple(ids[w] for w in (*e.words, e.answer))
        partner = tuple(ids[w] for w in (*e.counterfactual, e.answer)) if e.counterfactual else ()
        return Example(tokens, (len(e.words) - 1,), (ids[e.foil],), e.group, partner)

    return {split: [example(e) for e in splits[split]] for split in SPLITS}


def single_token_ids(tokenizer, words, where: str) -> dict[str, int]:
    """Each word's one token id, read mid-sentence (after a space; a word-level tokenizer that keeps
    no spaces encodes the bare word), or a refusal naming the first word that is not one token of
    its own (several tokens, or the unknown-word token)."""
    ids = {}
    for word in words:
        pieces = tokenizer.encode(" " + word, add_special_tokens=False)
        if len(pieces) != 1:
            pieces = tokenizer.encode(word, add_special_tokens=False)
        unknown = pieces == [tokenizer.unk_token_id] and word != tokenizer.unk_token
        if len(pieces) != 1 or unknown:
            said = "an unknown-word token" if unknown else f"{len(pieces)} tokens"
            raise UsageError(
                f"the model's tokenizer encodes {where}'s word {word!r} as {said}, not one token of its own; "
                "use a task whose words are single tokens for this model's tokenizer"
            )
        ids[word] = pieces[0]
    return ids


def tokenised(task: Task, seed: int, tokenizer) -> dict[str, list[Example]]:
    """The task's examples encoded by an outside model's tokenizer (see the module docstring)."""
    if not isinstance(task, TemplateTask):
        raise UsageError(
            f"task {task.name!r} states its examples as token ids of its own vocabulary, not as text; "
            "an outside model needs a text task (e.g. ioi)"
        )
    splits = task.text_examples(seed)
    words = sorted({w for examples in splits.values() for e in examples for w in e.all_words()})
    return encode(splits, single_token_ids(tokenizer, words, f"task {task.name!r}"))


def heldout_batch(task: Task, seed: int, tokenizer=None, pairs: int = 64):
    """At most `pairs` held-out examples (evenly spread) with their counterfactual partners as a Batch,
    encoded by `tokenizer` (an outside model's) or, with None, by the task's own vocabulary."""
    from tasks.data import columns_to_batch, examples_to_columns, spread_subset

    splits = task.generate(seed) if tokenizer is None else tokenised(task, seed, tokenizer)
    return spread_subset(columns_to_batch(examples_to_columns(splits["heldout"])), pairs)
