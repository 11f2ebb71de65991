"""Typed values at the run folder's boundary: config.json's spec is read as a ModelSpec, metrics.json's
stop reason as a StopReason, and a stored value that is neither is refused in one line by the
command that reads it. The enums are written as their plain strings, so stored files and
report.json hold what they held before the enums existed."""

from __future__ import annotations

import json

import pytest

from common.jsonfiles import json_text
from models import ModelSpec
from models.spec import CHOICES, Attention, Norm, NormPlace, Positions
from probes.circuits.labels import LabelKind
from probes.circuits.oracle import Direction
from tasks.settings import StopReason
from tests.refusals import RUN, cli, copy_runs, edit_json, one_line


@pytest.mark.parametrize(
    "edit, fragments",
    [
        (lambda spec: spec.update(n_layers="two"), ("spec: model n_layers must be an integer", "'two'")),
        (lambda spec: spec.update(attention="linear"), ("spec: attention must be one of", "'linear'")),
        (lambda spec: spec.update(norm_place="middle"), ("spec: norm_place must be one of pre, post", "'middle'")),
        (lambda spec: spec.update(width=64), ("spec: model spec has unknown field(s) ['width']",)),
    ],
)
def test_a_malformed_stored_spec_is_refused_in_one_line_by_the_report(tiny_runs, tmp_path, edit, fragments):
    out = copy_runs(tiny_runs, tmp_path)
    config = out / RUN / "config.json"
    edit_json(config, lambda c: edit(c["spec"]), sign=True)  # re-signed: only the spec check can refuse it
    line = one_line(cli("probes.circuit", "report", str(out), "--jobs", "1"), str(config), *fragments)
    assert "retrain the run" in line


def test_an_unknown_stop_reason_is_refused_in_one_line_by_the_report(tiny_runs, tmp_path):
    from tasks.training.runs import metrics_sha256

    out = copy_runs(tiny_runs, tmp_path)
    path = out / RUN / "metrics.json"
    metrics = json.loads(path.read_text())
    metrics["stop_reason"] = "validation bored"
    metrics["sha256"] = metrics_sha256(metrics)  # re-signed: only the stop-reason check can refuse it
    path.write_text(json.dumps(metrics))
    one_line(
        cli("probes.circuit", "report", str(out), "--jobs", "1"),
        str(path),
        "stop_reason must be one of",
        "'validation bored'",
    )


def test_a_run_written_by_this_toylens_reads_back_typed(tiny_runs):
    from tasks.training.runs import find_runs

    for run in find_runs(tiny_runs):
        stored = json.loads((run.path / "config.json").read_text())
        assert isinstance(run.spec, ModelSpec) and run.spec.to_dict() == stored["spec"]
        assert all(isinstance(getattr(run.spec, field), kind) for field, kind in CHOICES.items())
        assert isinstance(run.metrics["stop_reason"], StopReason)
        assert run.metrics["stop_reason"].value == json.loads((run.path / "metrics.json").read_text())["stop_reason"]


@pytest.mark.parametrize("kind", [StopReason, LabelKind, Direction, Attention, Positions, Norm, NormPlace])
def test_the_enums_round_trip_through_json_as_their_strings(kind):
    for member in kind:
        text = json_text({"value": member, member: 1})  # as a value and as a key
        assert json.loads(text) == {"value": member.value, member.value: 1}
        assert kind(json.loads(text)["value"]) is member
        assert f"{member}" == str(member) == member.value  # sentences show the stored string


# A field read as "any value, checked member by member later" (a census's groups, a timeline's
# snapshots) that holds true or false is refused in one line, naming what it must be. Catches:
# a kind the field check accepts but has no words for (a KeyError traceback, found by the schema fuzz).
@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_where_any_value_is_allowed_is_refused_in_one_line(value):
    from common.cli import UsageError
    from common.jsonfiles import TYPE_WORDS, check_fields

    with pytest.raises(UsageError) as refused:
        check_fields({"groups": value}, {"groups": object}, "census.json", "move the folder away")
    assert str(refused.value) == (
        f"census.json: groups must be {TYPE_WORDS[object]}, got {value!r}; move the folder away"
    )


# A stored key with a newline (a hand-edited config.json's task params) is named by its repr where a
# message lists the fields that differ. Catches: a one-line refusal split over two lines (schema fuzz).
def test_a_differing_key_that_is_not_printable_is_named_on_one_line():
    from common.jsonfiles import differences

    assert differences({"task": {"params": {"\n": [], "nouns": 8}}}, {"task": {"params": {"nouns": 8}}}) == [
        "task.params.'\\n'"
    ]
