"""A test plugin for the census of mechanisms (tests/test_relabelled_heads.py), written from
docs/plugins.md alone.

- neighbour: `c f M a d b ?` -> the letter next to the marker M, wherever M sits: after it
  (side "after": the reading head finds the letter whose key says "M came before me", a previous-
  token head feeding its key) or before it (side "before": the reading head finds M itself, whose
  value a previous-token head filled with the letter before). Two sides, two mechanisms by
  construction; the models have several heads per layer, so a seed may use any of them.
"""

import random
from dataclasses import dataclass

from toylens import Example, ModelSpec, Task, UsageError

LETTERS = tuple("abcdefgh")
SIDES = {"after": 1, "before": -1}


@dataclass(frozen=True)
class NeighbourParams:
    examples: int = 1200
    length: int = 7  # letters before the query, the marker among them
    side: str = "after"  # which neighbour of the marker is the answer: "after" or "before"


class NeighbourTask(Task):
    """The letter next to the marker M, wherever M sits (held out: unseen sequences)."""

    name, Params, version = "neighbour", NeighbourParams, 1

    def __init__(self, params=None):
        super().__init__(params)
        if self.params.side not in SIDES:
            raise UsageError(f"neighbour: side must be 'after' or 'before', got {self.params.side!r}")

    def vocabulary(self) -> list[str]:
        return [*LETTERS, "M", "?"]

    def generate(self, seed: int) -> dict[str, list[Example]]:
        rng, seen, n = random.Random(seed), set(), self.params.examples
        return {
            "train": self.sample(rng, n, seen),
            "validation": self.sample(rng, n // 5, seen),
            "heldout": self.sample(rng, n // 5, seen),
        }

    def sample(self, rng, count, seen) -> list[Example]:
        index, length, step, examples = (
            {w: i for i, w in enumerate(self.vocabulary())},
            self.params.length,
            SIDES[self.params.side],
            [],
        )
        # the marker where its neighbour exists; the partner moves the marker, so its answer differs
        places = range(1, length) if step < 0 else range(length - 1)
        while len(examples) < count:
            base = [rng.choice(LETTERS) for _ in range(length)]
            i, j = rng.sample(places, 2)
            if abs(i - j) <= 1 or base[i + step] == base[j + step]:
                continue
            clean, partner = list(base), list(base)
            clean[i], partner[j] = "M", "M"
            tokens = tuple(index[w] for w in [*clean, "?", base[i + step]])
            if tokens in seen:
                continue
            seen.add(tokens)
            examples.append(
                Example(
                    tokens,
                    positions=(length,),
                    foils=(index[base[j + step]],),
                    counterfactual=tuple(index[w] for w in [*partner, "?", base[j + step]]),
                    roles={"marker": i, "neighbour": i + step, "query": length},
                )
            )
        return examples

    def default_models(self) -> dict[str, ModelSpec]:
        """Every model variant with several heads per layer whose heads a permutation of their
        weights relabels exactly (ALiBi's slope is fixed per head index)."""
        width = dict(d_model=32, n_heads=2)
        return {
            "attn-only-2x2": ModelSpec(n_layers=2, mlp=False, **width),
            "block-1": ModelSpec(n_layers=1, **width),
            "block-2": ModelSpec(n_layers=2, **width),
            "rotary-2x2": ModelSpec(n_layers=2, positions="rotary", **width),
            "sinusoidal-no-norm": ModelSpec(n_layers=2, positions="sinusoidal", norm=None, **width),
            "unscaled-no-positions": ModelSpec(n_layers=2, positions="none", scale_scores=False, **width),
            "no-residual": ModelSpec(n_layers=2, residual=False, **width),
            "post-norm": ModelSpec(n_layers=2, norm_place="post", **width),
        }

    def default_training(self) -> dict:
        return {"max_steps": 600, "lr": 3e-3, "batch_size": 64, "eval_every": 25}
