"""f on subsets of a circuit's members, row by row: the measurement the relations between them are
read from (probes.circuits.interactions, .relation_classes, .rows).

The members are the circuit's heads and MLPs. Keeping a subset T of them: every member outside T is
knocked out by its own output (its hook_z / hook_mlp_out given the counterfactual run's values, so
every edge it sends carries the counterfactual write), and nothing else is touched: its inputs, and
every component that is no member, stay as on the clean run, so an upstream component's other
readers are kept. The knock-out is components.KnockOut over the members, the same numbers as patching
every out-edge on the edge oracle (tests/test_logic.py).

f(T) is on the gap scale, 0 = the counterfactual run, 1 = the clean run (f(all members) = 1 by
construction). The metric is kept at every scored position, so f can be read on any resample of the
pairs (the bootstrap: BOOTSTRAP resamples of the pairs with replacement, seed SEED) and on each pair
alone (`row_share`: on that pair's own scale, 0 = every member knocked out, 1 = the clean run).

Up to EXACT_MEMBERS members every subset is measured (batched, 2^n sets); beyond, every set that
knocks out at most two members, and any other set when a rule asks for it (`f` measures it then).

On how many pairs (`budget_pairs`): every held-out pair the caller passes, unless the first sets
over them would exceed TOKEN_BUDGET token forwards; then that many pairs, evenly spread, and never
fewer than the circuit was found on (the sentences say on how many pairs each relation holds).
"""

from __future__ import annotations

import itertools

import torch

from probes.circuits.components import Component, KnockOut, ordered
from probes.circuits.oracle import Runs
from tasks.data import Batch, spread_subset
from models import Model

EXACT_MEMBERS = 8  # up to this many members every subset is measured (2^8 sets batched: seconds on
# block-2; 2^10 took 35-47 s under load)
BOOTSTRAP = 200  # resamples of the pairs for every interval
SEED = 0
TOKEN_BUDGET = 2**17  # sets x pairs x tokens per pair measured first (never fewer pairs than the circuit was
# found on): all 480 Winograd pairs (17 tokens) up to 4 members, 240 at 5 members, the circuit's 64 at 7; on
# block-2 the CPU then stays what 64 pairs cost before the last block was replayed alone (KnockOut.scored)
FLAT_ROW = 1e-3  # a pair whose members move its metric by less than this share of the mean gap is flat


def first_sets(members: tuple[Component, ...]) -> list[frozenset]:
    """The sets measured up front: every subset up to EXACT_MEMBERS, else every set knocking out at
    most two members, and the empty set."""
    if len(members) <= EXACT_MEMBERS:
        return [frozenset(c) for k in range(len(members) + 1) for c in itertools.combinations(members, k)]
    whole = frozenset(members)
    return [whole - frozenset(c) for k in range(3) for c in itertools.combinations(members, k)] + [frozenset()]


def budget_pairs(batch: Batch, members: tuple[Component, ...], least: int = 1) -> Batch:
    """`batch`, or as many of its pairs, evenly spread, as keep the first sets within TOKEN_BUDGET (at
    least `least`)."""
    per_pair = batch.inputs.shape[1] * len(first_sets(ordered(members)))
    return spread_subset(batch, max(least, TOKEN_BUDGET // per_pair))


class Subsets:
    """The metric of every subset measured so far, at every scored position; measures more on demand."""

    def __init__(self, model: Model, batch: Batch, runs: Runs | None, members: tuple[Component, ...]):
        self.members = ordered(members)
        self.all = frozenset(self.members)
        self.knock_out = KnockOut(model, batch, runs, self.members)
        self.pairs = len(batch)
        self.of_pair = batch.example_index.cpu()
        self.exhaustive = len(self.members) <= EXACT_MEMBERS
        self.limit = EXACT_MEMBERS
        self.metric: dict[frozenset, torch.Tensor] = {}
        counts = torch.multinomial(
            torch.ones(self.pairs, device="cpu"),  # the Generator below is a CPU one
            self.pairs * BOOTSTRAP,
            replacement=True,
            generator=torch.Generator(device="cpu").manual_seed(SEED),
        ).view(BOOTSTRAP, self.pairs)
        drawn = torch.stack([torch.bincount(c, minlength=self.pairs) for c in counts]).double()
        weights = torch.cat([drawn.new_ones(1, self.pairs), drawn])  # row 0: the pairs as drawn
        self.at = weights[:, self.of_pair]  # each scored position's weight in each resample
        self.values: dict[frozenset, torch.Tensor] = {}
        self.measure(first_sets(self.members))
        self.counterfactual = self.knock_out.other_rows.double()

    def measure(self, sets) -> None:
        missing = list(dict.fromkeys(frozenset(s) for s in sets if frozenset(s) not in self.metric))
        if missing:
            self.metric.update(zip(missing, self.knock_out.rows(missing).double()))

    @property
    def measured(self) -> int:
        return len(self.metric)

    def without(self, *out: Component) -> frozenset:
        return self.all - frozenset(out)

    def mean(self, values: torch.Tensor) -> torch.Tensor:
        """[BOOTSTRAP + 1] the mean over scored positions of each resample of the pairs."""
        return (self.at @ values) / self.at.sum(1)

    def f(self, kept) -> torch.Tensor:
        """[BOOTSTRAP + 1] f(kept) on the gap scale: index 0 on the pairs as drawn, then each resample."""
        kept = frozenset(kept)
        if kept not in self.values:
            self.measure([kept])
            empty, full = self.mean(self.counterfactual), self.mean(self.metric[self.all])
            self.values[kept] = (self.mean(self.metric[kept]) - empty) / (full - empty)
        return self.values[kept]

    def pair_mean(self, values: torch.Tensor) -> torch.Tensor:
        """[pairs] the mean over each pair's scored positions."""
        total = torch.zeros(self.pairs, dtype=values.dtype, device=values.device).index_add_(0, self.of_pair, values)
        return total / torch.bincount(self.of_pair, minlength=self.pairs)

    def row_share(self, kept) -> torch.Tensor:
        """[pairs] each pair's own share: 0 = every member knocked out, 1 = the clean run; NaN where
        the members move the pair's metric by less than FLAT_ROW of the mean gap (a flat pair)."""
        self.measure([kept, frozenset()])
        none, full = self.pair_mean(self.metric[frozenset()]), self.pair_mean(self.metric[self.all])
        gap = full - none
        flat = gap.abs() < FLAT_ROW * gap.abs().mean().clamp(min=1e-12)
        return torch.where(flat, torch.nan, (self.pair_mean(self.metric[frozenset(kept)]) - none) / gap)

    def moved(self) -> torch.Tensor:
        """[pairs] True where the members move the pair's metric (not flat)."""
        return ~self.row_share(self.all).isnan()
