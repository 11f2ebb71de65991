"""Indirect object identification (IOI; Wang et al. 2022) as a text task.

"When Mary and John went to the store John gave a drink to" -> "Mary": two names are introduced, one
of them (the subject, S) is repeated, and the answer is the other one (the indirect object, IO); the
foil is S. Both orders of the introduction occur (groups ABBA: IO first, and BABA: S first). The
counterfactual is the literature's ABC prompt: the same template with three other names in the three
name slots, so nothing in it says which of the clean prompt's names is the answer (the clean
answer - foil logit difference there is the "no information" reference).

Prompts use no punctuation, so every word is one token for a word-level vocabulary and, after a
space, for GPT-2-style BPE with the default names; `tasks.templates.tokenised` refuses a tokenizer
for which some word is not. Splits: every (template, IO, S, order) combination is made once, then
shuffled by the seed and cut 80 / 10 / 10, so no prompt occurs in two splits.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass

from models import ModelSpec, UsageError
from tasks.templates import TemplateTask, TextExample

NAMES = ("Mary", "John", "Alice", "Tom", "James", "Sarah", "Paul", "Anna", "Mark", "Lisa", "David", "Kate")
TEMPLATES = (
    "When {A} and {B} went to the store {S} gave a drink to",
    "When {A} and {B} went to the park {S} gave a ball to",
    "Then {A} and {B} had a long argument and afterwards {S} said to",
    "While {A} and {B} were working at the office {S} gave a book to",
    "After {A} and {B} found a ring at the garden {S} gave it to",
)


@dataclass(frozen=True)
class IOIParams:
    names: int = 8  # how many of NAMES the prompts draw from
    templates: int = len(TEMPLATES)


class IOITask(TemplateTask):
    """Indirect object identification: which name receives the object?"""

    name = "ioi"
    Params = IOIParams

    def __init__(self, params=None):
        super().__init__(params)
        p = self.params
        if not isinstance(p.names, int) or not 5 <= p.names <= len(NAMES):
            raise UsageError(f"names must be an integer from 5 (three ABC names besides two) to {len(NAMES)}")
        if not isinstance(p.templates, int) or not 1 <= p.templates <= len(TEMPLATES):
            raise UsageError(f"templates must be an integer from 1 to {len(TEMPLATES)}, got {p.templates!r}")

    def text_examples(self, seed: int) -> dict[str, list[TextExample]]:
        names = NAMES[: self.params.names]
        rng = random.Random(seed)
        examples = []
        for template, (io, s), order in itertools.product(
            TEMPLATES[: self.params.templates], itertools.permutations(names, 2), ("ABBA", "BABA")
        ):
            first, second = (io, s) if order == "ABBA" else (s, io)
            others = rng.sample([n for n in names if n not in (io, s)], 3)
            examples.append(
                TextExample(
                    words=tuple(template.format(A=first, B=second, S=s).split()),
                    answer=io,
                    foil=s,
                    counterfactual=tuple(template.format(A=others[0], B=others[1], S=others[2]).split()),
                    group=order,
                )
            )
        rng.shuffle(examples)
        cut, end = int(0.8 * len(examples)), int(0.9 * len(examples))
        return {"train": examples[:cut], "validation": examples[cut:end], "heldout": examples[end:]}

    def words(self) -> list[str]:
        # Every name and template word, whichever the seed draws (the vocabulary may not depend on it).
        words = {w for t in TEMPLATES[: self.params.templates] for w in t.split() if not w.startswith("{")}
        return sorted(words | set(NAMES[: self.params.names]))

    def default_models(self) -> dict[str, ModelSpec]:
        return {"block-2": ModelSpec(n_layers=2, d_model=64, n_heads=4)}

    def default_training(self) -> dict:
        return {"max_steps": 3000, "batch_size": 64, "lr": 1e-3}
