"""A test plugin whose answer needs three attention heads in series, its layout varying per example.

twohop: two-hop variable binding written as two-token statements `lhs rhs`, shuffled per example
(each source before its alias):

    a 3 d a c 7 b c ? d  ->  3        (d is a, a is 3)

Two chains, each a source (`a 3`: a variable bound to a value) and an alias (`d a`: a variable bound
to the source's variable); held-out queries name an alias. The partner trades the sources' names
(`c 3 ... a 7 ... d a ... b c ? d` -> 7): the same tokens in the same places, so an order-blind model
cannot tell the pair apart, and what differs, the sources' names, reaches the answer of a 3-layer
attention-only model only through three heads in series: one copies each statement's lhs onto its
rhs, one (at the alias's rhs) finds the source whose lhs that is and copies its value, one (at the
query) finds the alias whose lhs is the query and reads that copy.

Roles name the positions of the asked chain (they move with the shuffle) and the query.
"""

import random
from dataclasses import dataclass

from toylens import Example, ModelSpec, Task, UsageError, standard_family

VARIABLES, VALUES = tuple("abcdefgh"), tuple("01234567")


@dataclass(frozen=True)
class TwoHopParams:
    examples: int = 8000
    chains: int = 2  # chains (source + alias), their statements shuffled together
    variables: int = 8  # how many variable names the statements draw from
    values: int = 8  # how many values
    one_hop: float = 0.5  # share of training and validation queries naming a source (one hop: `? a` -> 3);
    # held-out queries always name an alias


def order_of(order, chain, alias):
    """Chain `chain`'s source (alias False) or alias statement in `order`."""
    return next(statement for statement in order if statement[2] == chain and statement[3] == alias)


class TwoHopTask(Task):
    """Two-hop binding `a 3 d a c 7 b c ? d` -> 3, statements shuffled; pairs trade the sources' names."""

    name, Params, version = "twohop", TwoHopParams, 3

    def __init__(self, params=None):
        super().__init__(params)
        p = self.params
        if (
            not 2 <= p.chains <= 3
            or not 2 * p.chains <= p.variables <= len(VARIABLES)
            or not p.chains <= p.values <= len(VALUES)
            or not 0 <= p.one_hop <= 1
        ):
            raise UsageError(
                f"twohop: chains must be 2..3, variables 2*chains..{len(VARIABLES)}, "
                f"values chains..{len(VALUES)}, one_hop 0..1; got {p}"
            )

    def vocabulary(self) -> list[str]:
        return [*VARIABLES[: self.params.variables], *VALUES[: self.params.values], "?"]

    def generate(self, seed: int) -> dict[str, list[Example]]:
        rng, seen, n = random.Random(seed), set(), self.params.examples
        one = self.params.one_hop
        return {
            "train": self.sample(rng, n, seen, one),
            "validation": self.sample(rng, n // 5, seen, one),
            "heldout": self.sample(rng, n // 5, seen, 0.0),
        }

    def sample(self, rng, count, seen, one_hop) -> list[Example]:
        p, index, examples = self.params, {w: i for i, w in enumerate(self.vocabulary())}, []
        while len(examples) < count:
            names = rng.sample(VARIABLES[: p.variables], 2 * p.chains)
            sources, aliases = names[: p.chains], names[p.chains :]
            values = rng.sample(VALUES[: p.values], p.chains)
            # (lhs, rhs, chain, is the alias): `a 3` binds a to 3, `d a` binds d to a; each source comes
            # before its alias, so a chain can be read forward (the alias fetches its source's value)
            order = [(sources[c], values[c], c, False) for c in range(p.chains)]
            order += [(aliases[c], sources[c], c, True) for c in range(p.chains)]
            while True:
                rng.shuffle(order)
                if all(
                    order.index(order_of(order, c, False)) < order.index(order_of(order, c, True))
                    for c in range(p.chains)
                ):
                    break
            asked, other = rng.sample(range(p.chains), 2)
            swap = {asked: sources[other], other: sources[asked]}  # the partner's sources trade names
            clean, partner, roles = [], [], {}
            for lhs, rhs, chain, alias in order:
                clean += [lhs, rhs]
                partner += [lhs if alias else swap.get(chain, lhs), rhs]
                if chain == asked:
                    kind = "alias" if alias else "source"
                    roles[f"{kind}_lhs"], roles[f"{kind}_rhs"] = len(clean) - 2, len(clean) - 1
            query = sources[asked] if rng.random() < one_hop else aliases[asked]
            tokens = tuple(index[w] for w in [*clean, "?", query, values[asked]])
            if tokens in seen:
                continue
            seen.add(tokens)
            roles["query"] = len(tokens) - 2
            # Only held-out pairs are patched: training and validation carry no partners.
            partner = () if one_hop else tuple(index[w] for w in [*partner, "?", query, values[other]])
            examples.append(
                Example(
                    tokens,
                    positions=(len(tokens) - 2,),
                    foils=(index[values[other]],),
                    counterfactual=partner,
                    roles=roles,
                )
            )
        return examples

    def default_models(self) -> dict[str, ModelSpec]:
        family = standard_family(d_model=32, n_heads=1, layers=(2, 3))
        return {name: family[name] for name in ("bag-of-words", "attn-only-2x1", "attn-only-3x1")}

    def default_training(self) -> dict:
        # Measured (seeds 0-2): the scored loss sits near ln 2 for 600-1,100 steps before the chain forms,
        # then validation is solved by step 900-1,400 (held-out 99.4-99.7%); at lr 2e-3 seed 0 had formed
        # nothing by step 1,450. "Stalled" waits longer than that plateau.
        return {
            "max_steps": 3000,
            "lr": 1e-3,
            "batch_size": 64,
            "eval_every": 50,
            "loss_positions": "scored",
            "plateau_steps": 1500,
        }


if __name__ == "__main__":
    from toylens.cli import main_for_task

    main_for_task("twohop")
