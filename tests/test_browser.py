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
    for run in page_data(page)["runs"]:       # every run's panel drawn once
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
        point = page.evaluate("""id => {
            const p = document.querySelector(`path.hit[data-hit="${id}"]`);
            const m = p.getPointAtLength(p.getTotalLength() / 2), r = p.ownerSVGElement.getBoundingClientRect();
            const x = r.left + m.x, y = r.top + m.y;
            return document.elementFromPoint(x, y) === p ? [x, y] : null; }""", edge["id"])
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
