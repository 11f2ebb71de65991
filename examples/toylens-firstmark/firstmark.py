"""Which of two marked letters came first? In `a C b e A d first C` the answer after "first" is C.
A bag of words sees both marks but not their order; attention can compare their positions."""

import itertools
import random
from dataclasses import dataclass

from toylens import Domain, Example, ModelSpec, Task

FILLERS, MARKS, SLOTS = tuple("abcdefgh"), tuple("ABCDEFGH"), 6  # SLOTS letters, then "first"


@dataclass(frozen=True)
class FirstMarkParams:
    examples: int = 2000  # training sequences; validation and held-out get a fifth as many


class FirstMarkTask(Task):
    """Which of two marked letters came first (held out: mark pairs trained only in reverse order)."""

    name, Params, version = "firstmark", FirstMarkParams, 1

    def vocabulary(self) -> list[str]:
        return [*FILLERS, *MARKS, "first"]

    def generate(self, seed: int) -> dict[str, list[Example]]:
        rng, seen, n = random.Random(seed), set(), self.params.examples
        pairs = list(itertools.combinations(MARKS, 2))
        rng.shuffle(pairs)
        held = [p if rng.random() < 0.5 else p[::-1] for p in pairs[:14]]  # half of the 28 pairs
        trained = [p[::-1] for p in held] + pairs[14:] + [p[::-1] for p in pairs[14:]]
        return {
            "train": self.sample(rng, trained, n, seen),
            "validation": self.sample(rng, trained, n // 5, seen),
            "heldout": self.sample(rng, held, n // 5, seen),
        }

    def sample(self, rng, orders, count, seen) -> list[Example]:
        index, examples = {word: i for i, word in enumerate(self.vocabulary())}, []
        while len(examples) < count:
            first, second = rng.choice(orders)
            i, j = sorted(rng.sample(range(SLOTS), 2))
            letters = [rng.choice(FILLERS) for _ in range(SLOTS)]
            letters[i], letters[j] = first, second
            tokens = tuple(index[w] for w in [*letters, "first", first])
            if tokens not in seen:  # keeps the splits disjoint
                seen.add(tokens)
                letters[i], letters[j] = second, first  # the partner: marks swapped, so the answer flips
                examples.append(
                    Example(
                        tokens,
                        positions=(SLOTS,),
                        foils=(index[second],),
                        group="adjacent" if j == i + 1 else "apart",
                        counterfactual=tuple(index[w] for w in [*letters, "first", second]),
                    )
                )
        return examples

    def domain(self) -> Domain:
        """Every sequence: an ordered mark pair x two slots for them x a filler in each other slot."""
        orders = list(itertools.permutations(MARKS, 2))
        slots = list(itertools.combinations(range(SLOTS), 2))
        fills = len(FILLERS) ** (SLOTS - 2)
        index = {word: i for i, word in enumerate(self.vocabulary())}

        def example(n: int) -> Example:
            n, fill = divmod(n, fills)
            (first, second), (i, j) = orders[n // len(slots)], slots[n % len(slots)]
            letters = [FILLERS[fill // len(FILLERS) ** k % len(FILLERS)] for k in range(SLOTS - 2)]
            letters[i:i] = [first]
            letters[j:j] = [second]
            swapped = list(letters)
            swapped[i], swapped[j] = second, first  # the partner: marks swapped, so the answer flips
            return Example(
                tuple(index[w] for w in [*letters, "first", first]),
                positions=(SLOTS,),
                foils=(index[second],),
                group="adjacent" if j == i + 1 else "apart",
                counterfactual=tuple(index[w] for w in [*swapped, "first", second]),
            )

        return Domain(len(orders) * len(slots) * fills, example, "every mark order, slot pair and filler")

    def default_models(self) -> dict[str, ModelSpec]:
        return {
            "bag-of-words": ModelSpec(d_model=64, n_heads=2, attention="uniform", positions="none"),
            "attn-only-1x1": ModelSpec(d_model=64, n_heads=1, mlp=False, norm=None),
            "attn-only-2x1": ModelSpec(n_layers=2, d_model=64, n_heads=1, mlp=False, norm=None),
        }

    def default_training(self) -> dict:
        return {"max_steps": 600, "lr": 3e-3}
