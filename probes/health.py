"""Run health: a run that collapsed to (nearly) one output, and a task whose held-out split an
order-blind model solves. Both decide how far the other numbers can be read, so the accuracy table
(`train`, `probes.accuracy`) and the report state them next to the numbers."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from probes.settings import DEFAULT, ReportSettings


def token_word(token: int, vocabulary: list[str] | None) -> str:
    return repr(vocabulary[token]) if vocabulary and 0 <= token < len(vocabulary) else f"token {token}"


def collapse_note(run, peers: list, vocabulary: list[str] | None = None,
                  settings: ReportSettings = DEFAULT) -> str | None:
    """Why `run` (a probes.accuracy.RunAccuracy) counts as collapsed, or None. Collapsed: it predicts
    one token at `collapse_top_share` of held-out scored positions without that being right as
    often, or its train accuracy is below `collapse_train_ratio` times the median of its peers
    (the other seeds of its model)."""
    heldout = run.splits["heldout"]
    limit = settings.collapse_top_share
    if heldout.top_share >= limit and heldout.accuracy.value < limit:
        return (f"collapsed: predicts {token_word(heldout.top_token, vocabulary)} at "
                f"{heldout.top_share:.0%} of held-out scored positions")
    others = [peer.splits["train"].accuracy.value for peer in peers if peer.seed != run.seed]
    if others:
        median, train = statistics.median(others), run.splits["train"].accuracy.value
        if train < settings.collapse_train_ratio * median:
            return (f"collapsed: train accuracy {train:.1%}, below {settings.collapse_train_ratio:g} x "
                    f"its peers' median {median:.1%}")
    return None


@dataclass(frozen=True)
class ShortcutAudit:
    """The best order-blind model (shuffle test below `order_blind_shuffle`) against the best model
    that reads order, by mean held-out accuracy over seeds."""

    blind_model: str
    blind_heldout: float
    blind_shuffle: float
    best_model: str
    best_heldout: float
    margin: float

    @property
    def defeated(self) -> bool:
        return self.best_heldout - self.blind_heldout > self.margin

    def words(self) -> str:
        basis = (f"{self.blind_model} is order-blind: the shuffle test moves its scored logits by at most "
                 f"{self.blind_shuffle:.1e}; held-out accuracy, mean over seeds")
        if self.defeated:
            return (f"shortcut audit: the held-out split defeats the order-blind shortcut ({self.blind_model} "
                    f"{self.blind_heldout:.1%} against {self.best_model} {self.best_heldout:.1%}; {basis})")
        relation = ("at least as high as" if self.blind_heldout >= self.best_heldout
                    else f"within {self.margin:.0%} of")
        return (f"shortcut audit FAILED: the held-out split does not defeat the order-blind shortcut: "
                f"{self.blind_model} reaches {self.blind_heldout:.1%}, {relation} "
                f"{self.best_model} ({self.best_heldout:.1%}), so held-out accuracy does not show that a model "
                f"reads word order ({basis}). See the plugin guide's 'Splits'.")


def shortcut_audit(models: list, settings: ReportSettings = DEFAULT) -> ShortcutAudit | None:
    """`models`: probes.accuracy.ModelAccuracy. None when the family has no order-blind model or
    nothing else to compare it with."""
    blind = [m for m in models if m.shuffle_max_logit_change < settings.order_blind_shuffle]
    reading = [m for m in models if m not in blind]
    if not blind or not reading:
        return None
    top_blind = max(blind, key=lambda m: m.heldout.value)
    best = max(reading, key=lambda m: m.heldout.value)
    return ShortcutAudit(top_blind.model_name, top_blind.heldout.value, top_blind.shuffle_max_logit_change,
                         best.model_name, best.heldout.value, settings.shortcut_margin)
