"""Tasks whose relevant positions vary per example (tests/plugins/varying_tasks.py, written from the
plugin guide alone): the summaries, labels, census, health checks and training loop must be as right
as the edge oracle on them.

markcopy (`c M f a d b ?` -> f, the marker anywhere) is learned by a 2-layer attention-only model in a
few hundred steps with L0H0 -> L1H0.k: the previous-token head's write at the value position, which
varies per example, so no single position carries the path (37% at the best one, 63% with the
sender at every position, measured). binding-early is binding scored one token early.
"""

from __future__ import annotations

import json

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from models.spec import Attention
from probes.settings import ReportSettings
from tests.refusals import PLUGINS, finished, fixture_plugins_on_path

SMALL = ReportSettings(ablation_rows=128, reference_rows=128, patch_pairs=32)


@pytest.fixture(scope="module", autouse=True)
def varying_plugins():
    """The fixture plugins, installed for this module only (a dist-info folder on sys.path)."""
    yield from fixture_plugins_on_path("varying_tasks")


def train(task_name: str, out: Path, models: tuple[str, ...], seeds=(0,), params=None, **overrides) -> Path:
    from tasks.registry import build_task, get_task_class
    from tasks.settings import model_settings
    from toylens.family import plan_family, train_family

    task = build_task(get_task_class(task_name), params or {})
    settings = {name: model_settings(task, name, overrides) for name in task.default_models()}
    train_family(plan_family(task, list(models), list(seeds), settings, out), progress=False)
    return out


@pytest.fixture(scope="module")
def markcopy_runs(tmp_path_factory) -> Path:
    """Three seeds of the attention model (solved by step 250-300) and one short bag of words (what
    the shortcut audit compares with)."""
    out = train("markcopy", tmp_path_factory.mktemp("markcopy") / "runs", ("attn-only-2x1",), seeds=(0, 1, 2))
    return train("markcopy", out, ("bag-of-words",), max_steps=150, eval_every=50)


@pytest.fixture(scope="module")
def markcopy_analyses(markcopy_runs):
    """(RunAnalysis, EdgeRun) of every attention run, on the small report basis."""
    from probes.report.edge_part import measure_edge_circuit
    from probes.report.parts import RunContext
    from probes.report.run_analysis import analyse_run
    from tasks.training.runs import find_runs

    out = []
    for run in find_runs(markcopy_runs):
        if run.model_name == "attn-only-2x1":
            context = RunContext(run, None, SMALL)
            out.append((run, analyse_run(context), measure_edge_circuit(context)))
    return out


@pytest.fixture(scope="module")
def early_runs(tmp_path_factory) -> Path:
    """binding scored at `?` (one token early): its answer is the queried variable, never a value."""
    return train(
        "binding-early",
        tmp_path_factory.mktemp("early") / "runs",
        ("bag-of-words", "attn-only-1x1"),
        params={"examples": 600},
        max_steps=150,
        eval_every=50,
    )


# 1. The summary names a path from the graph view when its position varies, exactly the head-to-head
# edges the edge oracle finds at the claim. Catches: "no head-to-head path recovers 50%" while the
# sender-at-every-position table (and the oracle) show one, because only single positions were read.
def test_the_summary_names_the_paths_the_edge_oracle_names(markcopy_analyses):
    from probes.report.words import describe, paths_of, views_agree

    named_any = False
    for run, analysis, edges in markcopy_analyses:
        assert analysis.circuit is not None, f"seed {run.seed}: {analysis.note}"
        agreement = views_agree(analysis, edges.result, SMALL)
        assert agreement.agree, agreement.words
        words = describe(analysis, SMALL, analysis.vocabulary)
        for name in agreement.edge_view:
            assert name in words
            named_any = True
        strong = [p for p in paths_of(analysis) if p.everywhere is not None and p.everywhere >= SMALL.path_claim]
        assert not (strong and "no head-to-head path" in words)
    assert named_any, "no run has a head-to-head edge at the claim: the fixture no longer tests the rule"


def test_the_report_says_whether_the_two_views_agree(markcopy_analyses):
    from probes.report.measure import views_section
    from probes.report.parts import MeasuredRun

    measured = [
        MeasuredRun(run.model_name, run.seed, {"runs": analysis, "edge_circuits": edges})
        for run, analysis, edges in markcopy_analyses
    ]
    section = views_section(measured, SMALL)
    assert len(section.summary) == 3 and all(
        "agree: both name heads L0H0, L1H0 and the paths L0H0 -> L1H0.k" in line for line in section.summary
    )


# The mechanism itself, by role: the previous-token head matters at the value (whose position varies)
# and attends the marker from there; the reading head attends the value from the query. Catches:
# attention summarised by absolute position only (an average over examples whose marker sits elsewhere).
def test_roles_give_the_mechanism_where_positions_vary(markcopy_analyses):
    from probes.report.words import role_clause

    run, analysis, _ = markcopy_analyses[0]
    view = analysis.roles
    assert view is not None and set(view.roles) == {"marker", "value", "query"}
    reader = max(analysis.circuit.kept, key=lambda head: head.layer)
    assert float(view.attention["query"]["value"][reader.layer, reader.head]) > 0.5
    assert float(view.recovered["query"][reader.layer, reader.head]) > 0.5
    assert "from query attends value" in role_clause(analysis, SMALL)
    # Labels by role (issue 56): the summary cell and the story name no absolute position of a layout
    # whose marker moves; the query, at position 7 in every example, is named by its role.
    from probes.report.story import heads_line
    from probes.report.summary import compact_circuit

    assert analysis.places == {7: "query"}
    cell = compact_circuit(analysis, SMALL)
    assert "@value" in cell and "@p" not in cell, cell
    assert "matters at value" in heads_line(analysis, SMALL) and " p1 " not in heads_line(analysis, SMALL)


# 2. The census counts one mechanism once across seeds: labels name components and heads, never a
# position or the tokens there. Catches: "K-composition L0H0->L1H0 at p2 (M, g, ...)" and "... at
# p4 (M, f, ...)" counted as two circuits, and seeds read as "no single path"; and the layer-0 head,
# read only through the layer-1 keys and values, named by its attention at the scored position (it
# "attends the current token" in some seeds and not in others: one circuit counted as two).
def test_the_census_counts_one_mechanism_once_across_seeds(markcopy_runs, markcopy_analyses):
    """The labels the census counts (from each run's circuit.json facts) and its grouping of them;
    the signed files around them are tests/test_sweep_reliability.py's."""
    from probes.census import group_census
    from probes.circuits.labels import CircuitSummary, circuit_label
    from probes.report.words import circuit_summary

    members = []
    for run, analysis, _ in markcopy_analyses:
        stored = CircuitSummary.from_dict(json.loads(json.dumps(circuit_summary(analysis).to_dict())))  # as stored
        label = circuit_label(stored)
        members.append((run, label.kind, label.text, None))
    group = group_census("attn-only-2x1", "default", {}, members, 0)
    # Labelled by the mechanism signature (probes.circuits.signature): layers and roles, no head index.
    assert [s.count for s in group.circuits] == [3] and "L0H0" not in group.circuits[0].label
    assert group.named.count == 3


# 3. A plugin scored one token early is flagged by name, and so is the below-chance collapse it
# causes. Catches: every check passing while no model ever picks the foil (the position scored is
# the one before the question's answer).
def test_the_off_by_one_plugin_and_the_below_chance_collapse_are_flagged(early_runs, markcopy_runs):
    from probes.accuracy import compare_runs
    from probes.health import foil_blind_note

    models = compare_runs(early_runs)
    note = foil_blind_note(models)
    assert note is not None and "one token off" in note and "tokens[p + 1]" in note
    one = next(m for m in models if m.model_name == "attn-only-1x1")
    assert "below two-candidate chance" in one.suspect[0] and "neither answer nor foil" in one.suspect[0]
    assert foil_blind_note(compare_runs(markcopy_runs)) is None  # a healthy task raises no check


def test_below_two_candidate_chance_is_flagged_from_the_rates():
    from common.stats import wilson
    from probes.accuracy import RunAccuracy, SplitAccuracy
    from probes.health import candidate_note

    def run(correct: int, foil: float, other: float, shuffle: float = 1.0):
        split = SplitAccuracy(1000, wilson(correct, 1000), 2.0, foil, other, {}, 3, 0.83)
        return RunAccuracy("attn-only-1x1", 0, "", 100, {"heldout": split}, shuffle)

    note = candidate_note(run(49, 0.05, 0.90))  # the 4.9%: one prediction at 83%
    assert "below two-candidate chance: held-out 4.9%" in note and "neither answer nor foil at 90%" in note
    assert candidate_note(run(600, 0.4, 0.0)) is None
    assert candidate_note(run(300, float("nan"), 0.1)) is None  # no foils: chance is not 50%
    # an order-blind run (shuffle ~0) picking the foil: the defeated shortcut the audit reports
    assert candidate_note(run(80, 0.92, 0.0, shuffle=3.8e-6)) is None
    assert (
        candidate_note(run(49, 0.05, 0.90, shuffle=3.8e-6))
        == "neither answer nor foil at 90% of held-out scored positions"
    )


# 4. The audit is inconclusive when no model learned the task, and --strict makes a failed or
# inconclusive audit exit 1, saying so. Catches: "the split defeats the order-blind shortcut" with
# the best model at 26%, and exit 0 when the audit fails.
def test_the_audit_is_inconclusive_without_a_learned_model_and_strict_exits_1(early_runs, markcopy_runs, capsys):
    from probes.accuracy import compare_runs
    from probes.health import AuditVerdict, family_audit
    from toylens.accuracy import main

    audit = family_audit(compare_runs(early_runs))
    assert audit.verdict is AuditVerdict.INCONCLUSIVE and "inconclusive: no model learned the task" in audit.words()
    assert family_audit(compare_runs(markcopy_runs)).verdict is AuditVerdict.DEFEATED

    # `toylens accuracy` itself, in this process (the plugins are on its path for this module): a
    # subprocess each would spend most of its time importing torch.
    def accuracy(*args):
        return finished(main, list(args), capsys)

    code, _, stderr = accuracy(str(early_runs), "--strict")
    assert code == 1, stderr
    assert "--strict: the shortcut audit is inconclusive, so this exits with status 1" in stderr
    assert accuracy(str(early_runs))[0] == 0
    assert accuracy(str(markcopy_runs), "--strict")[0] == 0


def test_strict_exits_1_on_a_failed_audit(capsys):
    from types import SimpleNamespace

    from common.stats import Interval
    from probes.health import strict_exit

    def model(name, heldout, shuffle):
        return SimpleNamespace(
            model_name=name, heldout=Interval(heldout, heldout, heldout, 3), shuffle_max_logit_change=shuffle, runs=[]
        )

    with pytest.raises(SystemExit) as stopped:
        strict_exit([model("bag-of-words", 0.95, 1e-6), model("block-1", 1.0, 5.0)])
    assert stopped.value.code == 1 and "audit is failed" in capsys.readouterr().err
    strict_exit([model("bag-of-words", 0.2, 1e-6), model("block-1", 1.0, 5.0)])  # passes: returns


# 5. Roles are checked like every other field; bad ones are refused with one line.
@pytest.mark.parametrize(
    "roles, fragment",
    [
        ({"binder end": 1}, "role name 'binder end'"),
        ({"end": 9}, "role 'end' at 9"),
        ({"end": True}, "role 'end' at True"),
    ],
)
def test_bad_roles_are_refused(roles, fragment):
    from tasks.base import Example
    from tasks.validate import check_example
    from common.cli import UsageError

    task = type("T", (), {"name": "t"})()
    with pytest.raises(UsageError, match=fragment):
        check_example(task, "train example 0", Example((0, 1, 2, 3), (1,), roles=roles), 4)


def test_examples_of_a_split_name_the_same_roles():
    from common.cli import UsageError
    from tasks.base import Example
    from tasks.validate import check_role_names

    task = type("T", (), {"name": "t"})()
    with pytest.raises(UsageError, match="train example 1 names roles"):
        check_role_names(task, "train", [Example((0, 1, 2), (0,), roles={"a": 0}), Example((0, 1, 2), (0,))])


def test_roles_survive_the_cache_and_batches(markcopy_runs):
    from tasks.data import select_rows
    from tasks.training.runs import find_runs

    run = find_runs(markcopy_runs)[0]
    heldout = run.batches()["heldout"]
    examples = run.task.generate(run.seed)["heldout"]
    assert heldout.roles["marker"].tolist() == [e.roles["marker"] for e in examples]
    picked = select_rows(heldout, [3, 1])
    assert picked.roles["value"].tolist() == [examples[3].roles["value"], examples[1].roles["value"]]


# 6. One example's attention, by its own tokens and roles, for the report and the notebook.
def test_the_per_example_attention_view(markcopy_runs):
    from probes.attention import example_attention
    from probes.report.figures import example_attention_figure
    from tasks.training.runs import find_runs

    run = next(r for r in find_runs(markcopy_runs) if r.model_name == "attn-only-2x1")
    heldout, vocabulary = run.batches()["heldout"], run.task.vocabulary()
    view = example_attention(run.load_model(), heldout, 5, vocabulary)
    marker = int(heldout.roles["marker"][5])
    assert view.tokens[marker] == "M" and view.roles[marker] == "marker"
    assert view.rows.shape == (1, 2, 1, len(view.tokens)) and torch.allclose(view.rows.sum(-1), torch.ones(1, 2, 1))
    figure = example_attention_figure(view)
    assert "M [marker]" in [t.get_text() for t in figure.axes[0].get_xticklabels()]


# 7. Small things: a plugin's own `python -m` names itself; `--seeds` takes one form everywhere, a bare
# number (a count once, one seed in sweep) is refused with one line saying what to write; the
# standard family is public.
def run_python(*args):
    import os

    env = {**os.environ, "PYTHONPATH": str(PLUGINS)}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)


def test_a_plugins_own_entry_names_itself_in_its_usage():
    shown = run_python("-m", "varying_tasks", "train", "--help")
    assert shown.returncode == 0 and shown.stdout.startswith("usage: python -m varying_tasks train")


def test_seeds_take_one_form_and_a_bare_number_says_what_to_write():
    import argparse

    from toylens.arguments import seeds_option

    assert seeds_option("0-2") == [0, 1, 2] and seeds_option("0,3,7") == [0, 3, 7] and seeds_option("5-5") == [5]
    with pytest.raises(argparse.ArgumentTypeError, match="write 0-2 for 3 seeds .*, or 3-3 for seed 3 alone"):
        seeds_option("3")
    with pytest.raises(argparse.ArgumentTypeError, match="write 0-0 for seed 0 alone"):
        seeds_option("0")


def test_standard_family_is_public():
    import toylens

    family = toylens.standard_family(d_model=32, layers=(1, 2))
    assert list(family) == ["bag-of-words", "attn-only-1x1", "attn-only-2x1", "block-1", "block-2"]
    assert family["bag-of-words"].attention == Attention.UNIFORM and family["attn-only-2x1"].mlp is False


# 8. Training: every setting is a flag, per-model settings come from the plugin, the command line wins.
def test_every_training_setting_is_a_flag_and_model_settings_apply():
    from dataclasses import fields

    from tasks.settings import StopMetric, TrainSettings, model_settings
    from toylens.arguments import training_overrides

    shown = run_python("-m", "toylens", "train", "markcopy", "--help").stdout
    for field in fields(TrainSettings):
        assert ("--steps" if field.name == "max_steps" else "--" + field.name.replace("_", "-")) in shown
    task = type(
        "T",
        (),
        {
            "default_training": lambda self: {"lr": 3e-3},
            "model_training": lambda self, name: {"lr": 1e-4} if name == "block-2" else {},
        },
    )()
    assert model_settings(task, "block-2", {}).lr == 1e-4 and model_settings(task, "block-1", {}).lr == 3e-3
    args = type("A", (), {"lr": 0.02, "stop_metric": "accuracy"})()
    chosen = model_settings(task, "block-2", training_overrides(args))
    assert chosen.lr == 0.02 and chosen.stop_metric is StopMetric.ACCURACY


# A token that is punctuation is quoted where prose shows it. Catches: "kept at p11 ;; patching ..."
# (the token ';' read as the sentence's clause separator).
def test_punctuation_tokens_are_quoted_in_position_labels():
    from probes.attention import position_labels

    tokens = torch.tensor([[0, 1, 2], [0, 1, 3]])
    labels = position_labels(tokens, ["a", ";", "=", ","])
    assert labels[:2] == ["p0 a", "p1 ';'"] and labels[2] == "p2 ('=', ',', ...)"


# Expected-circuit scoring says how many expected edges the circuit holds, beside AUROC. Catches:
# AUROC (expected) 0.96 for a run using another mechanism that shares 2 of its 4 expected edges.
def test_expected_circuit_recall_is_reported_beside_auroc(markcopy_analyses):
    import dataclasses

    from probes.circuits.methods.scores import expected_recall
    from probes.report.edge_render import markdown_lines

    ranked, truth = torch.tensor([0.9, 0.1, 0.8, 0.0, 0.5]), torch.tensor([True, True, False, False, True])
    assert expected_recall(ranked, truth) == (2, 3)
    result = markcopy_analyses[0][2].result
    inside, outside = list(result.circuit.edges), [e for e in result.graph.edges if e not in result.circuit.edges]
    expected = frozenset(inside[:2] + outside[:2])
    text = "\n".join(markdown_lines(dataclasses.replace(result, expected=expected), "run"))
    assert "2 of 4 expected edges are in the smallest oracle circuit (recall 50%" in text
    assert f"missing: {', '.join(sorted(map(str, outside[:2])))}" in text
