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
    main(["features", str(runs), "--sizes", "16", "--k", "2", "--steps", "60", "--no-circuit", "--no-progress"])
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
