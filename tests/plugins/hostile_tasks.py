"""Test plugins whose strings are hostile to every page and file toylens writes.

- hostile: `x y` -> x over tokens named with markup that would inject an element (each carries the
  marker PWNED, so a test can look for it as an element or attribute), `</script>` and `<!--`
  (which end or alter an inline script element), quotes, mathtext (`$\\frac{$`), a 10 kB name, RTL
  and zero-width characters, U+2028/2029 (line breaks to old JavaScript); its groups are hostile too.
- surrogate: a token holding a lone surrogate (not Unicode): refused when the task is loaded.
"""

import random
from dataclasses import dataclass

from toylens import Example, ModelSpec, Task, standard_family

PWNED = "pwned"
HOSTILE = (
    f'<img src=x id="{PWNED}" onerror="document.body.dataset.{PWNED}=1">',
    f"</script><script>document.body.dataset.{PWNED}=1</script>",
    "<!--<script>",
    f"<b class={PWNED}>bold</b>",
    "\"'`&amp;&lt;",
    "$\\frac{$",
    "a$^$b",
    "x" * 10_000,
    "\u202eevil\u202c",  # right-to-left override
    "zero\u200bwidth\u200d",
    "line\u2028para\u2029",
    "{{7*7}}${7*7}",
)
# One name with every way out of a script element at once: '<!--<script>' puts the HTML parser in
# its double-escaped state, where only an unescaped '</script>' leaves it.
ALL_AT_ONCE = f'<!--<script></script><img src=x class={PWNED} onerror="document.body.dataset.{PWNED}=1">$\\x$'
FILLER = tuple(f"t{i}" for i in range(12))
EVERY = len(HOSTILE)  # ALL_AT_ONCE's id


@dataclass(frozen=True)
class HostileParams:
    examples: int = 300


class HostileTask(Task):
    """`x y D x` -> x, every token a string a page or a figure could mistake for code."""

    name, Params, version = "hostile", HostileParams, 1

    def vocabulary(self) -> list[str]:
        return [*HOSTILE, ALL_AT_ONCE, *FILLER]

    def generate(self, seed: int) -> dict[str, list[Example]]:
        rng, seen, n = random.Random(seed), set(), self.params.examples
        return {
            "train": self.sample(rng, n, seen),
            "validation": self.sample(rng, n // 5, seen),
            "heldout": self.sample(rng, n // 5, seen),
        }

    def sample(self, rng, count, seen) -> list[Example]:
        """`x y D x`, scored at D (answer x): D, every danger in one name, is in every example, so in
        every example pair a page shows; x and y are any other names (the hostile ones among them)."""
        examples, others = [], [i for i in range(len(self.vocabulary())) if i != EVERY]
        while len(examples) < count:
            x, y, other = rng.sample(others, 3)
            if (x, y) in seen:
                continue
            seen.add((x, y))
            group = HOSTILE[x % 3]  # markup in the group names the reports print
            examples.append(
                Example(
                    (x, y, EVERY, x),
                    (2,),
                    (y,),
                    group=group,
                    counterfactual=(other, y, EVERY, other),
                    roles={"source": 0},
                )
            )
        return examples

    def default_models(self) -> dict[str, ModelSpec]:
        family = standard_family(d_model=32, n_heads=2, layers=(1, 2))
        return {name: family[name] for name in ("attn-only-1x1",)}

    def default_training(self) -> dict:
        return {"max_steps": 30, "eval_every": 15, "batch_size": 32}


class SurrogateTask(HostileTask):
    name = "surrogate"

    def vocabulary(self) -> list[str]:
        return ["ok", "lone\ud800surrogate", *FILLER]
