"""`toylens screenshots REPORT_HTML [--out DIR]`: PNGs of report.html's views, taken in the
system's Chromium (Playwright's Python package, the dev extra): per run named with --graph, its edge
graph; per run named with --attention, its attention per head. Default: the main job's (Winograd)
block-2 seed 1's graph and attn-only-2x1 seed 2's attention, into docs/figures, as the README shows;
for another task's report name its runs (--graph MODEL:SEED, --attention MODEL:SEED)."""

from __future__ import annotations

import shutil
from pathlib import Path

from common.cli import Parser, UsageError, run_cli


def png_name(kind: str, name: str) -> str:
    from probes.report.outputs.html_data import run_id

    model, _, seed = name.rpartition(":")
    return f"report-{kind}-{run_id(model, int(seed))}.png"


def screenshots(report: Path, out: Path, graphs: list[str], attention: list[str]) -> list[Path]:
    from common.atomic import atomic_write
    from common.ownership import claim_check
    from probes.report.outputs.html_data import run_id

    wanted = [(name, ".graph-box", "graph") for name in graphs] + [
        (name, ".attention-box", "attention") for name in attention
    ]
    for name, _, kind in wanted:  # a user's PNG of a name toylens writes: refused before the browser starts
        claim_check(out / png_name(kind, name))
    browser_path = shutil.which("chromium") or shutil.which("chromium-browser")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise UsageError("playwright is not installed: pip install -e '.[dev]'") from None
    if browser_path is None:
        raise UsageError("no chromium on PATH: apt-get install chromium")
    written = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1300, "height": 1000})
        for name, selector, kind in wanted:
            model, _, seed = name.rpartition(":")
            page.goto(Path(report).resolve().as_uri() + f"#run={run_id(model, int(seed))}")
            element = page.locator(selector)
            if element.count() != 1:
                raise UsageError(
                    f"{report} shows no {kind} for {model} seed {seed}; name a run it shows with --{kind} MODEL:SEED"
                )
            path = out / png_name(kind, name)
            atomic_write(path, lambda temp, element=element: element.screenshot(path=str(temp), type="png"))
            written.append(path)
        browser.close()
    return written


def model_seed(text: str) -> str:
    """argparse type for a run named MODEL:SEED (a model name and a seed a run can have)."""
    import argparse

    from common.cli import path_name
    from tasks.training.runs import MAX_SEED

    model, colon, seed = text.rpartition(":")
    try:
        path_name(model, "model")
    except UsageError:
        colon = ""
    if not colon or not seed.isdigit() or int(seed) > MAX_SEED:
        raise argparse.ArgumentTypeError(f"{text!r} is not MODEL:SEED (a model name and a seed, e.g. block-2:1)")
    return text


def main(argv=None) -> None:
    from common.cli import folder_path, out_path

    parser = Parser(prog="toylens screenshots", description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("report", type=folder_path)
    parser.add_argument("--out", type=out_path, default=Path("docs/figures"))
    parser.add_argument(
        "--graph", action="append", type=model_seed, help="MODEL:SEED (default block-2:1, a Winograd run)"
    )
    parser.add_argument(
        "--attention", action="append", type=model_seed, help="MODEL:SEED (default attn-only-2x1:2, a Winograd run)"
    )
    args = parser.parse_args(argv)
    if not args.report.is_file():
        parser.error(f"{args.report} is not a report.html")
    run_cli(
        lambda: print(
            "\n".join(
                f"wrote {p}"
                for p in screenshots(
                    args.report, args.out, args.graph or ["block-2:1"], args.attention or ["attn-only-2x1:2"]
                )
            )
        )
    )
