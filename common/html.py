"""Self-contained HTML pages: styles, scripts, data and images inline, so a page opens from file://
and makes no network request. Sortable tables (click a column's header) come with every page.

Written by hand: the kept libraries draw static figures (matplotlib, seaborn); the field's HTML
views load their scripts from CDNs (probes.report.outputs.html says which and why not)."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #222; }
header { background: #1f2d3d; color: #fff; padding: 8px 16px; }
header h1 { font-size: 18px; margin: 0 0 4px; }
main { padding: 8px 16px 40px; }
/* a table wider than the view scrolls inside its own box, never the page sideways */
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; display: block; max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: left; vertical-align: top; }
th { background: #eef1f5; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[data-order="asc"]::after { content: " \\25B2"; }
table.sortable th[data-order="desc"]::after { content: " \\25BC"; }
img { max-width: 100%; }
.note { color: #555; font-size: 12px; }
"""

SORT_SCRIPT = """
function sortTable(th) {
  const table = th.closest('table'), body = table.tBodies[0], column = th.cellIndex;
  const order = th.dataset.order === 'asc' ? 'desc' : 'asc';
  table.querySelectorAll('th').forEach(h => delete h.dataset.order);
  th.dataset.order = order;
  const key = cell => {
    const text = cell.dataset.sort !== undefined ? cell.dataset.sort : cell.textContent.trim();
    const number = parseFloat(text.replace(/[%,]/g, ''));
    return isNaN(number) ? text.toLowerCase() : number;
  };
  const rows = Array.from(body.rows);
  rows.sort((a, b) => {
    const x = key(a.cells[column]), y = key(b.cells[column]);
    const c = (typeof x === typeof y) ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === 'number' ? -1 : 1);
    return order === 'asc' ? c : -c;
  });
  rows.forEach(r => body.appendChild(r));
}
document.addEventListener('click', e => {
  const th = e.target.closest('table.sortable th');
  if (th) sortTable(th);
});
"""


def escape(text) -> str:
    return html.escape(str(text), quote=True)


def table(headers: list[str], rows: list[list], sortable: bool = True, attributes: str = "") -> str:
    """An HTML table of text cells (escaped); sortable by any column."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    kind = ' class="sortable"' if sortable else ""
    return f"<table{kind}{attributes}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def image_uri(path: Path) -> str:
    """A PNG as a data URI (inline: no request for it)."""
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


# Characters a JSON string may hold that HTML (or, for U+2028/2029, older JavaScript) would read
# as something else inside a script element: '<' opens '</script>' and '<!--', which changes how
# the HTML parser ends the element; '>' and '&' are escaped too so no markup survives at all.
SCRIPT_UNSAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(data) -> str:
    """`data` as JSON text safe inside an HTML <script> element: strict (no NaN) and with every
    character the HTML parser could read as markup written as a JSON escape, so JSON.parse gives
    back the same strings."""
    text = json.dumps(data, separators=(",", ":"), allow_nan=False)
    return re.sub("[<>&\u2028\u2029]", lambda match: SCRIPT_UNSAFE[match.group()], text)


def json_script(element_id: str, data) -> str:
    """`data` as an inline JSON script element (script_json: no string can end or alter it)."""
    return f'<script type="application/json" id="{escape(element_id)}">{script_json(data)}</script>'


def sandboxed_frame(document: str, style: str) -> str:
    """A whole page shown inside another (a notebook cell) as an iframe whose srcdoc is escaped
    attribute text and whose sandbox lets the page run its own script but not reach its host
    (no same origin: no access to the notebook's page, cookies or storage)."""
    return f'<iframe srcdoc="{escape(document)}" sandbox="allow-scripts" style="{escape(style)}"></iframe>'


def page(title: str, body: str, style: str = "", script: str = "", heading: str = "") -> str:
    """A whole page. A Content-Security-Policy forbids every request but inline ones and data:
    images, so a page that tried to load anything would fail in the browser, not fetch it."""
    policy = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{policy}">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{STYLE}{style}</style></head>"
        f"<body><header><h1>{escape(title)}</h1>{heading}</header><main>{body}</main>"
        f"<script>{SORT_SCRIPT}</script><script>{script}</script></body></html>\n"
    )
