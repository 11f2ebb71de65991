import json
import math


from models import ModelSpec, build_model
from probes.accuracy import SUMMARY, compare_runs, write_summary
from probes.shuffle import shuffle_test
from common.stats import mean_interval, wilson
from tasks.data import task_dataset, to_batch


def heldout_batch(task, seed=0):
    return to_batch(task_dataset(task, seed)["heldout"])


def test_uniform_model_is_order_blind_and_softmax_model_is_not(small_winograd):
    batch = heldout_batch(small_winograd)
    spec = dict(d_model=32, n_heads=2, n_ctx=17, d_vocab=len(small_winograd.vocabulary()))
    bag = build_model(ModelSpec(attention="uniform", positions="none", **spec))
    attention = build_model(ModelSpec(**spec))
    assert shuffle_test(bag, batch).max_abs_logit_change < 1e-4
    assert shuffle_test(attention, batch).max_abs_logit_change > 1e-2


def test_wilson_interval_matches_known_values():
    interval = wilson(8, 10)
    assert math.isclose(interval.low, 0.4902, abs_tol=1e-3) and math.isclose(interval.high, 0.9433, abs_tol=1e-3)
    assert wilson(0, 480).low == 0.0 and wilson(0, 480).high < 0.01


def test_mean_interval_over_seeds():
    interval = mean_interval([0.9, 1.0, 0.95])
    assert math.isclose(interval.value, 0.95) and interval.low < 0.95 < interval.high
    assert math.isnan(mean_interval([0.5]).low)


def test_comparison_summary_holds_every_number(tiny_runs):
    models = compare_runs(tiny_runs)
    assert [m.model_name for m in models] == ["bag-of-words", "attn-only-2x1"]
    path = write_summary(tiny_runs, models)
    summary = json.loads(path.read_text())
    assert path.name == SUMMARY
    bag = summary["models"][0]
    heldout = bag["runs"][0]["splits"]["heldout"]
    assert heldout["n"] == len(heldout_batch(tiny_runs_task(tiny_runs)).answers)
    assert abs(heldout["foil_rate"] + heldout["other_rate"] + heldout["accuracy"]["value"] - 1) < 1e-6
    assert set(heldout["by_group"]) == {"crosser", "crossed"}
    assert bag["shuffle_max_logit_change"] < 1e-4


def tiny_runs_task(runs_dir):
    from tasks.training.runs import find_runs

    return find_runs(runs_dir)[0].task


def test_same_seed_gives_identical_metrics(tmp_path, small_winograd):
    from tests.conftest import TINY_SPECS, train_tiny

    spec = {"attn-only-2x1": TINY_SPECS["attn-only-2x1"]}
    first = train_tiny(small_winograd, tmp_path / "a", spec, steps=60)
    second = train_tiny(small_winograd, tmp_path / "b", spec, steps=60)
    read = lambda root: json.loads((root / "attn-only-2x1/seed0/metrics.json").read_text())  # noqa: E731
    a, b = read(first), read(second)
    for key in ("train_seconds", "sha256"):  # wall time, and the checksum over it
        a.pop(key), b.pop(key)
    assert a == b
    logs = [(root / "attn-only-2x1/seed0/log.jsonl").read_text().splitlines() for root in (first, second)]
    strip = lambda line: {k: v for k, v in json.loads(line).items() if k != "seconds"}  # noqa: E731
    assert [strip(line) for line in logs[0]] == [strip(line) for line in logs[1]]


def test_printed_table_shows_each_groups_held_out_accuracy(tiny_runs):
    from probes.report.render import accuracy_table

    models = compare_runs(tiny_runs)
    printed = accuracy_table(models)
    for model in models:
        for run in model.runs:
            for group, values in run.splits["heldout"].by_group.items():
                assert f"{group} {values['accuracy']['value']:.0%}" in printed


def test_the_foil_rate_counts_only_positions_with_a_foil_and_is_absent_without_any():
    import torch

    from probes.accuracy import split_accuracy
    from probes.report.words import foil_clause
    from tasks.base import NO_FOIL
    from tasks.data import Batch
    from tasks.evaluate import score_logits

    tokens, positions = [[1, 2, 3], [1, 3, 2], [2, 1, 3]], [[1], [1], [1]]
    logits = torch.zeros(3, 4)
    logits[:, 2] = 1.0  # always predicts token 2
    no_foils = Batch.from_tokens(tokens, positions)
    scored = score_logits(logits, no_foils)
    assert math.isnan(split_accuracy(scored, no_foils.groups).foil_rate)
    assert foil_clause(scored.foil_rate) == ""  # no "0% foil" for a task that names none
    some = Batch.from_tokens(tokens, positions, foils=[[2], [NO_FOIL], [NO_FOIL]])
    assert split_accuracy(score_logits(logits, some), some.groups).foil_rate == 1.0  # 1 of the 1 with a foil


def test_stored_json_is_strict_and_a_missing_measurement_reads_back(tmp_path):
    from common.atomic import write_json
    from common.jsonfiles import canonical_sha256
    from probes.accuracy import number, rate

    payload = {"foil_rate": float("nan"), "low": float("-inf"), "n": [1.5, float("inf")]}
    write_json(tmp_path / "x.json", payload)

    def refuse(constant):
        raise ValueError(f"bare {constant} is not JSON")

    stored = json.loads((tmp_path / "x.json").read_text(), parse_constant=refuse)  # as jq or JavaScript read it
    assert stored == {"foil_rate": None, "low": None, "n": [1.5, None]}
    assert canonical_sha256(stored) == canonical_sha256(payload)  # a checksum taken before writing still holds
    assert math.isnan(number(stored["foil_rate"]))
    assert math.isnan(rate(stored["foil_rate"]))
