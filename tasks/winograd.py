"""Winograd pronoun probe: `the {x} did not cross the {y} because it was too {adj} , so the {ref} waited .`

Fixed version (default): both candidates come from one noun pool and either may take either slot;
the adjective's ROLE decides the referent (crosser adjectives: ref = x; crossed adjectives: ref = y).
Held-out examples use ordered noun pairs whose reverse occurs in training and which never occur
themselves, so a model that knows which nouns are present but not their order answers backwards.
Leaky version (`leaky=True`): one animal and one place; the category alone decides the referent.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from models import ModelSpec, UsageError
from models.spec import Attention, Positions
from tasks.base import Domain, Example, Task

ANIMALS = ("animal", "dog", "cat", "horse", "cow", "goat", "sheep", "fox", "deer", "duck", "mouse", "pig")
PLACES = ("street", "road", "river", "bridge", "field", "yard", "hill", "lake", "park", "track", "creek", "lane")
CROSSER_ADJECTIVES = ("tired", "scared", "slow", "weak")  # "it" is the one crossing: ref = x
CROSSED_ADJECTIVES = ("wet", "wide", "busy", "steep")  # "it" is the thing crossed: ref = y
TEMPLATE = "the {x} did not cross the {y} because it was too {adj} , so the {ref} waited ."
SCORED_POSITION = TEMPLATE.split().index("{ref}") - 1  # the "the" after "so": its logits name ref
# Each input position's role, by what it holds, in the order of TEMPLATE (the scored "the" is the
# query; "{ref}" and "waited" come after it, so no scored row can read them).
ROLES = (
    "first_the", "first_noun", "did", "not", "cross", "second_the", "second_noun", "because",
    "pronoun", "was", "too", "adjective", "comma", "so", "query",
)  # fmt: skip


@dataclass(frozen=True)
class WinogradParams:
    nouns: int = 16
    heldout_fraction: float = 0.5
    validation_fraction: float = 0.1
    leaky: bool = False


class WinogradTask(Task):
    """Winograd pronoun resolution: which noun does "it" refer to?"""

    name = "winograd"
    Params = WinogradParams
    version = 2  # the examples name their positions' roles (tasks.data's cache fingerprint)

    def __init__(self, params=None):
        super().__init__(params)
        p = self.params
        if not isinstance(p.nouns, int) or not 4 <= p.nouns <= 2 * len(ANIMALS) or p.nouns % 2:
            raise UsageError(f"nouns must be an even number between 4 and {2 * len(ANIMALS)}, got {p.nouns}")
        if (
            not 0 < p.heldout_fraction < 1
            or not 0 < p.validation_fraction < 1
            or p.heldout_fraction + p.validation_fraction >= 1
        ):
            raise UsageError(
                "heldout_fraction and validation_fraction must be in (0, 1) with a sum "
                f"below 1, got {p.heldout_fraction} and {p.validation_fraction}"
            )
        pairs = len(self.candidate_pairs())
        if not 1 <= round(pairs * p.heldout_fraction) < pairs:
            raise UsageError(
                f"heldout_fraction={p.heldout_fraction} holds out {round(pairs * p.heldout_fraction)} "
                f"of the {pairs} noun pairs; leave at least one held out and one for validation "
                "by changing --heldout-fraction or --nouns"
            )

    def nouns(self) -> tuple[str, ...]:
        half = self.params.nouns // 2
        return ANIMALS[:half] + PLACES[:half]

    def vocabulary(self) -> list[str]:
        words = [w for w in TEMPLATE.split() if not w.startswith("{")]
        return list(dict.fromkeys(words)) + list(self.nouns()) + list(CROSSER_ADJECTIVES + CROSSED_ADJECTIVES)

    def candidate_pairs(self) -> list[tuple[str, str]]:
        """Unordered noun pairs, each as (a, b) with a before b in the pool."""
        nouns = self.nouns()
        if self.params.leaky:
            half = len(nouns) // 2
            return [(a, b) for a in nouns[:half] for b in nouns[half:]]
        return [(a, b) for i, a in enumerate(nouns) for b in nouns[i + 1 :]]

    def generate(self, seed: int) -> dict[str, list[Example]]:
        rng = random.Random(seed)
        pairs = self.candidate_pairs()
        rng.shuffle(pairs)
        n_heldout = round(len(pairs) * self.params.heldout_fraction)
        n_validation = max(1, round(len(pairs) * self.params.validation_fraction))
        ordered = {"train": [], "validation": [], "heldout": []}
        for index, pair in enumerate(pairs):
            shown, hidden = (pair, pair[::-1]) if rng.random() < 0.5 else (pair[::-1], pair)
            ordered["train"].append(shown)
            if index < n_heldout:
                ordered["heldout"].append(hidden)
            elif index < n_heldout + n_validation:
                ordered["validation"].append(hidden)
            else:
                ordered["train"].append(hidden)
        return {
            split: [self.example(x, y, adj) for x, y in pairs_ for adj in self.adjectives()]
            for split, pairs_ in ordered.items()
        }

    def domain(self) -> Domain:
        """Every sentence of the template: each candidate pair in both orders x each adjective (the
        union of the three splits, so 1,920 sentences at the default 16 nouns)."""
        ordered = [pair for a, b in self.candidate_pairs() for pair in ((a, b), (b, a))]
        adjectives = self.adjectives()

        def example(i: int) -> Example:
            (x, y), adjective = ordered[i // len(adjectives)], adjectives[i % len(adjectives)]
            return self.example(x, y, adjective)

        return Domain(
            len(ordered) * len(adjectives),
            example,
            f"every sentence of the template: {len(ordered)} ordered noun pairs x {len(adjectives)} adjectives",
        )

    def adjectives(self) -> tuple[str, ...]:
        return CROSSER_ADJECTIVES + CROSSED_ADJECTIVES

    def referent(self, x: str, y: str, adjective: str) -> str:
        if self.params.leaky:
            animal = x if x in ANIMALS else y
            place = y if animal == x else x
            return animal if adjective in CROSSER_ADJECTIVES else place
        return x if adjective in CROSSER_ADJECTIVES else y

    def example(self, x: str, y: str, adjective: str) -> Example:
        roles = (CROSSER_ADJECTIVES, CROSSED_ADJECTIVES)
        role = 0 if adjective in CROSSER_ADJECTIVES else 1
        partner = roles[1 - role][roles[role].index(adjective)]
        tokens = self.encode(x, y, adjective)
        ref = self.referent(x, y, adjective)
        return Example(
            tokens=tokens,
            positions=(SCORED_POSITION,),
            foils=(self.vocabulary().index(y if ref == x else x),),
            group="crosser" if role == 0 else "crossed",
            counterfactual=self.encode(x, y, partner),
            roles={role: position for position, role in enumerate(ROLES)},
        )

    def encode(self, x: str, y: str, adjective: str) -> tuple[int, ...]:
        index = {word: i for i, word in enumerate(self.vocabulary())}
        text = TEMPLATE.format(x=x, y=y, adj=adjective, ref=self.referent(x, y, adjective))
        return tuple(index[word] for word in text.split())

    def default_training(self) -> dict:
        # The slowest main-job run (attn-only-2x1 seed 2) solves at step 825: 82% of the default
        # 1000-step budget, which flags it budget-limited (its result could be the budget's). At
        # 1500 it stops with 45% to spare; every other run stops at 550 or earlier, as before.
        return {"max_steps": 1500}

    def default_models(self) -> dict[str, ModelSpec]:
        return {
            "bag-of-words": ModelSpec(n_layers=1, n_heads=4, attention=Attention.UNIFORM, positions=Positions.NONE),
            # LayerNorm kept: without it 1 of 3 attn-only-2x1 seeds stalled at 32% within the budget
            # (with it, 3 of 3 reached 100%).
            "attn-only-1x1": ModelSpec(n_layers=1, n_heads=1, mlp=False),
            "attn-only-2x1": ModelSpec(n_layers=2, n_heads=1, mlp=False),
            "block-1": ModelSpec(n_layers=1, n_heads=4),
            "block-2": ModelSpec(n_layers=2, n_heads=4),
        }


if __name__ == "__main__":
    from common.cli import entry
    from toylens.cli import main_for_task

    entry(lambda: main_for_task("winograd"), program=True)
