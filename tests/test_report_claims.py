"""The report says exactly what it measured: one basis per number, scales with a null, no claim
that is true by construction passed off as a finding, no path below threshold, heads described
where they matter, collapsed runs flagged, verdicts on the logit difference, the notebook's
ablation equal to the report's, and a shortcut audit. Hand-built models where the right wording is
known; each test names the break it catches."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from models import ModelSpec, UsageError, build_model
from probes.ablation import Ablation, AblationResult, ablate, training_reference
from probes.accuracy import RunAccuracy, SplitAccuracy, model_accuracy
from models.components import Head
from probes.circuits.search import Circuit, circuit_edges, faithfulness, head_graph, upstream_complete
from probes.report.measure import measure_run
from probes.report.parts import RunContext
from probes.patching import activation_patching
from probes.settings import DEFAULT, ReportSettings
from common.stats import Interval, share
from probes.report.words import attention_words, describe, faithfulness_clause, seed_agreement, verdict
from tasks.data import Batch
from test_patching import hand_batch, hand_built

WORDS = ["A", "B", "x", "y"]
A, B, X, Y = range(4)


def mirror_spec() -> ModelSpec:
    return ModelSpec(n_layers=1, d_model=8, n_heads=1, mlp=False, norm=None, positions="none", n_ctx=4, d_vocab=4)


def mirror_model(bias_to_a: float = 0.0):
    """1 layer x 1 head, no norm, no positions. The head at the last position attends to the one A
    or B in `x T y y` and writes it to the unembedding: answer T beats foil by +2 on the clean
    input and by -2 on the counterfactual (T swapped), a mirror image, as in Winograd."""
    model = build_model(mirror_spec(), seed=0)
    state = {name: torch.zeros_like(value) for name, value in model.state_dict().items()}
    state["embed.weight"][:, :4] = torch.eye(4) * 2
    state["blocks.0.attn.q.weight"][0, Y] = 5.0
    state["blocks.0.attn.k.weight"][0, A] = state["blocks.0.attn.k.weight"][0, B] = 5.0
    state["blocks.0.attn.v.weight"][0, A] = state["blocks.0.attn.v.weight"][1, B] = 1.0
    state["blocks.0.attn.o.weight"][4, 0] = state["blocks.0.attn.o.weight"][5, 1] = 1.0
    state["unembed.weight"][A, 4] = state["unembed.weight"][B, 5] = 1.0
    state["unembed.bias"][A] = bias_to_a
    model.load_state_dict(state)
    return model.eval()


def mirror_batch(n: int = 40) -> Batch:
    answers = torch.tensor([A, B] * (n // 2))
    foils = B + A - answers
    rows = [[X, int(t), Y, Y, int(t)] for t in answers]
    partners = [[X, int(f), Y, Y, int(f)] for f in foils]
    return Batch(
        tokens=torch.tensor(rows),
        lengths=torch.full((n,), 5),
        example_index=torch.arange(n),
        positions=torch.full((n,), 3),
        answers=answers,
        foils=foils,
        groups=["g"] * n,
        counterfactual=torch.tensor(partners),
    )


class HandRun:
    """What the report reads of a run, for a hand-built model; counts model loads."""

    def __init__(self, model, batches: dict, name: str = "hand", seed: int = 0):
        self.model, self.loaded = model, 0
        self.model_name, self.seed, self.path = name, seed, Path("hand-run-not-on-disk")
        self.spec = ModelSpec(
            n_layers=model.cfg.n_layers,
            d_model=model.cfg.d_model,
            n_heads=model.cfg.n_heads,
            mlp=not model.cfg.attn_only,
            n_ctx=model.cfg.n_ctx,
            d_vocab=model.cfg.d_vocab,
        )
        self.metrics = {"steps": 0}
        self.task = SimpleNamespace(vocabulary=lambda: WORDS, domain=lambda: None)
        self._batches = batches

    def load_model(self, device=None):
        self.loaded += 1
        return self.model if device is None else self.model.to(device)

    def batches(self) -> dict:
        return self._batches


def mirror_run(bias_to_a: float = 0.0, n: int = 40):
    batch = mirror_batch(n)
    return HandRun(mirror_model(bias_to_a), {"train": batch, "validation": batch, "heldout": batch})


@pytest.fixture(scope="module")
def mirror_measured(tmp_path_factory):
    run = mirror_run()
    measured = measure_run(run, tmp_path_factory.mktemp("report"))
    return run, measured


# 1. One basis: the ablation sweep, the circuit's ablation and the accuracy table measure the same
# examples. Catches: the circuit ablated on the whole split while the sweep uses a subsample.
def test_every_ablation_number_uses_the_stated_rows(tmp_path):
    run = mirror_run(n=40)
    settings = ReportSettings(ablation_rows=20)
    context = RunContext(run, tmp_path, settings)
    analysis = measure_run(run, tmp_path, settings).results["runs"]
    ablations = [r for results in analysis.ablations.values() for r in results] + [analysis.circuit_ablation]
    assert {r.n for r in ablations} == {len(context.sample.answers)} == {20}
    assert analysis.basis.ablation == 20 and analysis.basis.heldout == 40
    assert "on 20 of 40 held-out examples" in describe(analysis, settings, WORDS)


def test_with_the_whole_split_the_unablated_row_is_the_accuracy_table(mirror_measured):
    _, measured = mirror_measured
    analysis = measured.results["runs"]
    assert analysis.ablations[Ablation.MEAN][0].accuracy == analysis.accuracy.splits["heldout"].accuracy.value


# 2. A scale with a null. Knocking out the only head leaves nothing, and the counterfactual
# mirrors the clean input: the gap share reads 50%, the null scale 0. Catches: knockouts or
# faithfulness reported on the gap scale alone, or a null scale normalised to the counterfactual.
def test_total_loss_is_zero_on_the_null_scale_though_half_the_gap(mirror_measured):
    _, measured = mirror_measured
    circuit = measured.results["runs"].circuit
    knockout = circuit.knockout[Head(0, 0)]
    assert knockout.clean == pytest.approx(2.0, abs=1e-3) and knockout.corrupt == pytest.approx(-2.0, abs=1e-3)
    assert knockout.recovered == pytest.approx(0.5, abs=1e-3)
    assert knockout.normalised == pytest.approx(0.0, abs=1e-3)


def test_percentages_never_read_minus_zero():
    from probes.report.words import pct

    assert [pct(-0.001), pct(0.0), pct(-0.01), pct(0.5), pct(math.nan)] == ["0%", "0%", "-1%", "50%", "n/a"]


def test_share_is_guarded_against_a_zero_gap():
    assert math.isnan(share(1.0, 2.0, 2.0))
    assert torch.isnan(share(torch.ones(3), 0.5, 0.5)).all()
    assert share(1.5, 1.0, 3.0) == 0.25


# 3. Faithfulness true by construction is called that. Catches: "faithfulness 100%" for a circuit
# holding every head output upstream of the scored logits.
def test_a_circuit_keeping_everything_upstream_says_faithfulness_is_1_by_construction():
    model, batch = hand_built("q"), hand_batch(32)  # 2 layers x 1 head, scored at p3
    graph = head_graph(model, batch.inputs.shape[1])

    def complete(kept):
        return upstream_complete(graph, circuit_edges(graph, kept), batch)

    upstream = {Head(0, 0): None, Head(1, 0): (3,)}
    assert complete(upstream)
    assert not complete({Head(0, 0): (1, 2, 3), Head(1, 0): (3,)})  # p0 ablated
    assert not complete({Head(0, 0): None, Head(1, 0): (2,)})
    result = faithfulness(model, batch, upstream, batch)
    assert result.normalised == pytest.approx(1.0, abs=1e-5)
    circuit = Circuit(upstream, result, result, {}, [], upstream=True, head_upstream=True)
    words = faithfulness_clause(circuit)
    assert "1 by construction" in words and "faithfulness 1.00" not in words and "%" not in words
    partial = dataclasses.replace(circuit, upstream=False, head_upstream=False)
    assert "by construction" not in faithfulness_clause(partial)


def test_the_search_marks_a_one_head_circuit_at_its_scored_position_as_everything(mirror_measured):
    _, measured = mirror_measured
    analysis = measured.results["runs"]
    assert analysis.circuit.kept == {Head(0, 0): (3,)} and analysis.circuit.upstream
    assert "1 by construction" in describe(analysis, DEFAULT, WORDS)


# 4. A path below threshold is never named, in a run's sentence or across seeds. Catches: the
# cross-seed signature carrying the best path whatever it recovers.
def path(recovered: float):
    from models.components import HeadSet
    from probes.circuits.path_patching import PathPatch

    return PathPatch(HeadSet(["L0H3"]), (14,), HeadSet(["L1H3"]), "q", 0.0, recovered, 0.0, 0.0, 0.0)


def seed_run(seed: int, recovered: float):
    circuit = SimpleNamespace(heads=("L0H3", "L1H3"))
    return SimpleNamespace(
        model_name="block-2",
        seed=seed,
        circuit=circuit,
        path_positions=[path(recovered)],
        paths=[],
        labels={14: "p14"},
        mechanism=None,
    )


def test_a_path_below_threshold_is_never_listed_as_a_path():
    weak = seed_agreement([seed_run(0, 0.02), seed_run(1, 0.0)], DEFAULT)[0]
    assert "->" not in weak and "no path >= 50%" in weak
    strong = seed_agreement([seed_run(0, 0.98), seed_run(1, 0.97)], DEFAULT)[0]
    assert "Q-composition L0H3->L1H3" in strong


# 5. A head is described at the positions where patching shows it matters, and attention names
# every key holding a stated share. Catches: describing a head at the scored position (where it
# does nothing) by its single most-attended key.
def test_a_head_is_described_where_patching_shows_it_matters():
    from probes.report.run_analysis import node_view
    from probes.report.words import node_words

    model, pairs = hand_built("v"), hand_batch(32)
    patching = activation_patching(model, pairs)
    gap = patching.clean.metric - patching.corrupt.metric
    head_out = patching.head_out.clone()
    head_out[0, :, 0] = patching.corrupt.metric
    head_out[0, 2, 0] = patching.corrupt.metric + 0.73 * gap  # L0H0 matters at p2 only
    patching = dataclasses.replace(patching, head_out=head_out)
    view = node_view(model, pairs, patching, Head(0, 0), None, DEFAULT.matters)
    assert [p for p, _ in view.matters] == [2] and view.matters[0][1] == pytest.approx(0.73, abs=1e-4)
    analysis = SimpleNamespace(labels=[f"p{i}" for i in range(4)])
    words = node_words(Head(0, 0), None, view, analysis, DEFAULT)
    assert "matters at p2 (73% of the gap)" in words and "p3 (" not in words.split("attends")[0]


def test_attention_names_each_key_above_the_stated_share():
    rows = {"all": [0.0, 0.36, 0.02, 0.62]}
    words = attention_words(rows, ["p0", "p1", "p2", "p3"], DEFAULT)
    assert words == "attends p3 (0.62), p1 (0.36)"


# 6. Collapsed runs are flagged, model means shown with and without them, and the share of the
# top prediction after an ablation is shown. Catches: a constant-output run averaged in silently.
def split(accuracy: float, top_share: float, top_token: int = 2) -> SplitAccuracy:
    return SplitAccuracy(
        n=480,
        accuracy=Interval(accuracy, accuracy, accuracy, 480),
        loss=1.0,
        foil_rate=0.0,
        other_rate=0.0,
        by_group={},
        top_token=top_token,
        top_share=top_share,
    )


def run_accuracy(seed: int, heldout: float, train: float, top_share: float) -> RunAccuracy:
    return RunAccuracy(
        "attn-only-1x1", seed, "", 400, {"heldout": split(heldout, top_share), "train": split(train, top_share)}, 12.0
    )


def test_a_collapsed_run_is_flagged_and_means_are_shown_with_and_without_it():
    from probes.report.render import accuracy_table

    runs = [run_accuracy(0, 0.427, 0.41, 0.5), run_accuracy(1, 0.49, 0.45, 0.5), run_accuracy(2, 0.042, 0.065, 1.0)]
    model = model_accuracy(runs, ["the", "dog", "field"])
    assert model.collapsed == {2: "collapsed: predicts 'field' at 100% of held-out scored positions"}
    assert model.heldout.value == pytest.approx((0.427 + 0.49 + 0.042) / 3)
    assert model.heldout_without_collapsed.value == pytest.approx((0.427 + 0.49) / 2)
    table = accuracy_table([model])
    assert "1 of 3 seeds collapsed (seed 2)" in table and "without them 45.9%" in table


def test_train_accuracy_far_below_its_peers_is_collapse_too():
    runs = [run_accuracy(0, 0.9, 0.9, 0.5), run_accuracy(1, 0.9, 0.92, 0.5), run_accuracy(2, 0.3, 0.2, 0.5)]
    assert list(model_accuracy(runs).collapsed) == [2]


def test_a_run_predicting_one_token_is_flagged_in_the_report(tmp_path):
    from probes.report.measure import render_parts

    run = mirror_run(bias_to_a=10.0)  # always predicts A: right for half the examples
    section = render_parts([measure_run(run, tmp_path)], tmp_path)["accuracy"]
    assert "collapsed: predicts 'A' at 100% of held-out scored positions" in section.markdown


def test_after_an_ablation_the_top_prediction_share_is_reported(mirror_measured):
    _, measured = mirror_measured
    zero = measured.results["runs"].ablations[Ablation.ZERO][1]  # the one head zeroed: all logits 0
    from probes.report.document import ablation_table
    from probes.report.words import token_share

    assert zero.label == "L0H0" and zero.top_share == 1.0 and zero.top_token == A
    assert token_share(zero, WORDS) == "top prediction 'A' at 100%"
    row = next(line for line in ablation_table(measured.results["runs"]).splitlines() if line.startswith("| L0H0"))
    assert row.split(" | ")[1] == "50% / +0.00 / 100%"  # zero: half right, but a constant output


# 7. "Answers restored" is a share between the counterfactual's own rate (0) and the clean one (1).
# Catches: a patch that changes nothing shown as the counterfactual run's answer rate.
def test_answers_restored_starts_at_the_counterfactual_runs_own_rate(mirror_measured):
    from probes.report.document import patching_table

    _, measured = mirror_measured
    patching = measured.results["runs"].patching
    assert patching.restored_share(patching.corrupt.restored) == 0.0
    assert patching.restored_share(patching.clean.restored) == 1.0
    rows = patching_table(measured.results["runs"]).splitlines()[2:]
    assert rows == ["| L0H0 | p3 y | 100% | 100% |"]  # the never-run cells are left out


# 8. Verdicts use the logit difference too. Catches: "unused" beside a logit difference that fell
# from 7.70 to 0.71, and "needed" at 2 points of accuracy.
def result(accuracy: float, logit_diff: float) -> AblationResult:
    return AblationResult((), Ablation.MEAN, accuracy, logit_diff, 0.0, {})


def test_verdicts_read_the_logit_difference():
    intact = result(1.0, 7.70)
    assert verdict(intact, result(1.0, 0.71), DEFAULT)[0] == "needed"
    assert verdict(intact, result(0.98, 7.5), DEFAULT)[0] == "unused"
    assert verdict(intact, result(0.97, 6.0), DEFAULT)[0] == "partly used"
    assert verdict(result(1.0, math.nan), result(0.99, math.nan), DEFAULT)[1].endswith("(no foils: accuracy only)")


# 9. The notebook's ablate equals the report's numbers; mean ablation without a reference is refused.
# Catches: ablate averaging over the ablated batch while the report averages training rows.
def test_ablate_with_the_training_reference_gives_the_reports_numbers(mirror_measured):
    run, measured = mirror_measured
    report_row = measured.results["runs"].ablations[Ablation.MEAN][1]
    mine = ablate(run.model, run.batches()["heldout"], ["L0H0"], reference=training_reference(run))
    assert mine == report_row
    with pytest.raises(UsageError, match="training_reference"):
        ablate(run.model, run.batches()["heldout"], ["L0H0"])


# Shortcut audit. Catches: an order-blind model at the best model's accuracy left unflagged.
def model(name: str, heldout: float, shuffle: float):
    return SimpleNamespace(
        model_name=name, heldout=Interval(heldout, heldout, heldout, 3), shuffle_max_logit_change=shuffle
    )


def test_the_shortcut_audit_flags_an_order_blind_model_at_the_top():
    from probes.health import shortcut_audit

    failed = shortcut_audit([model("bag-of-words", 1.0, 4e-6), model("attn-only-2x1", 1.0, 12.0)])
    assert not failed.defeated and "does not defeat the order-blind shortcut" in failed.words()
    passed = shortcut_audit([model("bag-of-words", 0.091, 4e-6), model("block-1", 1.0, 11.0)])
    assert passed.defeated and "defeats the order-blind shortcut" in passed.words()
    assert shortcut_audit([model("block-1", 1.0, 11.0)]) is None


# One model load per run per report, and the settings in report.json. Catches: a part reloading the model.
def test_every_part_of_a_run_shares_one_model_load(mirror_measured):
    run, measured = mirror_measured
    assert run.loaded == 1
    assert set(measured.results) == {
        "accuracy",
        "runs",
        "edge_circuits",
        "certificates",
        "sublayers",
        "head_roles",
        "dynamics",
        "features",
        "examples",
    }


# 10. A circuit head that patching does not show at any one position is said to "matter only across
# positions" only when patching it at every position at once shows it. Catches: that phrase for a
# head whose output barely differs between the pairs anywhere (kept by the search for what
# mean-ablating it costs), as block-1's second head was described.
def unmatched_analysis(everywhere: float):
    from probes.report.run_analysis import NodeView

    model, pairs = hand_built("v"), hand_batch(32)
    patching = activation_patching(model, pairs)
    gap = patching.clean.metric - patching.corrupt.metric
    head_all = patching.head_all.clone()
    head_all[0, 0] = patching.corrupt.metric + everywhere * gap
    knockout = {Head(0, 0): SimpleNamespace(normalised=0.88)}
    analysis = SimpleNamespace(
        labels=[f"p{i}" for i in range(4)],
        patching=dataclasses.replace(patching, head_all=head_all),
        circuit=SimpleNamespace(knockout=knockout),
    )
    return analysis, NodeView("L0H0@p3", [], {})


def test_a_head_that_matters_nowhere_under_patching_is_not_said_to_matter_across_positions():
    from probes.report.words import node_words

    analysis, view = unmatched_analysis(everywhere=0.0)
    words = node_words(Head(0, 0), (3,), view, analysis, DEFAULT)
    assert "across positions" not in words
    assert "less than 10% of the gap at any one position and 0% at every position at once" in words
    assert "the full model without it keeps 0.88 on the null scale" in words
    analysis, view = unmatched_analysis(everywhere=0.6)
    assert "and 60% at every position at once: it matters only across positions" in node_words(
        Head(0, 0), None, view, analysis, DEFAULT
    )


# 11. Heads of one block cannot compose, and that is all it shows. Catches: "the decision happens
# in one block" for a 2-block run whose block-2 MLP carries the answer (the head sentence does not ablate MLPs).
def test_a_circuit_within_one_block_claims_no_more_than_that():
    from probes.report.words import path_clause

    analysis = SimpleNamespace(
        path_positions=[],
        paths=[],
        spec=ModelSpec(n_layers=2),
        circuit=SimpleNamespace(kept={Head(0, 0): (14,), Head(0, 2): (14,)}),
    )
    assert path_clause(analysis, DEFAULT) == "no composition between circuit heads: all of them are in block 1"


# 11b. Heads that compose through an MLP are not "no path". Catches: block-2 seed 1's summary row
# "L0H2+L1H1@p14 / no head>head path" beside its mechanism L0H2 > MLP0 > L1H1.q > MLP1 (issue 33).
def test_a_circuit_through_mlps_is_named_by_them_in_the_summary_kind():
    from probes.circuits.labels import PathFacts
    from probes.circuits.signature import EDGE_BASIS, HEAD_BASIS, MechanismSignature
    from probes.report.summary import circuit_kind

    head, later = "L0 head of unnamed role", "L1 head of unnamed role"
    chain = MechanismSignature(
        ("embed", head, "MLP0", later, "MLP1", "logits"),
        (f"embed -> {head}", f"{head} -> MLP0", f"MLP0 -> {later}.q", f"{later} -> MLP1", "MLP1 -> logits"),
        EDGE_BASIS,
    )
    weak = PathFacts("L0H2", "L1H1", "q", 3, "p3", 0.1, 0.1, 0.2)  # measured, below the claim

    def kind(mechanism, paths=(weak,)):
        analysis = SimpleNamespace(mechanism=mechanism, paths=None if paths is None else list(paths))
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr("probes.circuits.labels.run_paths", lambda a: list(paths or ()))
            return circuit_kind(analysis, DEFAULT)

    assert kind(chain) == "via MLP0, MLP1"
    assert kind(dataclasses.replace(chain, basis=HEAD_BASIS)) == "no head>head path"  # no edge circuit measured
    assert kind(None) == "no head>head path"
    assert kind(None, paths=()) == "one block"
    # a post-norm model's head circuit: its paths were not measured, which is not "no path"
    assert kind(dataclasses.replace(chain, basis=HEAD_BASIS, edges=()), paths=None) == "paths not measured"


# 12. The edge circuits' faithfulness is on the gap scale (the empty circuit is the counterfactual
# run), and the oracle judged against itself is 1 by construction. Catches: edge faithfulness
# labelled "null scale" (the header's null scale mean-ablates), and the oracle's Spearman and
# AUROC of 1.000 shown as scores.
def test_edge_circuits_name_their_scale_and_the_oracle_is_not_scored_against_itself(tmp_path):
    from models.graph import graph_of
    from probes.circuits.named import edge_circuit
    from probes.report.edge_part import EdgeRun, render_edge_circuits, summary_line
    from probes.report.edge_render import markdown_lines
    from probes.circuits.truth.planted import two_hop

    p = two_hop(n=8)
    result = edge_circuit(p.model, p.batch, graph_of(p.spec), compare_methods=False)
    run = EdgeRun("two-hop", 0, result, None)
    line = summary_line(run, DEFAULT)
    assert (
        "null scale" not in line and "of the gap on 8 pairs (every other edge given its counterfactual write)" in line
    )
    intro = render_edge_circuits([run], tmp_path, DEFAULT).markdown.split("\n")[0]
    assert "the gap scale, 0 = the empty circuit (= the counterfactual run)" in intro
    oracle_row = next(row for row in markdown_lines(result, "two-hop") if row.startswith("| oracle |"))
    assert oracle_row.split(" | ")[2:4] == ["1 (itself)", "1 (itself)"]


# 13. A run not traced because clean and counterfactual barely differ shows no head's share of that
# gap. Catches: the patching table's "L0H0 | p3 | 100%" above the note that no share of the gap
# means much (attn-only-1x1 seed 2: a gap of 0.00).
def test_a_gap_too_small_to_trace_is_not_shared_out_per_head(tmp_path):
    from probes.report.document import run_section

    batch = dataclasses.replace(mirror_batch(), counterfactual=mirror_batch().tokens)  # partner = itself
    run = HandRun(mirror_model(), {"train": batch, "validation": batch, "heldout": batch})
    analysis = measure_run(run, tmp_path).results["runs"]
    assert analysis.circuit is None and "barely tells the pairs apart" in analysis.note
    text = run_section(analysis, DEFAULT)
    assert "Activation patching on 40 held-out pairs" in text and "| head | position | recovered" not in text
    from probes.report.figures import run_figure

    titles = [ax.get_title() for ax in run_figure(analysis).axes]
    assert any("attention" in t for t in titles) and not any("patching" in t for t in titles)


# 14. Every threshold a sentence names is the one the report ran with. Catches: the search trace's
# "stops at 90% of the gap" and the header's scale of verdicts written as constants, wrong the
# moment ReportSettings.circuit_target changes.
def test_the_circuit_search_target_is_named_from_the_settings(tmp_path):
    from probes.report.document import circuit_section, header

    settings = ReportSettings(circuit_target=0.8)
    analysis = measure_run(mirror_run(), tmp_path, settings).results["runs"]
    assert "the search stops at 80% of the gap" in circuit_section(analysis, settings)
    assert "the circuit search alone stops on the gap scale, at 80%" in header(analysis, settings)


# 15. One rule for when a run is traced, on |clean - counterfactual|: a model that reliably answers
# backwards is traced by the head search and the edge graph alike. Catches: the head view's signed
# test (gap < min_gap) skipping a run that the edge view (abs) traced.
def test_a_model_that_answers_backwards_is_traced_by_both_views(tmp_path):
    from models.graph import graph_of
    from probes.circuits.named import edge_circuit
    from probes.circuits.truth.planted import two_hop
    from probes.report.edge_part import EdgeRun, summary_line

    batch = mirror_batch()
    backwards = dataclasses.replace(batch, answers=batch.foils, foils=batch.answers)
    run = HandRun(mirror_model(), {"train": backwards, "validation": backwards, "heldout": backwards})
    analysis = measure_run(run, tmp_path).results["runs"]
    gap = analysis.patching.clean.metric - analysis.patching.corrupt.metric
    assert gap < -DEFAULT.min_gap and DEFAULT.traces(gap)
    assert analysis.circuit is not None and analysis.circuit.faithfulness.recovered >= DEFAULT.circuit_target

    p = two_hop(n=8)
    flipped = dataclasses.replace(p.batch, answers=p.batch.foils, foils=p.batch.answers)
    result = edge_circuit(p.model, flipped, graph_of(p.spec), compare_methods=False)
    assert -result.oracle.gap < -DEFAULT.min_gap
    assert result.circuit.edges and "not traced" not in summary_line(EdgeRun("two-hop", 0, result, None), DEFAULT)
