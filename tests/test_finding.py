"""The report's first screen is the finding (probes.report.finding): report.md opens with the ladder
figure and the mechanism's sentences, each with its number and a link to its evidence, before the
summary tables; the simplest model that solves the task is the one whose heads are shown."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """report.md and report.html of the hand-built runs: a one-head mirror and the planted two-hop model."""
    from probes.settings import ReportSettings
    from test_html_report import hand_measured
    from toylens.report import publish_report

    out = tmp_path_factory.mktemp("finding")
    settings = ReportSettings(min_gap=0.0)
    measured = hand_measured(out, settings)
    publish_report(measured, out, task="two-hop", settings=settings)
    return measured, out, settings


def test_report_md_opens_with_the_ladder_and_the_mechanism(published):
    from probes.report.finding import FIGURE

    _, out, _ = published
    text = (out / "report.md").read_text()
    finding = text.split("## The finding")[1].split("## Summary")[0]
    first_table = text.index("\n|")
    assert text.index("## The finding") < text.index(FIGURE) < text.index("The simplest model") < first_table
    assert first_table < text.index("## Summary")  # the circuit heads' attention, then the tables
    assert f"]({FIGURE})" in finding and (out / FIGURE).is_file()
    assert "The simplest model that solves the task is" in finding and "([evidence](#" in finding
    assert "Example:" in finding and "Its counterfactual partner:" in finding


def test_the_simplest_model_that_solves_it_is_the_first_in_order(published):
    from probes.report.finding import finding_of

    measured, _, settings = published
    finding = finding_of(measured, settings)
    solved = [m.model_name for m in measured if m.results["runs"].circuit is not None]
    assert finding.solver == f"{solved[0]} seed 0"
    assert {r.model_name for r in finding.ladder} == {m.model_name for m in measured}
    for rung in finding.ladder:
        assert rung.low <= rung.heldout <= rung.high and rung.n > 0
    for row in finding.heads:  # attention rows are distributions over the sentence's tokens
        assert abs(sum(row.clean) - 1) < 0.05 and len(row.clean) == len(finding.clean_tokens)


def test_report_html_puts_the_finding_before_the_summary_with_links_to_each_run(published):
    _, out, _ = published
    html = (out / "report.html").read_text()
    assert html.index('id="finding-block"') < html.index('<nav id="nav">') < html.index('id="summary"')
    block = html.split('id="finding-block"')[1].split('<nav id="nav">')[0]
    assert 'src="data:image/png;base64,' in block and 'href="#run=' in block and 'href="#summary"' in block


# Partner feedback (issue 56): a counterfactual that keeps every position's role in place gives no
# query or key anything to differ by; the report says what such pairs cannot show.
def test_the_report_says_what_pairs_that_move_no_query_or_key_cannot_show():
    from types import SimpleNamespace

    import torch

    from models.components import Head
    from models.graph import Edge, Embed, Input, Logits
    from probes.report.story import unshown_compositions

    edges = [
        Edge(Embed(), Input(Head(0, 0), "v")),
        Edge(Embed(), Input(Head(0, 0), "k")),
        Edge(Head(0, 0), Input(Logits())),
    ]

    def result(key_share: float):
        shares = torch.tensor([0.9, key_share, 0.95])
        return SimpleNamespace(graph=SimpleNamespace(edges=edges), oracle=SimpleNamespace(normalised=lambda: shares))

    (said,) = unshown_compositions(result(-0.004))
    assert "cannot show which positions the heads choose to read" in said and "0.4%" in said
    assert unshown_compositions(result(0.2)) == []


# One main path everywhere (issue 56): the graph's halo was the widest chain (through another head)
# while the signature named the mechanism's route.
def test_the_graph_main_path_is_the_mechanism_the_signature_names():
    from probes.circuits.signature import EDGE_BASIS, MechanismSignature
    from probes.report.outputs.html_data import main_path, mechanism_nodes

    def edge(s, r, alone):
        return {"id": f"{s}->{r}", "s": s, "r": r, "alone": alone, "in": True}

    edges = [
        edge("embed", "L0H0", 0.3),
        edge("L0H0", "logits", 0.3),
        edge("embed", "L1H0", 0.9),
        edge("L1H0", "logits", 0.9),
    ]
    assert main_path(edges) == ["embed->L1H0", "L1H0->logits"]
    signature = MechanismSignature(
        ("embed", "L0 previous-token head", "logits"),
        ("embed -> L0 previous-token head", "L0 previous-token head -> logits"),
        EDGE_BASIS,
        heads=(("L0 previous-token head", ("L0H0",)),),
    )
    assert main_path(edges, mechanism_nodes(signature)) == ["embed->L0H0", "L0H0->logits"]
    assert mechanism_nodes(None) is None


# Roles by group come with their masses (issue 56: "reads the adjective (crosser) / the second noun
# (crossed)", with masses), read from the signature's profiles.
def test_a_group_dependent_role_is_stated_with_each_groups_mass():
    from probes.report.finding import role_numbers

    part = "L1 head that attends the second_noun role (crossed) / the first_noun role (crosser)"
    masses = {
        "(crossed) attends the second_noun role": 0.98,
        "(crossed) attends the current token": 0.01,
        "(crosser) attends the first_noun role": 0.92,
        "attends the first_noun role": 0.49,
    }
    assert role_numbers(part, masses) == (
        "attends the second_noun role 0.98 (crossed) / attends the first_noun role 0.92 (crosser)"
    )
    assert (
        role_numbers("L0 previous-token head", {"previous-token head": 0.9, "(a) x": 0.95})
        == "previous-token head 0.90"
    )
