"""The summary tables and report.html, without a browser: the tables say the facts the sentences
say (checked fact by fact against the typed results), fit a terminal, and the page is one file
with no reference outside it. The browser checks: tests/test_browser.py."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest


@pytest.fixture(scope="module")
def report(tiny_runs, tmp_path_factory):
    """The tiny runs' report, with the typed results it was written from."""
    from probes.report.measure import measure_run, render_parts
    from probes.settings import DEFAULT
    from tasks.training.runs import find_runs
    from toylens.report import publish_report

    out = tmp_path_factory.mktemp("report") / "report"
    out.mkdir()
    measured = [measure_run(run, out) for run in sorted(find_runs(tiny_runs), key=lambda r: r.model_name)]
    publish_report(measured, out, task="winograd")
    return measured, render_parts(measured, out, DEFAULT), out


def hand_measured(out, settings):
    """Two hand-built runs whose circuits are known: a one-head mirror (one block) and the planted
    two-hop model (Q-composition, a named path)."""
    from probes.circuits.truth.planted import two_hop
    from probes.report.measure import measure_run
    from test_report_claims import HandRun, mirror_run

    planted = two_hop(n=48)
    batch = planted.batch
    composing = HandRun(planted.model, {"train": batch, "validation": batch, "heldout": batch}, "two-hop")
    composing.spec = planted.spec
    composing.task = SimpleNamespace(
        vocabulary=lambda: [f"t{i}" for i in range(planted.spec.d_vocab)],
        expected_circuit=lambda name, spec: None,
        domain=lambda: None,
    )
    return [measure_run(run, out, settings) for run in (mirror_run(), composing)]


def planted_measured(tiny_runs, out):
    """report.html of the tiny runs and the hand-built ones; (its path, the planted run's id)."""
    from probes.report.measure import measure_run
    from probes.settings import ReportSettings
    from tasks.training.runs import find_runs
    from toylens.report import publish_report

    settings = ReportSettings(min_gap=0.0)
    measured = [measure_run(run, out, settings) for run in find_runs(tiny_runs)] + hand_measured(out, settings)
    publish_report(measured, out, task="winograd")
    return out / "report.html", "two-hop-seed0"


@pytest.fixture(scope="module")
def with_circuits(report, tmp_path_factory):
    """The tiny runs (too briefly trained to trace) and the hand-built runs."""
    from probes.report.measure import render_parts
    from probes.settings import ReportSettings

    out = tmp_path_factory.mktemp("hand")
    settings = ReportSettings(min_gap=0.0)  # the mirror's gap is 4, the planted one's below 1
    measured = report[0] + hand_measured(out, settings)
    return measured, render_parts(measured, out, settings), settings


def test_terminal_tables_fit_one_screen_and_say_each_runs_facts(with_circuits):
    from probes.circuits.redundancy import headline
    from probes.report.summary import FOLDED, WIDTH, summary_of, terminal_lines
    from probes.report.words import intact, named, verdict, whole_layers

    measured, sections, DEFAULT = with_circuits
    assert sum(m.results["runs"].circuit is not None for m in measured) >= 2
    assert any(named(m.results["runs"], DEFAULT) for m in measured if m.results["runs"].circuit)
    summary = summary_of(sections)
    lines = terminal_lines(summary)
    assert len(lines) <= 40 and max(map(len, lines)) <= WIDTH
    assert "null scale" in lines[0] and "(0 = counterfactual, 1 = clean)" in lines[1]  # each scale named
    tables = {t.model_name: t for t in summary.tables}
    for m in measured:
        table = tables[m.model_name]
        row = dict(zip(table.columns, next(r for r in table.rows if r[0] == str(m.seed))[1:]))
        # The terminal prints the row's cells, in order, on one line; the mechanism on a line below.
        cells = [cell for column, cell in row.items() if column != FOLDED]
        assert any(re.search(r"\s+".join(map(re.escape, [f"seed {m.seed}", *cells])), line) for line in lines)
        if row.get(FOLDED, "-") != "-":
            assert f"seed {m.seed}: {row[FOLDED]}" in " ".join(line.strip() for line in lines)
        a = m.results["runs"]
        assert row["held-out"] == f"{a.accuracy.splits['heldout'].accuracy.value:.1%}"
        if a.circuit is None:
            assert row["circuit / kind"].startswith("not traced:")
            continue
        assert all(str(head) in row["circuit / kind"] for head in a.circuit.heads)
        for path in named(a, DEFAULT):
            where = f" @p{path.position}" if path.position >= 0 else ""
            assert f"{path.sender} ->{path.component} {path.receiver}{where}" in row["circuit / kind"]
        assert row["faith."] == ("1 (constr.)" if a.circuit.upstream else f"{a.circuit.faithfulness.normalised:.2f}")
        assert row["blocks"] == "/".join(
            verdict(intact(a), r, DEFAULT)[0].removesuffix(" used") for _, r in whole_layers(a)
        )
        e = m.results.get("edge_circuits")
        if e is not None and e.result.circuit.edges is not None and abs(e.result.oracle.gap) >= DEFAULT.min_gap:
            edges, faithfulness, method = headline(e.result, e.structure)
            assert row["edges (gap)"] == f"{len(edges)}/{len(e.result.graph.edges)}, {faithfulness:.0%}" + (
                " joint" if method == "joint search" else ""
            )


def test_report_md_opens_with_the_tables_and_keeps_each_sentence_in_its_run(report):
    _, sections, out = report
    markdown = (out / "report.md").read_text()
    summary = markdown.split("## Summary")[1].split("## Bases and scales")[0]
    assert "| attn-only-2x1 | held-out |" in summary and "| seed 0 |" in summary
    for line in sections["runs"].summary[:2]:
        assert line not in summary and line in markdown  # the sentences moved to the runs' sections


def test_report_html_is_one_file_with_nothing_outside_it(report):
    _, _, out = report
    text = (out / "report.html").read_text()
    # No reference that a browser would fetch: no src/href to anything but data: and in-page anchors.
    for attribute in re.findall(r'(?:src|href)="([^"]*)"', text):
        assert attribute.startswith(("data:", "#")), attribute
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
    data = json.loads(
        re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S)
        .group(1)
        .replace("<\\/", "</")
    )
    runs = {(r["model"], r["seed"]): r for r in data["runs"]}
    graph = runs["attn-only-2x1", 0]["graph"]
    assert len(graph["edges"]) == 12 and {e["port"] for e in graph["edges"]} == {"q", "k", "v", "in"}
    assert runs["bag-of-words", 0]["graph"] is None and runs["bag-of-words", 0]["examples"] == []
    pair = runs["attn-only-2x1", 0]["examples"][0]
    assert all(abs(sum(row) - 1) < 0.05 for head in pair["clean"] for row in head)  # attention rows sum to 1


def test_the_census_is_written_as_a_self_contained_page_too(tmp_path):
    from probes.census import Census, group_census
    from probes.report.outputs.census import write_census

    def member(seed, stop_reason, heldout, label):
        run = SimpleNamespace(seed=seed, metrics={"stop_reason": stop_reason, "accuracy": {"heldout": heldout}})
        return run, "path", label, 0.8

    group = group_census(
        "attn-only-2x1",
        "default",
        {},
        [
            member(0, "validation solved", 1.0, "Q-composition a"),
            member(3, "validation solved", 0.9, "K-composition b"),
        ],
        0,
    )
    write_census(Census((group,), ()), tmp_path / "census")
    tmp_path = tmp_path / "census"
    text = (tmp_path / "census.html").read_text()
    assert 'class="sortable"' in text and "Q-composition a" in text and "K-composition b" in text
    assert "1/2" not in text and "<td>1</td><td>2</td><td>50.0%</td>" in text
    for attribute in re.findall(r'(?:src|href)="([^"]*)"', text):
        assert attribute.startswith("data:image/png;base64,")
