"""report.html in a real browser (Debian's chromium, driven by Playwright's Python package, never a
browser build of its own): it loads from file:// with no console error and no request beyond the
file itself, the named edge circuit's edges are in the SVG, hovering an edge shows its number, and
clicking a head shows its attention. Skips, saying why, without chromium or playwright."""

from __future__ import annotations

import json
import shutil

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (apt-get install chromium): the browser tests need one")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def report_html(tiny_runs, tmp_path_factory):
    """The report of the tiny runs and of the planted two-hop model (a circuit to see)."""
    from test_html_report import planted_measured

    return planted_measured(tiny_runs, tmp_path_factory.mktemp("browser"))


def opened(browser, path, fragment: str = ""):
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    errors, requests = [], []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(path.as_uri() + fragment)
    page.wait_for_load_state("load")
    return page, errors, requests


def page_data(page) -> dict:
    return json.loads(page.locator("#report-data").text_content())


def test_the_page_loads_offline_with_no_error_and_no_request(browser, report_html):
    path, _ = report_html
    page, errors, requests = opened(browser, path)
    for run in page_data(page)["runs"]:  # every run's panel drawn once
        page.evaluate(f"location.hash = '#run={run['id']}'")
        page.wait_for_timeout(50)
    assert errors == [] and requests == [path.as_uri()]
    page.close()


def test_the_circuits_edges_are_in_the_graph_and_hovering_one_shows_its_number(browser, report_html):
    path, run_id = report_html
    page, errors, _ = opened(browser, path, f"#run={run_id}")
    graph = next(r for r in page_data(page)["runs"] if r["id"] == run_id)["graph"]
    circuit = [e for e in graph["edges"] if e["in"]]
    assert circuit
    for edge in circuit:
        assert page.locator(f'path.edge.in-circuit[data-edge="{edge["id"]}"]').count() == 1
    # Hover each circuit edge at a point of its own stroke that no other edge covers.
    hovered = 0
    for edge in circuit:
        point = page.evaluate(
            """id => {
            const p = document.querySelector(`path.hit[data-hit="${id}"]`);
            p.ownerSVGElement.scrollIntoView({block: 'center'});  // the finding opens the page: the graph is below it
            const m = p.getPointAtLength(p.getTotalLength() / 2), r = p.ownerSVGElement.getBoundingClientRect();
            const x = r.left + m.x, y = r.top + m.y;
            return document.elementFromPoint(x, y) === p ? [x, y] : null; }""",
            edge["id"],
        )
        if point is None:
            continue
        page.mouse.move(*point)
        tip = page.locator("#tip")
        assert tip.is_visible()
        text = tip.text_content()
        assert edge["id"] in text and f"{100 * edge['alone']:+.1f}%" in text
        hovered += 1
    assert hovered >= 1 and errors == []
    page.close()


def test_clicking_a_head_shows_its_attention_at_the_scored_positions(browser, report_html):
    path, run_id = report_html
    page, errors, _ = opened(browser, path, f"#run={run_id}")
    page.locator('g.node.head[data-node="L1H0"]').click()
    detail = page.locator("#detail")
    assert "L1H0: attention at the scored positions" in detail.text_content()
    assert detail.locator(".att-cell").count() > 0
    page.locator(".thumb").nth(1).click()
    assert page.locator(".thumb.chosen").get_attribute("data-head") == "L0H1"
    assert errors == []
    page.close()


def boxes_outside(page, container: str, texts: str) -> list[str]:
    """The text of every `texts` element drawn (partly) outside its `container` ancestor's box."""
    return page.evaluate(
        """([container, texts]) => {
        const out = [];
        for (const box of document.querySelectorAll(container)) {
            const r = box.getBoundingClientRect();
            for (const t of box.querySelectorAll(texts)) {
                const b = t.getBoundingClientRect();
                if (!t.textContent.trim() || b.width === 0) continue;
                if (b.left < r.left - 1 || b.right > r.right + 1 || b.top < r.top - 1 || b.bottom > r.bottom + 1)
                    out.push(t.textContent);
            }
        }
        return out; }""",
        [container, texts],
    )


def test_legends_and_labels_lie_inside_their_panels(browser, report_html):
    path, run_id = report_html
    page, errors, _ = opened(browser, path, f"#run={run_id}")
    assert page.locator("svg.curves").count() >= 1 and page.locator("svg.graph").count() >= 1
    assert boxes_outside(page, "svg.curves", "text") == []  # e.g. "oracle (CPR 0.93, CMD 0.0" cut
    assert boxes_outside(page, "svg.graph", "text.legend") == []
    assert boxes_outside(page, "svg.graph", "g.node text") == []  # the heads', MLPs' and ends' labels
    assert page.locator("svg.graph g.node text").count() >= 4
    assert errors == []
    page.close()


def test_the_nav_wraps_instead_of_overflowing_and_every_link_is_reachable(browser, report_html):
    path, _ = report_html
    page = browser.new_page(viewport={"width": 420, "height": 800})
    page.goto(path.as_uri())
    width = page.evaluate("innerWidth")
    overflow = page.evaluate(
        "(() => { const n = document.getElementById('nav'); return n.scrollWidth - n.clientWidth; })()"
    )
    assert overflow <= 0
    for link in page.locator("#nav a").all():
        box = link.bounding_box()
        assert box is not None and 0 <= box["x"] and box["x"] + box["width"] <= width, link.text_content()
    page.close()


def test_a_heads_panel_scrolls_into_view_when_its_head_is_clicked(browser, report_html):
    path, run_id = report_html
    page = browser.new_page(viewport={"width": 900, "height": 500})  # the panel opens below the fold here
    page.goto(path.as_uri() + f"#run={run_id}")
    page.locator('g.node.head[data-node="L1H0"]').click()
    page.wait_for_timeout(100)
    top, bottom, height = page.evaluate("""(() => { const r = document.getElementById('detail').getBoundingClientRect();
        return [r.top, r.bottom, innerHeight]; })()""")
    assert top < height and bottom > 0, (top, bottom, height)
    page.close()


def test_hovering_the_first_edge_reads_as_a_sentence_and_the_attention_has_a_scale(browser, report_html):
    path, run_id = report_html
    page, errors, _ = opened(browser, path, f"#run={run_id}")
    assert page.locator(".attention-box .scale").count() == 1
    assert "weight" in page.locator(".big-head svg.pattern rect title").first.text_content()
    sentence = page.evaluate("""(() => edgeSentence({in: true, before: 0, after: 0.5}, 1))()""")
    assert sentence == "In the circuit: the oracle ranks it first; on its own it takes faithfulness from 0.00 to 0.50."
    assert "top 0 edges" not in page.evaluate("""(() => edgeSentence({in: true, before: 0, after: 0}, 1))()""")
    assert errors == []
    page.close()


@pytest.fixture(scope="module")
def census_html(tmp_path_factory):
    """A census page with a long label, so its table is wider than a phone's view."""
    from types import SimpleNamespace

    from probes.census import Census, group_census
    from probes.report.outputs.census import write_census

    def member(seed, label):
        run = SimpleNamespace(seed=seed, metrics={"stop_reason": "validation solved", "accuracy": {"heldout": 1.0}})
        return run, "path", label, 0.8

    labels = ["Q-composition " + "L0H0->L1H0 " * 6, "K-composition b"]
    group = group_census("attn-only-2x1", "default", {}, [member(s, label) for s, label in enumerate(labels)], 0)
    folder = tmp_path_factory.mktemp("census") / "census"
    write_census(Census((group,), ()), folder)
    return folder / "census.html"


@pytest.mark.parametrize("width", [1300, 420])
def test_the_census_page_fits_its_view_offline(browser, census_html, width):
    page = browser.new_page(viewport={"width": width, "height": 900})
    errors, requests = [], []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(census_html.as_uri())
    page.wait_for_load_state("load")
    assert errors == [] and requests == [census_html.as_uri()]
    # Wide tables scroll inside their own box; the page itself never scrolls sideways.
    assert page.evaluate("document.documentElement.scrollWidth <= innerWidth")
    assert boxes_outside(page, "body", "h1, h2, h3, p, li") == []
    page.close()


def test_the_main_path_is_a_chain_to_the_logits_drawn_with_a_halo(browser, report_html):
    path, run_id = report_html
    page, errors, _ = opened(browser, path, f"#run={run_id}")
    graph = next(r for r in page_data(page)["runs"] if r["id"] == run_id)["graph"]
    by_id = {e["id"]: e for e in graph["edges"]}
    chain = [by_id[i] for i in graph["main_path"]]
    assert chain and chain[-1]["r"] == "logits" and all(e["in"] for e in chain)
    assert all(a["r"] == b["s"] for a, b in zip(chain, chain[1:]))
    assert sorted(h.get_attribute("data-halo") for h in page.locator("path.halo").all()) == sorted(graph["main_path"])
    assert errors == []
    page.close()


def test_the_main_path_follows_the_strongest_weakest_link():
    from probes.report.outputs.html_data import main_path

    def edge(s, r, alone, inside=True):
        return {"id": f"{s}->{r}", "s": s, "r": r, "alone": alone, "in": inside}

    edges = [
        edge("embed", "L0H0", 0.9),
        edge("L0H0", "logits", 0.2),  # strong start, weak end
        edge("embed", "L1H0", 0.5),
        edge("L1H0", "logits", 0.6),
        edge("embed", "logits", 0.99, inside=False),  # outside the circuit
    ]
    assert main_path(edges) == ["embed->L1H0", "L1H0->logits"]


# Issue 56: the first screen (1400 x 1000) is the finding, not a legend of codes: the ladder figure and
# the mechanism's sentences are in view, above the first table; on the main job's report and on the
# example plugin's (a task toylens knows only through its plugin interface).
@pytest.mark.slow
def test_the_first_screen_shows_the_ladder_and_the_mechanism_above_the_first_table(browser, report_html, tmp_path):
    first_screen_shows_the_finding(browser, report_html[0], tmp_path)


@pytest.fixture(scope="module")
def plugin_report_html(tmp_path_factory):
    """report.html of the example plugin (examples/toylens-firstmark): a bag of words and
    attn-only-2x1, seed 0, trained until solved (at most 400 steps), loaded without installing it:
    its module and an entry point on sys.path while this module runs."""
    import sys
    from pathlib import Path

    from probes.report.measure import measure_run
    from probes.settings import ReportSettings
    from tasks.registry import build_task, get_task_class
    from tasks.settings import model_settings
    from tasks.training.runs import find_runs
    from toylens.family import plan_family, train_family
    from toylens.report import publish_report

    example = Path(__file__).resolve().parents[1] / "examples" / "toylens-firstmark"
    entry = tmp_path_factory.mktemp("entry")
    info = entry / "toylens_firstmark_example-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toylens-firstmark-example\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[toylens.tasks]\nfirstmark = firstmark:FirstMarkTask\n")
    sys.path[:0] = [str(entry), str(example)]
    try:
        task = build_task(get_task_class("firstmark"), {})
        runs = tmp_path_factory.mktemp("firstmark") / "runs"
        models = ["bag-of-words", "attn-only-2x1"]
        settings = {name: model_settings(task, name, {"max_steps": 400, "eval_every": 50}) for name in models}
        train_family(plan_family(task, models, [0], settings, runs), progress=False)
        out = runs / "report"
        out.mkdir()
        measured = [measure_run(run, out, ReportSettings()) for run in find_runs(runs)]
        publish_report(measured, out, task="firstmark")
    finally:
        sys.path.remove(str(entry))
        sys.path.remove(str(example))
    return out / "report.html"


@pytest.mark.slow
def test_the_example_plugins_first_screen_shows_the_ladder_and_the_mechanism(browser, plugin_report_html, tmp_path):
    first_screen_shows_the_finding(browser, plugin_report_html, tmp_path)


def first_screen_shows_the_finding(browser, path, tmp_path) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    page.screenshot(path=str(tmp_path / "first-screen.png"))  # kept with the test's files, to look at
    boxes = page.evaluate(
        """() => {
        const box = e => e ? e.getBoundingClientRect().toJSON() : null;
        const block = document.querySelector('#finding-block');
        return {figure: box(block && block.querySelector('img')), sentences: box(block && block.querySelector('ul')),
                table: box(document.querySelector('table'))}; }"""
    )
    assert boxes["figure"] and boxes["sentences"] and boxes["table"], boxes
    assert 0 <= boxes["figure"]["top"] and boxes["figure"]["bottom"] <= 1000
    assert boxes["sentences"]["bottom"] <= 1000 and boxes["sentences"]["bottom"] <= boxes["table"]["top"]
    assert "The simplest model that solves the task is" in page.locator("#finding-block ul").inner_text()
    page.close()
