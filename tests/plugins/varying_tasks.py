"""Test plugins whose relevant positions vary per example, written from docs/plugins.md alone.

- markcopy: `c M f a d b ?` -> f, the letter after the marker M, wherever M sits.
- binding: two-hop variable binding, `a = 3 ; d = a ; c = 7 ; b = c ; ? d` -> 3, the statements
  interleaved at random, so where each binding sits varies per example.
- binding-early: binding scored one token early (at `?`), the off-by-one a plugin author makes.

Each names its positions by role, so reports can summarise by what a position holds.
"""

import random
from dataclasses import dataclass

from toylens import Example, ModelSpec, Task, UsageError, standard_family

LETTERS = tuple("abcdefgh")


@dataclass(frozen=True)
class MarkCopyParams:
    examples: int = 1200
    length: int = 7  # letters before the query, the marker among them
    offset: int = 1  # the answer is the letter this many places after the marker


class MarkCopyTask(Task):
    """The letter after the marker M, wherever M sits (held out: unseen sequences)."""

    name, Params, version = "markcopy", MarkCopyParams, 1

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
        index, length, examples = {w: i for i, w in enumerate(self.vocabulary())}, self.params.length, []
        k = self.params.offset
        while len(examples) < count:
            base = [rng.choice(LETTERS) for _ in range(length)]
            i, j = rng.sample(range(length - k), 2)
            if abs(i - j) <= k or base[i + k] == base[j + k]:
                continue
            clean, partner = list(base), list(base)
            clean[i], partner[j] = "M", "M"
            tokens = tuple(index[w] for w in [*clean, "?", base[i + k]])
            if tokens in seen:
                continue
            seen.add(tokens)
            examples.append(
                Example(
                    tokens,
                    positions=(length,),
                    foils=(index[base[j + k]],),
                    group="early" if i < length // 2 else "late",
                    counterfactual=tuple(index[w] for w in [*partner, "?", base[j + k]]),
                    roles={"marker": i, "value": i + k, "query": length},
                )
            )
        return examples

    def default_models(self) -> dict[str, ModelSpec]:
        family = standard_family(d_model=32, n_heads=2, layers=(1, 2, 3))
        return {name: family[name] for name in ("bag-of-words", "attn-only-1x1", "attn-only-2x1", "attn-only-3x1")}

    def default_training(self) -> dict:
        return {"max_steps": 600, "lr": 3e-3, "batch_size": 64, "eval_every": 25}


VARIABLES, VALUES = tuple("abcdefgh"), tuple("01234567")


@dataclass(frozen=True)
class BindingParams:
    examples: int = 3000
    chains: int = 2  # chains (value -> variable [-> alias]), statements interleaved
    fillers: int = 0  # extra one-hop statements `x = v ;` that no query asks about
    hops: int = 2  # 2: the query names an alias (`b = a`) of a variable; 1: the variable itself


class BindingTask(Task):
    """Two-hop variable binding with the statements interleaved at random."""

    name, Params, version = "binding", BindingParams, 1
    score_offset = 0  # the scored position is the queried alias; binding-early moves it

    def __init__(self, params=None):
        super().__init__(params)
        if self.params.hops not in (1, 2) or not 2 <= self.params.chains <= 4 or not 0 <= self.params.fillers <= 4:
            raise UsageError(f"binding: hops must be 1 or 2, chains 2..4, fillers 0..4; got {self.params}")

    def vocabulary(self) -> list[str]:
        return [*VARIABLES, *VALUES, "=", ";", "?"]

    def generate(self, seed: int) -> dict[str, list[Example]]:
        rng, seen, n = random.Random(seed), set(), self.params.examples
        return {
            "train": self.sample(rng, n, seen),
            "validation": self.sample(rng, n // 5, seen),
            "heldout": self.sample(rng, n // 5, seen),
        }

    def statements(self, rng):
        """[(lhs, rhs, chain)] interleaved, keeping each source before its alias; the chain values."""
        chains, fillers = self.params.chains, self.params.fillers
        names = rng.sample(VARIABLES, 2 * chains + fillers)
        values = rng.sample(VALUES, chains)
        source = [(names[2 * c], values[c], c) for c in range(chains)]
        alias = [(names[2 * c + 1], names[2 * c], c) for c in range(chains)] if self.params.hops == 2 else []
        extra = [(names[2 * chains + k], rng.choice(VALUES), -1) for k in range(fillers)]
        order = source + alias + extra
        while True:
            rng.shuffle(order)
            if all(order.index(source[c]) < order.index(alias[c]) for c in range(len(alias))):
                return order, values

    def sample(self, rng, count, seen) -> list[Example]:
        index, examples = {w: i for i, w in enumerate(self.vocabulary())}, []
        while len(examples) < count:
            order, values = self.statements(rng)
            asked = rng.randrange(self.params.chains)
            other = (asked + 1) % self.params.chains
            swapped = {values[asked]: values[other], values[other]: values[asked]}
            words, partner, roles = [], [], {}
            for lhs, rhs, chain in order:
                words += [lhs, "=", rhs, ";"]
                partner += [lhs, "=", swapped.get(rhs, rhs) if chain >= 0 else rhs, ";"]
                if chain == asked:
                    role = "source" if rhs in VALUES else "alias"
                    roles[f"{role}_value" if role == "source" else "alias_rhs"] = len(words) - 2
                    roles[f"{role}_end"] = len(words) - 1
            query = [
                lhs for lhs, rhs, chain in order if chain == asked and (rhs in VARIABLES) == (self.params.hops == 2)
            ][0]
            tokens = tuple(index[w] for w in [*words, "?", query, values[asked]])
            if tokens in seen:
                continue
            seen.add(tokens)
            scored = len(tokens) - 2 - self.score_offset
            roles["query"] = len(tokens) - 2
            examples.append(
                Example(
                    tokens,
                    positions=(scored,),
                    foils=(index[values[other]],),
                    counterfactual=tuple(index[w] for w in [*partner, "?", query, values[other]]),
                    roles=roles,
                )
            )
        return examples

    def default_models(self) -> dict[str, ModelSpec]:
        family = standard_family(d_model=64, n_heads=2, layers=(1, 2, 3))
        return {name: family[name] for name in ("bag-of-words", "attn-only-1x1", "attn-only-2x1", "attn-only-3x1")}

    def default_training(self) -> dict:
        return {"max_steps": 3000, "lr": 3e-3, "batch_size": 64, "eval_every": 50}


class BindingEarlyTask(BindingTask):
    """Binding scored one token early (at `?`): the off-by-one the health checks must name."""

    name, version = "binding-early", 1
    score_offset = 1


if __name__ == "__main__":
    from toylens.cli import main_for_task

    main_for_task("markcopy")
