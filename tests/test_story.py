"""report.md reads as a story (issue #37): per run a short mechanism block, then the evidence as
bullets; the tables and every position's detail moved, unchanged, to an appendix at the end; the
main job's story part at most 400 lines."""

from __future__ import annotations

import re

import pytest

from probes.report.document import APPENDIX

STORY_LINES = 400  # the main job's report.md before its appendix, at most
RUN_LINES = 20  # one run's story, at most: 18 runs (the largest family) and the summary fit STORY_LINES


def split(markdown: str) -> tuple[str, str]:
    story, appendix = markdown.split(f"\n{APPENDIX}\n")
    return story, appendix


def run_blocks(story: str) -> dict:
    """'model seed k' -> the lines of its story."""
    found = re.split(r"^### (\S+ seed \d+)$", story.split("\n## Mechanisms\n")[1], flags=re.M)
    return {name: block.strip("\n").splitlines() for name, block in zip(found[1::2], found[2::2])}


def block_lists(lines: list[str]) -> tuple[list[str], list[str]]:
    """The mechanism's and the evidence's bullets."""
    mechanism = lines[lines.index("Mechanism:") + 1 : lines.index("")]
    start = lines.index("Evidence:") + 1
    evidence = [line for line in lines[start:] if line.startswith("- ")]
    return mechanism, evidence


def test_the_main_jobs_story_is_at_most_400_lines_and_names_every_run(main_job_run):
    story, appendix = split((main_job_run.runs / "report" / "report.md").read_text())
    assert len(story.splitlines()) <= STORY_LINES
    blocks = run_blocks(story)
    for model in ("bag-of-words", "attn-only-2x1"):
        for seed in range(3):
            assert f"{model} seed {seed}" in blocks and f"\n### {model} seed {seed}\n" in appendix


@pytest.fixture(scope="module")
def planted_report(tmp_path_factory):
    """report.md of the hand-built runs (a one-head mirror, the planted two-hop model), with the
    sections it was written from."""
    from probes.report.document import write_report
    from probes.report.measure import render_parts
    from probes.settings import ReportSettings
    from test_html_report import hand_measured

    out = tmp_path_factory.mktemp("story")
    settings = ReportSettings(min_gap=0.0)  # the planted model's gap is below 1
    measured = hand_measured(out, settings)
    sections = render_parts(measured, out, settings)
    write_report(measured, sections, out, "planted", settings)
    return (out / "report.md").read_text(), sections


def test_each_run_opens_with_its_mechanism_in_a_few_lines_then_bulleted_evidence(planted_report):
    markdown, _ = planted_report
    story, _ = split(markdown)
    blocks = run_blocks(story)
    assert set(blocks) == {"hand seed 0", "two-hop seed 0"}
    for lines in blocks.values():
        mechanism, evidence = block_lists(lines)
        assert 1 <= len(mechanism) <= 5 and all(line.startswith("- ") for line in mechanism)
        assert evidence and len(lines) <= RUN_LINES
    mechanism, evidence = block_lists(blocks["two-hop seed 0"])
    assert (
        mechanism[0]
        == "- Q-composition: L0H0 ->q L1H0 @p3; L1H0 reads L0H0's output through its query (100% of the gap)."
    )
    assert "main path embed -> L0H0.v -> L1H0.q -> logits" in mechanism[2]
    assert any("faithfulness 1.00 on the null scale" in line for line in evidence)


def test_the_tables_and_every_positions_detail_are_in_the_appendix_unchanged(planted_report):
    markdown, sections = planted_report
    story, appendix = split(markdown)
    assert not [line for line in story.split("## Mechanisms")[1].splitlines() if line.startswith("|")]
    assert "patching its output matters at" not in story  # every position's detail
    for section in sections.values():  # moved, not deleted: every number there is still there
        assert f"## {section.title}\n\n{section.markdown}\n" in appendix
