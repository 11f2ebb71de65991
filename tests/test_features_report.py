"""The report's features part (probes.report.feature_part): a run whose dictionaries `toylens features`
stored gets a features section in report.md, report.json and report.html, graded on its held-out
split, with the roles where each recovering feature fires and, where every MLP has a transcoder,
the feature circuit; a run without any gets none, and a
dictionary edited after it was written is refused in one line."""

from __future__ import annotations

import json
import shutil

import pytest


@pytest.fixture(scope="module")
def featured(tmp_path_factory, tiny_runs):
    from toylens.console import main

    runs = tmp_path_factory.mktemp("featured") / "winograd"
    shutil.copytree(tiny_runs, runs)
    main(["features", str(runs), "--sizes", "16", "--k", "2", "--steps", "60", "--no-progress"])
    main(["report", str(runs), "--jobs", "1"])
    return runs


def test_a_run_with_stored_dictionaries_has_a_features_section_everywhere(featured):
    report = featured / "report"
    text = (report / "report.md").read_text()
    assert "## Features (stored dictionaries)" in text
    assert (
        "attn-only-2x1 seed 0: 1 stored dictionaries (the runs folder's features/attn-only-2x1/seed0)" in text
        and "planted variables at MCC >= 0.9" in text
    )
    data = json.loads((report / "report.json").read_text())
    (found,) = [f for f in data["features"] if f["run"] == "attn-only-2x1 seed 0"]
    (grade,) = found["grades"]
    assert grade["split"] == "heldout" and grade["config"]["d_sae"] == 16 and grade["recoveries"]
    for example in found["examples"]:  # each one a feature recovering its variable, with roles counted
        assert example["mcc"] >= 0.9 and sum(count for _, count in example["roles"]) <= 20
    html = (report / "report.html").read_text()
    assert '<section class="extra" id="features">' in html and "attn-only-2x1 seed 0" in html
    # bag-of-words has an MLP with a stored transcoder: traced as a feature circuit; attn-only has none
    assert "#### bag-of-words seed 0: feature circuit (transcoders" in text
    assert "attn-only-2x1 seed 0: feature circuit" not in text
    (bag,) = [f for f in data["features"] if f["run"] == "bag-of-words seed 0"]
    assert bag["traced"]["circuit"]["spliced_error"] < 1e-4 and found["traced"] is None
    assert "Feature circuit through" in html


def test_a_report_without_stored_dictionaries_has_no_features_section(main_job_run):
    text = (main_job_run.runs / "report" / "report.md").read_text()
    assert "Features (stored dictionaries)" not in text
    assert "features" not in json.loads((main_job_run.runs / "report" / "report.json").read_text())


def test_an_edited_dictionary_is_refused_in_one_line(featured, tmp_path, capsys):
    from toylens.console import main

    runs = tmp_path / "winograd"
    shutil.copytree(featured, runs, ignore=shutil.ignore_patterns("report"))
    (cfg,) = (runs / "features" / "attn-only-2x1" / "seed0").rglob("cfg.json")
    data = json.loads(cfg.read_text())
    cfg.write_text(json.dumps({**data, "k": data["k"] + 1}))
    with pytest.raises(SystemExit) as stopped:
        main(["report", str(runs), "--jobs", "1"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(cfg.parent) in err.strip().splitlines()[-1], err


def test_the_feature_circuit_is_exported_as_an_attribution_graph_its_viewer_accepts(featured):
    """bag-of-words has an MLP and so a feature circuit: toylens features wrote it with features as
    nodes; it passes the viewer's structure and Neuronpedia's graph schema, and its links to the
    logit node are the circuit's exact feature -> logits edges (negated)."""
    from pathlib import Path

    from probes.report.outputs.exports import attribution_problems

    jsonschema = pytest.importorskip("jsonschema", reason="no jsonschema (the dev extra's nbformat brings it)")

    graph = json.loads((featured / "features" / "bag-of-words" / "seed0" / "feature-graph.json").read_text())
    assert attribution_problems(graph) == []
    schema = json.loads((Path(__file__).parent / "fixtures" / "neuronpedia" / "graph-schema.json").read_text())
    assert [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(graph)] == []
    kinds = {n["feature_type"] for n in graph["nodes"]}
    assert "cross layer transcoder" in kinds and "logit" in kinds
    assert not (featured / "features" / "attn-only-2x1" / "seed0" / "feature-graph.json").exists()  # no MLP
    data = json.loads((featured / "report" / "report.json").read_text())
    (bag,) = [f for f in data["features"] if f["run"] == "bag-of-words seed 0"]
    circuit = bag["traced"]["circuit"]
    to_logits = {link["source"]: link["weight"] for link in graph["links"] if link["target"].startswith("L_")}
    exact = {}
    for sender, row in zip(circuit["senders"], circuit["effect"]):
        feature = sender["feature"]
        d_sae = len(bag["traced"]["matches"][str(sender["layer"])])
        exact[f"{sender['layer']}_{d_sae if feature is None else feature}_"] = -row[-1]
    for source, weight in to_logits.items():
        assert weight == pytest.approx(exact[source.rsplit("_", 1)[0] + "_"], abs=1e-6), source
    assert to_logits
