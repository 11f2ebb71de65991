"""Strings from a task plugin are data, never markup or code (tests/plugins/hostile_tasks.py: token
names with markup, `</script>`, `<!--`, quotes, mathtext, a 10 kB name, RTL and zero-width
characters, U+2028/2029): the plugin trains and reports; report.html, census.html and the notebook's
views hold no element the strings made and their embedded data parses back to the same strings;
every JSON file is strict; a lone surrogate is refused when the task loads. In Chromium (when it
and playwright are present) the page loads with no console error and no injected element."""

from __future__ import annotations

import html.parser
import json
import re
import shutil
from pathlib import Path

import pytest

from tests.refusals import fixture_plugins_on_path


@pytest.fixture(scope="module", autouse=True)
def hostile_plugins():
    yield from fixture_plugins_on_path("hostile_tasks")


@pytest.fixture(scope="module")
def hostile(tmp_path_factory, hostile_plugins):
    """The hostile task's runs (2-layer attention-only, trained until its edges are traced), its
    report, edge circuits and both exports."""
    from models import ModelSpec
    from tasks.registry import build_task, get_task_class
    from tasks.settings import TrainSettings
    from toylens.edges import edges_command
    from toylens.export import export_command
    from toylens.family import RunPlan, train_family
    from toylens.report import report_command

    out = tmp_path_factory.mktemp("hostile")
    task = build_task(get_task_class("hostile"), {})
    spec = ModelSpec(n_layers=2, d_model=32, n_heads=1, mlp=False, norm=None)
    settings = TrainSettings(max_steps=300, batch_size=32, lr=1e-2, eval_every=50)
    train_family(
        [RunPlan(task, "attn-only-2x1", spec, 0, settings, out / "runs" / "attn-only-2x1" / "seed0")], progress=False
    )
    report_command(out / "runs", out / "report")
    edges_command(out / "runs", out / "edges")
    export_command("mib", out / "runs", out / "exports", 1)
    export_command("attribution", out / "runs", out / "exports", 1)
    return task, out


class Elements(html.parser.HTMLParser):
    """Every element and attribute an HTML parser builds from a page (what a browser would)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.scripts, self.current = [], {}, None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self.current = dict(attrs).get("id") if tag == "script" else None

    def handle_data(self, data):
        if self.current:
            self.scripts[self.current] = self.scripts.get(self.current, "") + data


def elements(text: str) -> Elements:
    parser = Elements()
    parser.feed(text)
    parser.close()
    return parser


def assert_nothing_injected(text: str) -> Elements:
    """No element or attribute of the page comes from a token name: none carries the marker, and
    every <script> element is one the page itself has (the data, the sort script, report.js)."""
    from hostile_tasks import PWNED

    parsed = elements(text)
    for tag, attrs in parsed.tags:
        assert PWNED not in tag and not any(PWNED in f"{k}={v}" for k, v in attrs.items() if k != "srcdoc"), (
            tag,
            attrs,
        )
        assert tag not in ("img", "b") or PWNED not in str(attrs)
    assert sum(tag == "script" for tag, _ in parsed.tags) <= 3
    return parsed


def strict_json(path: Path):
    """The file parsed the strictest way: UTF-8, no NaN or infinity, no lone surrogate escape."""
    text = path.read_bytes().decode("utf-8")
    assert not re.search(r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])", text), path
    return json.loads(text, parse_constant=refuse_constant)


def refuse_constant(name: str):
    pytest.fail(f"{name} is not JSON (strict readers refuse NaN and Infinity)")


def test_every_json_file_is_strict_and_keeps_the_names(hostile):
    _, out = hostile
    files = [p for p in out.rglob("*.json") if not p.name.startswith(".toylens-tmp")] + list(out.rglob("*.jsonl"))
    assert len(files) >= 8
    for path in files:
        if path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                json.loads(line, parse_constant=refuse_constant)
        else:
            strict_json(path)
    assert list((out / "edges").glob("mib_*.json")), "the run's edges were not traced: the test needs them"
    assert list((out / "exports" / "mib").glob("*.json")) and list((out / "exports" / "attribution").glob("*.json"))
    from hostile_tasks import HOSTILE

    attribution = [strict_json(p) for p in (out / "exports" / "attribution").glob("*.json")]
    assert any(name in json.dumps(attribution, ensure_ascii=False) for name in HOSTILE)  # kept, as data


def test_report_html_data_parses_back_and_no_element_is_injected(hostile):
    from hostile_tasks import ALL_AT_ONCE

    _, out = hostile
    text = (out / "report" / "report.html").read_text()
    parsed = assert_nothing_injected(text)
    data = json.loads(parsed.scripts["report-data"])
    assert [run["id"] for run in data["runs"]] == ["attn-only-2x1-seed0"]
    tokens = {t for pair in data["runs"][0]["examples"] for t in pair["clean_tokens"]}
    assert ALL_AT_ONCE in tokens, "the page's examples should carry the hostile names, unchanged"
    assert "<" not in parsed.scripts["report-data"]  # no '</script>' or '<!--' can end or alter the element


def test_the_notebook_views_are_a_sandboxed_frame_with_nothing_injected(hostile):
    from probes.report.outputs.html import run_views
    from tasks.training.runs import find_runs

    _, out = hostile

    frame = run_views(find_runs(out / "runs")[0])
    outer = elements(frame)
    assert [tag for tag, _ in outer.tags] == ["iframe"]
    attrs = outer.tags[0][1]
    assert attrs["sandbox"] == "allow-scripts"  # scripts, but no same origin: it cannot reach the notebook
    inner = assert_nothing_injected(attrs["srcdoc"])
    assert json.loads(inner.scripts["report-data"])["runs"]


def hostile_census(folder: Path) -> Path:
    """A census whose circuit labels are the hostile names, written into `folder`/census."""
    from types import SimpleNamespace

    from hostile_tasks import HOSTILE

    from probes.census import Census, group_census
    from probes.report.outputs.census import write_census

    def member(seed, label):
        run = SimpleNamespace(seed=seed, metrics={"stop_reason": "validation solved", "accuracy": {"heldout": 1.0}})
        return run, "path", label, 0.8

    group = group_census("attn-only-2x1", "default", {}, [member(i, label) for i, label in enumerate(HOSTILE[:7])], 0)
    write_census(Census((group,), ()), folder / "census")
    return folder / "census"


def test_census_html_shows_hostile_labels_as_text(tmp_path):
    census = hostile_census(tmp_path)
    assert_nothing_injected((census / "census.html").read_text())
    strict_json(census / "census.json")


def test_a_figure_draws_mathtext_as_plain_text():
    import io

    from common.figure import Figure

    fig = Figure(layout="constrained")
    ax = fig.subplots()
    ax.set_xticks([0, 1], ["$\\frac{$", "a$^$b"])
    ax.set_title("$\\bad{$ x $")
    fig.savefig(io.BytesIO(), format="png", bbox_inches="tight")  # matplotlib's own Figure raises here


def test_a_lone_surrogate_in_a_token_is_refused_when_the_task_loads():
    from common.cli import UsageError
    from tasks.registry import build_task, get_task_class

    with pytest.raises(UsageError) as refused:
        build_task(get_task_class("surrogate"), {}).vocabulary()
    line = str(refused.value)
    assert "\n" not in line and "lone surrogate" in line and "'surrogate'" in line


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def test_the_pages_in_chromium_have_no_console_error_and_no_injected_element(hostile, tmp_path):
    """report.html (its run shown), census.html and the notebook's views (the frame as a notebook
    cell holds it), each opened in Chromium."""
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (apt-get install chromium): the browser check needs one")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")
    from probes.report.outputs.html import run_views
    from tasks.training.runs import find_runs

    _, out = hostile
    cell = tmp_path / "cell.html"
    cell.write_text(f"<!DOCTYPE html><html><body>{run_views(find_runs(out / 'runs')[0])}</body></html>")
    census = hostile_census(tmp_path) / "census.html"
    injected = "document.querySelectorAll('#pwned, .pwned').length + (document.body.dataset.pwned ? 1 : 0)"
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        for path, fragment in ((out / "report" / "report.html", "#run=attn-only-2x1-seed0"), (census, ""), (cell, "")):
            page = browser.new_page()
            errors = []
            page.on("console", lambda message, errors=errors: message.type == "error" and errors.append(message.text))
            page.on("pageerror", lambda error, errors=errors: errors.append(str(error)))
            page.goto(path.as_uri() + fragment)
            page.wait_for_load_state("load")
            frames = page.frames[1:] if path == cell else [page.main_frame]
            assert frames, path
            for frame in frames:
                frame.wait_for_load_state("load")
                assert frame.evaluate(injected) == 0, path
            if path != census:
                assert frames[0].locator("#nav a[data-run]").count() == 1, path  # its run is shown
            assert errors == [], (path, errors)
            page.close()
        browser.close()


def test_a_heads_attention_is_shown_by_role_where_the_task_names_roles(hostile):
    """The task names the position "source": a clicked head's panel gives its mean attention from
    the scored position by role (keys labelled by role, the numbers report.json holds), above the
    by-position mean."""
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (apt-get install chromium): the browser check needs one")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")
    _, out = hostile
    page_file = out / "report" / "report.html"
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(page_file.as_uri() + "#run=attn-only-2x1-seed0")
        page.wait_for_load_state("load")
        data = json.loads(page.locator("#report-data").text_content())
        by_role = data["runs"][0]["heads"]["by_role"]
        assert by_role["roles"] == ["source"]
        page.locator('g.node.head[data-node="L1H0"]').click()
        row = page.locator("#detail .att-row", has=page.locator(".att-label", has_text="by role"))
        assert row.count() == 1 and row.locator(".att-cell").all_text_contents() == ["source"]
        assert row.locator(".att-cell").first.get_attribute("title") == f"source: {by_role['mass']['L1H0'][0]:.2f}"
        assert "keys by role" in page.locator("#detail").text_content()
        browser.close()
