"""ReportSettings: every sample size and threshold the circuit report uses, in one place, recorded in
report.json so each number can be traced to the examples it was measured on and the line it had to
cross."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class ReportSettings:
    # Bases. Each is an evenly spread subset of a split (all of it when the split is smaller).
    ablation_rows: int = 512  # held-out examples every ablation number is measured on (all 480 for Winograd)
    reference_rows: int = 512  # training examples mean and resample ablation average over (a forward over all
    # 1,344 of Winograd cost 0.5-1 s more per run, measured)
    patch_pairs: int = 64  # held-out counterfactual pairs for patching, path patching and circuit search ...
    patch_scored: int = 512  # ... or fewer pairs, when that many already hold this many scored positions
    role_path_pairs: int = 96  # held-out pairs for path patching between previous-token and induction heads
    dynamics_rows: int = 128  # held-out sequences each weight snapshot is replayed on

    # Thresholds.
    min_gap: float = 1.0  # clean - counterfactual metric below which no circuit is traced
    circuit_target: float = 0.9  # share of the clean - counterfactual gap a found circuit must keep
    path_claim: float = 0.5  # share of the gap a head-to-head path patch must recover to be named a path
    route_floor: float = 0.1  # path patches (all positions) resolved position by position from this share up
    route_positions: int = 6  # sender positions each such route is resolved at
    matters: float = 0.1  # |share of the gap| a head's patched output must recover at a position for the
    # head to be described there
    attention_shown: float = 0.2  # attention weight from which a key position is named
    unused_accuracy_drop: float = 0.02  # "unused": ablating loses at most this accuracy ...
    unused_logit_share: float = 0.9  # ... and keeps at least this share of the logit difference
    needed_accuracy_drop: float = 0.1  # "needed": ablating loses at least this accuracy ...
    needed_logit_share: float = 0.5  # ... or keeps less than this share of the logit difference
    collapse_top_share: float = 0.9  # a run predicting one token at this share of held-out positions has collapsed
    collapse_train_ratio: float = 0.5  # ... as has one whose train accuracy is below this times its peers' median
    order_blind_shuffle: float = 1e-3  # shuffle test max |dlogit| below which a model is order-blind
    shortcut_margin: float = 0.1  # an order-blind model within this of the best model's held-out accuracy
    # means the held-out split does not defeat the order-blind shortcut
    chance_margin: float = 0.1  # held-out accuracy within this of two-candidate chance (50%, where every
    # scored position names a foil) is "near chance": nothing learned
    neither_share: float = 0.5  # a run predicting neither the answer nor the foil at this share of
    # held-out scored positions is flagged
    foil_blind_wrong: int = 20  # wrong held-out predictions over all runs from which "no run ever
    # predicts the foil" is a check, not an accident of small numbers
    budget_near: float = 0.8  # a run solved at or after this share of its step budget is budget-limited:
    # attn-only-2x1 seed 2 solved at step 825 of 1000, and a change that only
    # altered float rounding left it unsolved at the cap (issue #27)

    def pair_count(self, heldout) -> int:
        """How many held-out pairs patching uses: `patch_pairs`, or as many as hold `patch_scored`
        scored positions. Every patch is a forward over all the pairs, and a task scored at ~25
        positions per sequence (induction) has a precise mean metric from ~20 of them."""
        scored_per_pair = len(heldout.answers) / max(len(heldout), 1)
        return max(1, min(self.patch_pairs, math.ceil(self.patch_scored / max(scored_per_pair, 1))))

    def traces(self, gap: float) -> bool:
        """Whether a run whose clean - counterfactual metric is `gap` gets a circuit traced (the one
        rule of the head search, the edge graph and `toylens.edges`). On |gap|, not gap: a model
        that reliably answers backwards (clean picks the foil, the counterfactual the answer)
        computes the difference between the pairs as surely as one that answers right, and every
        share of the gap is well defined with either sign; only a gap near 0 makes shares noise."""
        return abs(gap) >= self.min_gap


DEFAULT = ReportSettings()
