"""Accuracy at the scored positions, per run and per model over seeds, with confidence intervals,
the foil ("wrong answer") rate, the "other token" rate, a breakdown by group, and the shuffle test.

`toylens accuracy RUNS_DIR` prints the comparison and writes RUNS_DIR/summary.json.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from common.atomic import write_json
from common.cli import UsageError
from common.stages import timed
from common.stats import Interval, mean_interval, wilson
from models import Model

SUMMARY = "summary.json"


@dataclass(frozen=True)
class SplitAccuracy:
    n: int
    accuracy: Interval  # Wilson interval over scored predictions
    loss: float  # mean cross-entropy of the answers at the scored positions (nats)
    foil_rate: float
    other_rate: float
    by_group: dict[str, dict]
    top_token: int = -1  # the most often predicted token at the scored positions ...
    top_share: float = 0.0  # ... and the share of scored positions predicting it


@dataclass(frozen=True)
class RunAccuracy:
    model_name: str
    seed: int
    path: str
    steps: int
    splits: dict[str, SplitAccuracy]
    shuffle_max_logit_change: float
    # How training ended (metrics.json), for the budget check (probes.health.budget_note); not part
    # of what is measured on the weights, so not in the stored evaluation: '' / 0 when unknown.
    stop_reason: str = ""
    max_steps: int = 0


TRAINING_FIELDS = ("stop_reason", "max_steps")  # RunAccuracy fields read from the run, not measured


@dataclass(frozen=True)
class ModelAccuracy:
    model_name: str
    seeds: list[int]
    heldout: Interval  # mean over seeds, t interval
    train: Interval
    heldout_foil_rate: Interval
    shuffle_max_logit_change: float
    runs: list[RunAccuracy]
    collapsed: dict[int, str] = field(default_factory=dict)  # seed -> why it counts as collapsed
    heldout_without_collapsed: Interval | None = None  # mean over the other seeds, when any collapsed
    suspect: dict[int, str] = field(default_factory=dict)  # seed -> below chance / neither (probes.health)
    budget_limited: dict[int, str] = field(default_factory=dict)  # seed -> stopped at or near its step budget


def split_accuracy(scored, groups: list[str]) -> SplitAccuracy:
    from tasks.evaluate import foil_rate

    correct, foil = scored.correct, scored.chose_foil
    n = len(correct)
    top_token, top_share = scored.top_prediction
    row_groups = [groups[i] for i in scored.example_index.tolist()]
    by_group = {}
    for group in sorted(set(row_groups)):
        mask = [g == group for g in row_groups]
        group_correct = int(correct[mask].sum())
        by_group[group] = {
            "n": sum(mask),
            "accuracy": wilson(group_correct, sum(mask)).as_dict(),
            "foil_rate": foil_rate(foil[mask], scored.foils[mask]),
        }
    return SplitAccuracy(
        n=n,
        accuracy=wilson(int(correct.sum()), n),
        loss=scored.loss.item(),
        foil_rate=scored.foil_rate,
        other_rate=float((~correct & ~foil).float().mean()),  # wrong, and not the foil (any position)
        by_group=by_group,
        top_token=top_token,
        top_share=top_share,
    )


EVALUATION = "evaluation"  # metrics.json key: the RunAccuracy measured right after training
SHUFFLE_ROWS = 256  # held-out examples (evenly spread) the shuffle test permutes


@timed("evaluation")
def measure_accuracy(model: Model, batches: dict, model_name: str, seed: int, path, steps: int) -> RunAccuracy:
    from probes.shuffle import shuffle_test
    from tasks.data import spread_subset
    from tasks.evaluate import score_split

    splits = {}
    for name, batch in batches.items():
        scored, sample = score_split(model, batch)
        splits[name] = split_accuracy(scored, sample.groups)
    shuffle = shuffle_test(model, spread_subset(batches["heldout"], SHUFFLE_ROWS), seed=seed)
    return RunAccuracy(model_name, seed, str(path), steps, splits, shuffle.max_abs_logit_change)


def stored_accuracy(record: dict, path) -> RunAccuracy:
    """The RunAccuracy recorded in metrics.json; ValueError if any field is not of exactly its type
    (the caller then measures again rather than print it)."""
    splits = {
        name: SplitAccuracy(
            s["n"],
            interval(s["accuracy"]),
            number(s["loss"]),
            rate(s["foil_rate"]),
            rate(s["other_rate"]),
            {
                g: {
                    "n": count(v["n"]),
                    "accuracy": interval(v["accuracy"]).as_dict(),
                    "foil_rate": rate(v["foil_rate"]),
                }
                for g, v in s["by_group"].items()
            },
            token(s["top_token"]),
            rate(s["top_share"]),
        )
        for name, s in record["splits"].items()
    }
    if (
        set(splits) != {"train", "validation", "heldout"}
        or any(type(s.n) is not int for s in splits.values())
        or not isinstance(record["model_name"], str)
        or type(record["seed"]) is not int
    ):
        raise ValueError("not a RunAccuracy record")
    return RunAccuracy(
        record["model_name"],
        record["seed"],
        str(path),
        count(record["steps"]),
        splits,
        number(record["shuffle_max_logit_change"]),
    )


def number(value) -> float:
    if value is None:  # how write_json stores NaN (e.g. the foil rate of a task without foils)
        return math.nan
    if type(value) not in (int, float):
        raise ValueError(f"{value!r} is not a number")
    return value


def rate(value) -> float:
    value = number(value)
    if not (math.isnan(value) or 0 <= value <= 1):
        raise ValueError(f"{value!r} is not a rate")
    return value


def token(value) -> int:
    if type(value) is not int or value < -1:
        raise ValueError(f"{value!r} is not a token id (or -1)")
    return value


def count(value) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{value!r} is not a count")
    return value


def interval(fields: dict) -> Interval:
    if not isinstance(fields, dict) or set(fields) != {"value", "low", "high", "n"}:
        raise ValueError("not an interval")
    return Interval(rate(fields["value"]), rate(fields["low"]), rate(fields["high"]), count(fields["n"]))


@timed("accuracy")
def run_accuracy(run, load_model=None) -> RunAccuracy:
    """What training measured (in its worker, while the model was in memory), once the run's
    weights, loaded (every weight check: dtypes, shapes, finite values), still score its held-out
    accuracy; measured now when nothing usable was stored. `load_model()` gives the model (default:
    the run's, loaded). With how its training ended, for the budget check."""
    from tasks.settings import TrainSettings

    measured = measured_accuracy(run, load_model)
    training = (getattr(run, "config", None) or {}).get("training")
    if training is None:  # a run held in memory (a test's, a notebook's) records no training: unknown
        return measured
    return replace(
        measured,
        stop_reason=str(run.metrics.get("stop_reason", "")),
        max_steps=TrainSettings.from_dict(training).max_steps,
    )


def measured_accuracy(run, load_model=None) -> RunAccuracy:
    model = (load_model or run.load_model)()
    record = run.metrics.get(EVALUATION)
    if (
        isinstance(record, dict)
        and record.get("weights_sha256") == run.config.get("weights_sha256")
        and record.get("spec") == run.spec.to_dict()
        and record.get("model_name") == run.model_name
        and record.get("seed") == run.seed
    ):
        try:
            stored = stored_accuracy(record, run.path)
        except (KeyError, TypeError, ValueError, AttributeError):
            stored = None  # written by another version (or forged): measure again
        if stored is not None:
            check_stored(stored, model, run)
            return stored
    return measure_accuracy(model, run.batches(), run.model_name, run.seed, run.path, run.metrics["steps"])


def check_stored(stored: RunAccuracy, model: Model, run) -> None:
    """Refuse stored numbers the weights do not give: checksums catch edits, not a forger who
    recomputes them (all-zero weights with a stored 100%), so the held-out score is measured again.
    Up to 0.5% of the answers may differ: another CPU rounds near-tied logits the other way."""
    from tasks.evaluate import score_split

    recorded = stored.splits["heldout"].accuracy
    scored, _ = score_split(model, run.batches()["heldout"])
    correct, n = int(scored.correct.sum()), len(scored.correct)
    if n != recorded.n or abs(correct - round(recorded.value * n)) > max(1, n // 200):
        raise UsageError(
            f"{run.path / 'metrics.json'} records held-out accuracy {recorded.value:.1%} (n={recorded.n}) "
            f"but the run's weights score {correct / n:.1%} (n={n}) now: its files were altered "
            "(checksums can be recomputed); retrain the run"
        )


def model_accuracy(runs: list[RunAccuracy], vocabulary: list[str] | None = None) -> ModelAccuracy:
    from probes.health import budget_note, candidate_note, collapse_note
    from probes.shuffle import largest_change

    notes = {r.seed: note for r in runs if (note := collapse_note(r, runs, vocabulary))}
    suspect = {r.seed: note for r in runs if (note := candidate_note(r))}
    healthy = [r.splits["heldout"].accuracy.value for r in runs if r.seed not in notes]
    return ModelAccuracy(
        model_name=runs[0].model_name,
        seeds=[r.seed for r in runs],
        heldout=mean_interval([r.splits["heldout"].accuracy.value for r in runs]),
        train=mean_interval([r.splits["train"].accuracy.value for r in runs]),
        heldout_foil_rate=mean_interval([r.splits["heldout"].foil_rate for r in runs]),
        shuffle_max_logit_change=largest_change(r.shuffle_max_logit_change for r in runs),
        runs=runs,
        collapsed=notes,
        heldout_without_collapsed=mean_interval(healthy) if notes and healthy else None,
        suspect=suspect,
        budget_limited={r.seed: note for r in runs if (note := budget_note(r))},
    )


def pooled(runs: list[RunAccuracy], split: str = "heldout") -> Interval:
    """A Wilson interval over every run's scored positions of `split` taken together: how well the
    examples pin the seeds' accuracy down. A t interval over 3 seeds that all score 100% has zero
    width, which says nothing; this one still has the examples' uncertainty. It is not a statement
    about other seeds (their spread is the range over seeds)."""
    splits = [run.splits[split] for run in runs]
    return wilson(sum(round(s.accuracy.value * s.n) for s in splits), sum(s.n for s in splits))


def family_order(runs) -> list[str]:
    """Models in the task's own family order, then any others alphabetically."""
    family = list(runs[0].task.default_models())
    names = {run.model_name for run in runs}
    return [n for n in family if n in names] + sorted(names - set(family))


def compare_runs(runs_dir: Path) -> list[ModelAccuracy]:
    from tasks.training.runs import find_runs

    runs = find_runs(runs_dir)
    results = [run_accuracy(run) for run in runs]
    vocabulary = runs[0].task.vocabulary()
    return [model_accuracy([r for r in results if r.model_name == name], vocabulary) for name in family_order(runs)]


def write_summary(runs_dir: Path, models: list[ModelAccuracy]) -> Path:
    path = Path(runs_dir) / SUMMARY
    write_json(path, {"models": [asdict(m) for m in models]})
    return path
