"""Test plugins written from docs/plugins.md and docs/guide.md alone, each a shape the built-in tasks
do not have.

- reverse: `a d b | b d a`, a random length 2..8, every answer position scored (several scored
  positions per example, sequences of different lengths in one batch, padding).
- majority: `a b b a b ?` -> b, the letter that occurs more often. Order does not matter: a bag of
  words solves it, so the report must not call attention necessary.
- echo: `x y` -> x with a vocabulary of 120 tokens and a context of 2: the scored position is 1,
  the context is one token longer than the prompt, and the answer is an input token.
"""

import random
from dataclasses import dataclass

from toylens import NO_FOIL, Example, ModelSpec, Task, UsageError, standard_family

LETTERS = tuple("abcdefgh")


def small_family(names: tuple[str, ...], d_model: int = 32, n_heads: int = 2) -> dict[str, ModelSpec]:
    family = standard_family(d_model=d_model, n_heads=n_heads, layers=(1, 2))
    return {name: family[name] for name in names}


def distinct_splits(task, seed: int, sample) -> dict[str, list[Example]]:
    rng, seen, n = random.Random(seed), set(), task.params.examples
    return {
        "train": sample(rng, n, seen),
        "validation": sample(rng, n // 5, seen),
        "heldout": sample(rng, n // 5, seen),
    }


@dataclass(frozen=True)
class ReverseParams:
    examples: int = 2000
    shortest: int = 2
    longest: int = 8


class ReverseTask(Task):
    """Reverse a sequence of random length: `a d b | b d a`, every answer position scored."""

    name, Params, version = "reverse", ReverseParams, 1

    def __init__(self, params=None):
        super().__init__(params)
        if not 2 <= self.params.shortest <= self.params.longest <= len(LETTERS):
            raise UsageError(f"reverse: need 2 <= shortest <= longest <= {len(LETTERS)}, got {self.params}")

    def vocabulary(self) -> list[str]:
        return [*LETTERS, "|"]

    def generate(self, seed: int) -> dict[str, list[Example]]:
        return distinct_splits(self, seed, self.sample)

    def sample(self, rng, count, seen) -> list[Example]:
        index, examples = {w: i for i, w in enumerate(self.vocabulary())}, []
        while len(examples) < count:
            n = rng.randint(self.params.shortest, self.params.longest)
            word = rng.sample(LETTERS, n)  # distinct letters: every answer is unambiguous
            partner = word[1:] + word[:1]  # rotated: every answer changes
            tokens = tuple(index[w] for w in [*word, "|", *reversed(word)])
            if tokens in seen:
                continue
            seen.add(tokens)
            positions = tuple(range(n, 2 * n))  # `|` and every answer but the last
            # the copy shortcut: the letter at the same offset in the input, where that differs
            foils = tuple(index[word[k]] if word[k] != word[n - 1 - k] else NO_FOIL for k in range(n))
            examples.append(
                Example(
                    tokens,
                    positions,
                    foils,
                    group=f"length{n}",
                    counterfactual=tuple(index[w] for w in [*partner, "|", *reversed(partner)]),
                    roles={"first": 0, "separator": n},
                )
            )
        return examples

    def default_models(self) -> dict[str, ModelSpec]:
        return small_family(("bag-of-words", "attn-only-1x1", "attn-only-2x1", "block-2"))

    def default_training(self) -> dict:
        return {"max_steps": 400, "lr": 3e-3, "eval_every": 25}


@dataclass(frozen=True)
class MajorityParams:
    examples: int = 1200
    length: int = 9  # odd, so there is no tie (7 has only 714 distinct sequences)


class MajorityTask(Task):
    """Which of a and b occurs more often in `a b b a b ?`: order does not matter."""

    name, Params, version = "majority", MajorityParams, 1

    def __init__(self, params=None):
        super().__init__(params)
        if self.params.length % 2 == 0 or not 3 <= self.params.length <= 15:
            raise UsageError(f"majority: length must be odd and 3..15, got {self.params.length}")

    def vocabulary(self) -> list[str]:
        return ["a", "b", "c", "?"]

    def generate(self, seed: int) -> dict[str, list[Example]]:
        return distinct_splits(self, seed, self.sample)

    def sample(self, rng, count, seen) -> list[Example]:
        L, examples = self.params.length, []
        while len(examples) < count:
            # a and b among filler c, one more of the majority letter than of the other
            minority = rng.randint(0, (L - 1) // 2)
            body = [0] * (minority + 1) + [1] * minority + [2] * (L - 2 * minority - 1)
            rng.shuffle(body)
            if rng.random() < 0.5:
                body = [{0: 1, 1: 0}.get(t, t) for t in body]
            winner = max((0, 1), key=body.count)
            tokens = (*body, 3, winner)
            if tokens in seen:
                continue
            seen.add(tokens)
            partner = [*body]
            partner[body.index(winner)] = 1 - winner  # minority + 1 against minority: the other letter wins
            examples.append(
                Example(
                    tokens,
                    (L,),
                    (1 - winner,),
                    group="close" if minority == (L - 1) // 2 else "clear",
                    counterfactual=(*partner, 3, 1 - winner),
                )
            )
        return examples

    def default_models(self) -> dict[str, ModelSpec]:
        return small_family(("bag-of-words", "attn-only-1x1", "attn-only-2x1", "block-2"))

    def default_training(self) -> dict:
        return {"max_steps": 300, "lr": 3e-3, "eval_every": 25, "loss_positions": "scored"}


@dataclass(frozen=True)
class EchoParams:
    examples: int = 2000
    tokens: int = 120


class EchoTask(Task):
    """`x y` -> x: a vocabulary of 120 tokens, a context of 2, the answer an input token."""

    name, Params, version = "echo", EchoParams, 1

    def __init__(self, params=None):
        super().__init__(params)
        if not 8 <= self.params.tokens <= 500:
            raise UsageError(f"echo: tokens must be 8..500, got {self.params.tokens}")

    def vocabulary(self) -> list[str]:
        return [f"t{i}" for i in range(self.params.tokens)]

    def generate(self, seed: int) -> dict[str, list[Example]]:
        return distinct_splits(self, seed, self.sample)

    def sample(self, rng, count, seen) -> list[Example]:
        examples = []
        while len(examples) < count:
            x, y, other = rng.sample(range(self.params.tokens), 3)
            tokens = (x, y, x)
            if tokens in seen:
                continue
            seen.add(tokens)
            examples.append(Example(tokens, (1,), (y,), counterfactual=(other, y, other), roles={"source": 0}))
        return examples

    def default_models(self) -> dict[str, ModelSpec]:
        return small_family(("bag-of-words", "attn-only-1x1", "block-2"))

    def default_training(self) -> dict:
        return {"max_steps": 400, "lr": 3e-3, "eval_every": 25, "loss_positions": "scored"}
