"""Run health: a run that collapsed to (nearly) one output or scores below picking either candidate
at random, a task whose foil no model ever predicts (a scored position off by one), and a task whose
held-out split an order-blind model solves. Each decides how far the other numbers can be read, so
the accuracy table (`train`, `probes.accuracy`) and the report state them next to the numbers."""

from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass
from enum import Enum

from probes.settings import DEFAULT, ReportSettings


def token_word(token: int, vocabulary: list[str] | None) -> str:
    return repr(vocabulary[token]) if vocabulary and 0 <= token < len(vocabulary) else f"token {token}"


def collapse_note(
    run, peers: list, vocabulary: list[str] | None = None, settings: ReportSettings = DEFAULT
) -> str | None:
    """Why `run` (a probes.accuracy.RunAccuracy) counts as collapsed, or None. Collapsed: it predicts
    one token at `collapse_top_share` of held-out scored positions without that being right as
    often, or its train accuracy is below `collapse_train_ratio` times the median of its peers
    (the other seeds of its model)."""
    heldout = run.splits["heldout"]
    limit = settings.collapse_top_share
    if heldout.top_share >= limit and heldout.accuracy.value < limit:
        return (
            f"collapsed: predicts {token_word(heldout.top_token, vocabulary)} at "
            f"{heldout.top_share:.0%} of held-out scored positions"
        )
    others = [peer.splits["train"].accuracy.value for peer in peers if peer.seed != run.seed]
    if others:
        median, train = statistics.median(others), run.splits["train"].accuracy.value
        if train < settings.collapse_train_ratio * median:
            return (
                f"collapsed: train accuracy {train:.1%}, below {settings.collapse_train_ratio:g} x "
                f"its peers' median {median:.1%}"
            )
    return None


def budget_note(run, settings: ReportSettings = DEFAULT) -> str | None:
    """Why `run`'s result may be its step budget's rather than its model's, or None (what follows
    "budget-limited: " where it is shown): it ran out of
    steps before validation solved or stalled, or it solved at `budget_near` of its budget or later
    (a run that close to the cap stops unsolved after a change as small as float rounding, so what
    it learned is then a conclusion about the budget). A stalled run stopped for its own reason."""
    from tasks.settings import StopReason

    if not run.max_steps:
        return None  # how training ended is unknown (a RunAccuracy built without its run)
    if run.stop_reason == StopReason.BUDGET:
        return f"stopped by its {run.max_steps}-step budget before validation solved or stalled"
    if run.stop_reason == StopReason.SOLVED and run.steps >= settings.budget_near * run.max_steps:
        return (
            f"solved at step {run.steps} of its {run.max_steps}-step budget ({run.steps / run.max_steps:.0%}), "
            "so a slightly slower run would have stopped unsolved"
        )
    return None


TWO_CANDIDATES = 0.5  # picking the answer or the foil at random


def candidate_note(run, settings: ReportSettings = DEFAULT) -> str | None:
    """Why `run`'s held-out predictions are suspect beyond collapse, or None: below two-candidate
    chance (every scored position names a foil, so 50% is what picking either candidate gets) for a
    run that reads order, or
    predicting neither the answer nor the foil at `neither_share` of the scored positions."""
    heldout = run.splits["heldout"]
    notes = []
    below = not math.isnan(heldout.foil_rate) and heldout.accuracy.value < TWO_CANDIDATES - settings.chance_margin
    # An order-blind run picking the foil is what a held-out split built against the order-blind
    # shortcut makes it do (the shortcut audit reports that), not a sign of a broken run.
    order_blind = run.shuffle_max_logit_change < settings.order_blind_shuffle
    if below and not order_blind:
        notes.append(
            f"below two-candidate chance: held-out {heldout.accuracy.value:.1%}, under the "
            f"{TWO_CANDIDATES:.0%} of picking the answer or the foil at random"
        )
    if heldout.other_rate >= settings.neither_share:
        notes.append(f"neither answer nor foil at {heldout.other_rate:.0%} of held-out scored positions")
    return "; ".join(notes) or None


def candidate_chance(models: list) -> float | None:
    """Two-candidate chance when every run's held-out scored positions name foils, else None (the
    chance level of a task without foils is not known here)."""
    rates = [run.splits["heldout"].foil_rate for m in models for run in m.runs]
    return TWO_CANDIDATES if rates and not any(math.isnan(r) for r in rates) else None


def foil_blind_note(models: list, settings: ReportSettings = DEFAULT) -> str | None:
    """A check when no run of any model ever predicts the foil on held-out data while they are
    often wrong: the foil is then no candidate at the scored position, the mark of a scored
    position one token off (the answer at p is tokens[p + 1])."""
    runs = [run.splits["heldout"] for m in models for run in m.runs]
    if not runs or any(math.isnan(s.foil_rate) for s in runs) or any(s.foil_rate > 0 for s in runs):
        return None
    wrong = sum(round(s.n * (1 - s.accuracy.value)) for s in runs)
    if wrong < settings.foil_blind_wrong:
        return None
    total = sum(s.n for s in runs)
    return (
        f"check the scored positions: no run of any model predicts the foil at a held-out scored position "
        f"(0 of {total} predictions over {len(runs)} runs) while {wrong} of them are wrong, so the foil is no "
        "candidate where the model is scored. The likely cause is a scored position one token off: the "
        "answer at scored position p is tokens[p + 1], so a task that lists the position of the answer itself, "
        "or of the token before the one that asks, scores the wrong prediction. See the plugin guide's "
        "'Build Examples'."
    )


def unpermuted_note(models: list) -> str | None:
    """Why there is no shortcut audit when no run's shuffle test had an order to permute."""
    if not models or not all(math.isnan(m.shuffle_max_logit_change) for m in models):
        return None
    return (
        "no shortcut audit: the shuffle test has no order to permute (no held-out example has two different "
        "tokens before its first scored position), so it shows no model order-blind and none reading order; "
        "compare the held-out accuracies with an order-blind model's (uniform attention, no positions) instead"
    )


class AuditVerdict(str, Enum):
    DEFEATED = "defeated"  # the held-out split defeats the order-blind shortcut
    FAILED = "failed"  # an order-blind model comes within the margin of the best model
    INCONCLUSIVE = "inconclusive"  # no model learned the task: nothing to defeat


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
    chance: float | None = None  # two-candidate chance, where known (candidate_chance)
    chance_margin: float = DEFAULT.chance_margin

    @property
    def learned(self) -> bool:
        """Some model that reads order is clear of chance (unknown chance: taken as learned)."""
        return self.chance is None or self.best_heldout > self.chance + self.chance_margin

    @property
    def verdict(self) -> AuditVerdict:
        if not self.learned:
            return AuditVerdict.INCONCLUSIVE
        return AuditVerdict.DEFEATED if self.best_heldout - self.blind_heldout > self.margin else AuditVerdict.FAILED

    @property
    def defeated(self) -> bool:
        return self.verdict is AuditVerdict.DEFEATED

    def words(self) -> str:
        basis = (
            f"{self.blind_model} is order-blind: the shuffle test moves its scored logits by at most "
            f"{self.blind_shuffle:.1e}; held-out accuracy, mean over seeds"
        )
        if self.verdict is AuditVerdict.INCONCLUSIVE:
            return (
                f"shortcut audit inconclusive: no model learned the task (the best, {self.best_model}, "
                f"reaches {self.best_heldout:.1%} held-out, within {self.chance_margin:.0%} of the "
                f"{self.chance:.0%} two-candidate chance; {self.blind_model} {self.blind_heldout:.1%}), so "
                f"there is no order-reading to defeat the shortcut with ({basis})"
            )
        if self.defeated:
            return (
                f"shortcut audit: the held-out split defeats the order-blind shortcut ({self.blind_model} "
                f"{self.blind_heldout:.1%} against {self.best_model} {self.best_heldout:.1%}; {basis})"
            )
        relation = "at least as high as" if self.blind_heldout >= self.best_heldout else f"within {self.margin:.0%} of"
        return (
            f"shortcut audit FAILED: the held-out split does not defeat the order-blind shortcut: "
            f"{self.blind_model} reaches {self.blind_heldout:.1%}, {relation} "
            f"{self.best_model} ({self.best_heldout:.1%}), so held-out accuracy does not show that a model "
            f"reads word order ({basis}); a model that cannot read order does "
            f"{'as well' if self.blind_heldout >= self.best_heldout else 'nearly as well'}, so the circuits "
            f"traced here are how each model does it, not a mechanism the task needs: a head or block called "
            f"'needed' is needed by that model only. See the plugin guide's 'Splits'."
        )


def shortcut_audit(
    models: list, settings: ReportSettings = DEFAULT, chance: float | None = None
) -> ShortcutAudit | None:
    """`models`: probes.accuracy.ModelAccuracy; `chance`: two-candidate chance where known
    (candidate_chance). None when the family has no order-blind model or nothing else to compare
    it with."""
    blind = [m for m in models if m.shuffle_max_logit_change < settings.order_blind_shuffle]
    # a NaN shuffle (no order to permute) makes a model neither order-blind nor shown to read order
    reading = [m for m in models if m not in blind and not math.isnan(m.shuffle_max_logit_change)]
    if not blind or not reading:
        return None
    top_blind = max(blind, key=lambda m: m.heldout.value)
    best = max(reading, key=lambda m: m.heldout.value)
    return ShortcutAudit(
        top_blind.model_name,
        top_blind.heldout.value,
        top_blind.shuffle_max_logit_change,
        best.model_name,
        best.heldout.value,
        settings.shortcut_margin,
        chance,
        settings.chance_margin,
    )


def family_audit(models: list, settings: ReportSettings = DEFAULT) -> ShortcutAudit | None:
    """The shortcut audit of a trained family, with its chance level measured from the runs."""
    return shortcut_audit(models, settings, candidate_chance(models))


EXIT_AUDIT = 1  # --strict: the audit did not pass (2 stays the exit code of bad input)


def strict_exit(models: list, settings: ReportSettings = DEFAULT) -> None:
    """With --strict: exit EXIT_AUDIT, saying so, when the shortcut audit failed or is inconclusive."""
    audit = family_audit(models, settings)
    if audit is not None and not audit.defeated:
        print(
            f"--strict: the shortcut audit is {audit.verdict.value}, so this exits with status {EXIT_AUDIT}",
            file=sys.stderr,
        )
        sys.exit(EXIT_AUDIT)
