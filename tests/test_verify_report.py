"""benchmarks/verify_report.py recomputes a report's numbers with its own forward: it passes on a
tiny report and fails when a stored number, an exported score or a circuit's edge is altered."""

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import verify_report


@pytest.fixture(scope="module")
def reported(tiny_runs, tmp_path_factory):
    """A copy of the tiny runs with their report (min_gap 0: a 150-step run barely tells its pairs apart)."""
    from probes.report.measure import measure_run
    from probes.settings import ReportSettings
    from tasks.training.runs import find_runs
    from toylens.report import publish_report

    runs = tmp_path_factory.mktemp("verify") / "winograd"
    shutil.copytree(tiny_runs, runs, ignore=lambda folder, names: ["report"] if Path(folder) == Path(tiny_runs) else [])
    settings = ReportSettings(min_gap=0.0)
    out = runs / "report"
    publish_report(
        [measure_run(run, out, settings) for run in find_runs(runs)], out, task="winograd", settings=settings
    )
    return runs


def edited(runs: Path, tmp_path: Path, relative: str, change) -> Path:
    copy = tmp_path / "winograd"
    shutil.copytree(runs, copy)
    data = json.loads((copy / relative).read_text())
    change(data)
    (copy / relative).write_text(json.dumps(data))
    return copy


def test_the_tiny_report_verifies(reported, capsys):
    # In metric units: the tiny runs' metric is ~0.03, float32 noise ~1e-7.
    assert verify_report.main([str(reported), "--tolerance", "1e-6"]) == 0
    out = capsys.readouterr().out
    for check in (
        "forward = the bridge's logits",
        "named edge circuit's faithfulness",
        "positional circuit's faithfulness",
        "normalised (0 = every head",
        "MIB scores",
    ):
        assert f"{check}" in out and "FAIL" not in out


def first_edge_circuit(data):
    return data["edge_circuits"][0]


@pytest.mark.parametrize(
    "relative, change, caught",
    [
        (
            "report/report.json",
            lambda d: first_edge_circuit(d).__setitem__("faithfulness", first_edge_circuit(d)["faithfulness"] + 0.5),
            "named edge circuit's faithfulness",
        ),
        (
            "report/report.json",
            lambda d: first_edge_circuit(d)["positional"].__setitem__("faithfulness", 0.5),
            "positional circuit's faithfulness",
        ),
        (
            "report/report.json",
            lambda d: next(r for r in d["runs"] if r["circuit"])["circuit"]["faithfulness"].__setitem__(
                "normalised", 0.0
            ),
            "normalised (0 = every head",
        ),
        (
            "report/mib/attn-only-2x1_seed0.json",
            lambda d: d["edges"]["input->logits"].__setitem__("score", d["edges"]["input->logits"]["score"] + 1e-3),
            "MIB scores",
        ),
    ],
)
def test_an_altered_number_fails(reported, tmp_path, capsys, relative, change, caught):
    assert verify_report.main([str(edited(reported, tmp_path, relative, change)), "--tolerance", "1e-6"]) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    # The altered number fails its check; report.md, which still states the true one, no longer matches it.
    assert any(caught in line for line in failed)
    assert all(caught in line or "sentences" in line or "summary table" in line for line in failed)


def test_the_path_table_states_the_naming_rule_and_its_scales(tmp_path):
    """Found by verify_report's read of report.md: the every-position path table said the summary
    names a path only from the single-position patches, but the label rule names a path when either
    view recovers path_claim of the gap (probes.circuits.labels.named_paths); its attention column
    (total variation) did not say where 0 and 1 are."""
    from probes.report.document import run_section
    from probes.settings import ReportSettings
    from test_html_report import hand_measured

    settings = ReportSettings(min_gap=0.0, path_claim=0.4)
    analysis = next(m.results["runs"] for m in hand_measured(tmp_path, settings) if m.results["runs"].paths)
    text = run_section(analysis, settings)
    assert "Path patches, sender at every position" in text
    assert "names a path when this patch or the sender's best single position below recovers 40% of the gap" in text
    assert "receiver attention moved (TV: 0 = the counterfactual run's, 1 = disjoint)" in text  # its scale


def test_the_method_table_says_where_its_scales_are_0_and_1():
    """Found by the label review: the edge section's method table gave Spearman, AUROC, CPR and
    CMD with no scale (CPR + CMD = 1 there only while faithfulness stays <= 1)."""
    from models.graph import graph_of
    from probes.circuits.named import edge_circuit
    from probes.circuits.truth.planted import two_hop
    from probes.report.edge_render import markdown_lines

    p = two_hop(n=8)
    text = "\n".join(markdown_lines(edge_circuit(p.model, p.batch, graph_of(p.spec), compare_methods=False), "two-hop"))
    table = text.index("| CPR | CMD |")
    for scale in ("-1 = reversed", "0.5 = chance", "CPR is the area under faithfulness", "0 = faithful at every size"):
        assert scale in text[table:]


def test_an_attribution_graph_without_a_foil_names_the_metric_it_measured():
    """Found by verify_report: a prompt with no foil was labelled 'answer logit', but the oracle
    measures the answer's log-probability there (probes.patching.scored_metric); the clean metric
    the file records is that log-probability."""
    import dataclasses

    import torch

    from probes.circuits.truth.planted import two_hop
    from probes.report.outputs.exports import attribution_graph
    from tasks.base import NO_FOIL
    from test_exports import one_prompt

    p = two_hop(n=8)
    prompt = one_prompt(p.batch)
    prompt = dataclasses.replace(prompt, foils=torch.full_like(prompt.foils, NO_FOIL))
    info = attribution_graph(p.model, prompt, p.spec, [f"t{i}" for i in range(p.spec.d_vocab)], "x", "x")["metadata"][
        "info"
    ]
    with torch.no_grad():
        logits = p.model(prompt.inputs)[0, int(prompt.positions[0])]
    assert info["metric"] == "answer log-prob"
    assert abs(info["clean_metric"] - float(logits.log_softmax(-1)[int(prompt.answers[0])])) < 1e-5


def test_a_sentence_whose_number_differs_from_its_table_fails(reported, tmp_path, capsys):
    copy = tmp_path / "winograd"
    shutil.copytree(reported, copy)
    markdown = copy / "report" / "report.md"
    text = markdown.read_text()
    stated = re.search(r"edges keeps (\d+)% of the gap", text)
    markdown.write_text(text.replace(stated.group(0), f"edges keeps {int(stated.group(1)) + 7}% of the gap", 1))
    assert verify_report.main([str(copy), "--tolerance", "1e-6"]) == 1
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert len(failed) == 1 and "edge sentences state report.json's numbers" in failed[0]


def test_a_sweeps_timeline_verifies_and_an_altered_gap_fails(tmp_path, monkeypatch):
    """A tiny sweep with snapshots (20 steps, one seed), run in this process as
    tests/test_census_timeline.py runs one."""
    import probes.census
    import probes.circuits.mechanism_timeline as timeline
    from probes.census import take_census
    from probes.report.outputs.census import write_census
    from probes.settings import ReportSettings
    from tasks.winograd import WinogradTask
    from test_census_timeline import InProcess
    from toylens.arguments import parse_seeds
    from toylens.sweeps.driver import run_sweep
    from toylens.sweeps.plan import parse_grid, plan_sweep

    # 20 steps barely teach the model: every run trained with snapshots keeps a timeline here, as
    # tests/test_census_timeline.py widens the rule, so the check has snapshots to recompute.
    widened = lambda config, final: bool(config["training"]["snapshot_every"])  # noqa: E731
    monkeypatch.setattr(timeline, "wants_timeline", widened)
    monkeypatch.setattr(probes.census, "wants_timeline", widened)
    monkeypatch.setattr("probes.settings.DEFAULT", ReportSettings(min_gap=0.0))
    out = tmp_path / "sweep"
    settings = {"max_steps": 20, "eval_every": 10, "batch_size": 32, "snapshot_every": 10}
    params = {"nouns": 8, "heldout_fraction": 0.5, "validation_fraction": 0.1, "leaky": False}
    runs = plan_sweep(
        WinogradTask,
        params,
        settings,
        ["attn-only-2x1"],
        parse_seeds("0-0"),
        parse_grid(["d_model=16"], WinogradTask),
        out,
    )
    assert run_sweep(runs, out, InProcess(), "test", progress=False, write=lambda line: None).done == 1
    write_census(take_census(out), out / "census")
    checks = verify_report.Checks(1e-6)
    with torch.no_grad():
        verify_report.check_timeline(checks, out)
    said = "\n".join(checks.lines)
    assert not checks.failed and "every snapshot's gap" in said and "seeds naming their final mechanism" in said

    timeline = out / "d_model=16" / "attn-only-2x1" / "seed0" / "timeline.json"
    data = json.loads(timeline.read_text())
    data["snapshots"][1]["gap"] += 1e-3
    timeline.write_text(json.dumps(data))
    checks = verify_report.Checks(1e-6)
    with torch.no_grad():
        verify_report.check_timeline(checks, out)
    assert len(checks.failed) == 1 and "every snapshot's gap" in checks.failed[0]


def test_the_summary_legend_names_each_columns_basis():
    """Found by the label review: report.html's summary panel shows only the legend and the tables,
    and the legend gave the circuit columns' scales but not what they were measured on."""
    from probes.report.summary import LEGEND

    legend = " ".join(LEGEND)
    for basis in (
        "held-out split's scored positions",
        "held-out counterfactual pairs",
        "mean over training rows",
        "held-out ablation rows",
        "each run's sentences",
    ):
        assert basis in legend


def test_a_folder_without_a_report_is_refused_in_one_line(tmp_path, capsys):
    assert verify_report.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "report.json is missing" in err[0]
