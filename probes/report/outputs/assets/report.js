// report.html's views, drawn as plain SVG from the page's inline data (probes/report/html.py).
'use strict';
const DATA = JSON.parse(document.getElementById('report-data').textContent);
const SVG = 'http://www.w3.org/2000/svg';
const PORT_COLOUR = {q: '#1f77b4', k: '#ff7f0e', v: '#2ca02c', in: '#555'};
const PORT_OFFSET = {q: -18, k: 0, v: 18, in: 0};
const METHOD_COLOUR = ['#222', '#d62728', '#9467bd', '#8c564b', '#17becf'];

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c);
  return node;
}
function svg(tag, attrs, parent) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}
function signedPct(x) { return x === null ? 'n/a' : (x >= 0 ? '+' : '') + (100 * x).toFixed(1) + '%'; }
function fixed(x, digits) { return x === null ? 'n/a' : x.toFixed(digits); }
function heat(w) { const c = Math.round(255 * (1 - Math.min(1, Math.max(0, w)))); return `rgb(${c},${c},255)`; }
function table(headers, rows) {
  const t = el('table', {class: 'sortable'});
  t.append(el('thead', {}, el('tr', {}, ...headers.map(h => el('th', {}, h)))));
  const body = el('tbody');
  for (const row of rows) body.append(el('tr', {}, ...row.map(c => el('td', {}, String(c)))));
  t.append(body);
  return t;
}

// ---- navigation ---------------------------------------------------------------------------
function buildNav() {
  const nav = document.getElementById('nav');
  const models = [...new Set(DATA.runs.map(r => r.model))];
  if (document.getElementById('summary').childElementCount) nav.append(el('a', {href: '#summary', class: 'nav-summary'}, 'Summary'));
  for (const model of models) {
    const group = el('span', {class: 'nav-model'}, model + ':');
    for (const run of DATA.runs.filter(r => r.model === model)) {
      group.append(' ', el('a', {href: '#run=' + run.id, 'data-run': run.id}, 'seed ' + run.seed));
    }
    nav.append(group);
  }
}
function route() {
  const match = location.hash.match(/^#run=(.+)$/);
  const run = match ? DATA.runs.find(r => r.id === match[1]) : null;
  const summary = document.getElementById('summary');
  const hasSummary = summary.childElementCount > 0;
  document.querySelectorAll('#nav a').forEach(a => a.classList.toggle('current', run ? a.dataset.run === run.id : !a.dataset.run));
  summary.hidden = Boolean(run) || !hasSummary;
  document.querySelectorAll('.extra').forEach(x => { x.hidden = Boolean(run); });
  showRun(run || (hasSummary ? null : DATA.runs[0]));
}

// ---- one run ------------------------------------------------------------------------------
function showRun(run) {
  const panel = document.getElementById('run');
  panel.replaceChildren();
  panel.hidden = !run;
  if (!run) return;
  panel.append(el('h2', {}, `${run.model} seed ${run.seed}`));
  const columns = Object.keys(run.cells);
  if (columns.length) panel.append(table(columns, [columns.map(c => run.cells[c])]));
  for (const words of run.words) panel.append(el('p', {class: 'words'}, words));
  const layout = el('div', {class: 'layout'});
  const left = el('div', {class: 'graph-box'}), right = el('div', {id: 'detail', class: 'detail'});
  right.append(el('p', {class: 'note'}, 'Hover an edge for its numbers; click a head for its attention on the example pairs.'));
  layout.append(left, right);
  panel.append(el('h3', {}, 'Edge graph'), layout);
  if (run.graph) drawGraph(left, run); else left.append(el('p', {class: 'note'}, 'No edge graph: edges are traced for runs of two or more softmax-attention blocks whose pairs differ by the report\'s minimum gap.'));
  if (run.examples.length) { panel.append(el('h3', {}, 'Attention per head on the example pairs')); drawAttention(panel, run); }
  if (run.graph && run.graph.every_k.every(f => f !== null)) { panel.append(el('h3', {}, 'Faithfulness against circuit size')); drawCurves(panel, run.graph); }
  if (run.graph) {
    const more = el('details', {}, el('summary', {}, `Every edge (${run.graph.edges.length}; click a column to sort)`));
    panel.append(more);
    edgeTable(more, run.graph);
  }
}

// ---- the edge graph -----------------------------------------------------------------------
function placeNodes(graph, width) {
  const heads = graph.nodes.filter(n => n.kind === 'head');
  const nHeads = Math.max(1, ...heads.map(n => n.head + 1));
  const rowHeight = 64, rows = 2 * graph.n_layers + 2;
  const y = row => 30 + (rows - 1 - row) * rowHeight;   // row 0 (embed) at the bottom
  const spread = h => (width / (nHeads + 1)) * (h + 1);
  const place = {};
  for (const n of graph.nodes) {
    if (n.kind === 'embed') place[n.id] = [width / 2, y(0)];
    else if (n.kind === 'head') place[n.id] = [spread(n.head), y(2 * n.layer + 1)];
    else if (n.kind === 'mlp') place[n.id] = [width / 2, y(2 * n.layer + 2)];
    else place[n.id] = [width / 2, y(rows - 1)];
  }
  return {place, height: 60 + (rows - 1) * rowHeight};
}
function edgePath(a, b, port) {
  const [x0, y0] = [a[0], a[1] - 12], [x1, y1] = [b[0] + PORT_OFFSET[port], b[1] + 12];
  const span = Math.abs(y0 - y1) / 64;
  const bow = span > 1.5 ? 22 * span * (x0 <= x1 ? 1 : -1) : 0;   // long edges bow past the rows between
  const cx = (x0 + x1) / 2 + bow, cy = (y0 + y1) / 2;
  return `M${x0},${y0} Q${cx},${cy} ${x1},${y1}`;
}
function drawGraph(box, run) {
  const graph = run.graph, width = 640;
  const {place, height} = placeNodes(graph, width);
  const root = svg('svg', {width, height, viewBox: `0 0 ${width} ${height}`, class: 'graph', role: 'img'});
  box.append(root);
  const defs = svg('defs', {}, root);
  for (const [port, colour] of Object.entries(PORT_COLOUR)) {
    const m = svg('marker', {id: 'arrow-' + port, viewBox: '0 0 10 10', refX: 9, refY: 5, markerUnits: 'userSpaceOnUse', markerWidth: 9, markerHeight: 9, orient: 'auto-start-reverse'}, defs);
    svg('path', {d: 'M0,0 L10,5 L0,10 z', fill: colour}, m);
  }
  const largest = Math.max(1e-9, ...graph.edges.filter(e => e.in).map(e => Math.abs(e.alone || 0)));
  const used = new Set(graph.edges.filter(e => e.in).flatMap(e => [e.s, e.r]));
  const ordered = [...graph.edges.filter(e => !e.in), ...graph.edges.filter(e => e.in)];   // circuit edges on top
  const edgeLayer = svg('g', {class: 'edges'}, root), hitLayer = svg('g', {class: 'hits'}, root);
  const main = new Set(graph.main_path || []);
  for (const e of ordered) {
    const d = edgePath(place[e.s], place[e.r], e.port);
    if (main.has(e.id))   // the main path drawn with a halo under its edges
      svg('path', {d, class: 'halo', 'data-halo': e.id, fill: 'none', stroke: '#ffd54a', 'stroke-width': 12, 'stroke-linecap': 'round'}, edgeLayer);
    const width = e.in ? 1 + 5 * Math.abs(e.alone || 0) / largest : 1;
    svg('path', {d, class: 'edge' + (e.in ? ' in-circuit' : ''), 'data-edge': e.id, stroke: e.in ? PORT_COLOUR[e.port] : '#bbb',
      'stroke-width': width, 'marker-end': e.in ? `url(#arrow-${e.port})` : '', fill: 'none'}, edgeLayer);
    const hit = svg('path', {d, class: 'hit', 'data-hit': e.id, fill: 'none', stroke: 'transparent', 'stroke-width': 7}, hitLayer);
    hit.addEventListener('mouseenter', ev => showEdge(ev, e, graph));
    hit.addEventListener('mousemove', ev => moveTip(ev));
    hit.addEventListener('mouseleave', hideTip);
  }
  const circuitHeads = new Set((run.heads.circuit || []).map(n => n.head));
  for (const n of graph.nodes) {
    const [x, y] = place[n.id];
    const g = svg('g', {class: 'node ' + n.kind + (used.has(n.id) ? ' used' : '') + (circuitHeads.has(n.id) ? ' head-circuit' : ''),
      'data-node': n.id, transform: `translate(${x - 30},${y - 12})`}, root);
    svg('rect', {width: 60, height: 24, rx: 6}, g);
    const label = svg('text', {x: 30, y: 16, 'text-anchor': 'middle'}, g);
    label.textContent = n.id;
    if (n.kind === 'head') {
      g.addEventListener('click', () => showHead(run, n.id));
      for (const port of ['q', 'k', 'v']) {   // where each input's edges land, under the box
        const letter = svg('text', {x: 30 + PORT_OFFSET[port], y: 34, 'text-anchor': 'middle', class: 'port', fill: PORT_COLOUR[port]}, g);
        letter.textContent = port;
      }
    }
  }
  for (const [port, colour] of Object.entries(PORT_COLOUR)) {
    const i = Object.keys(PORT_COLOUR).indexOf(port);
    svg('rect', {x: 8, y: 8 + 16 * i, width: 14, height: 4, fill: colour}, root);
    svg('text', {x: 26, y: 14 + 16 * i, class: 'legend'}, root).textContent = port === 'in' ? 'MLP / logits input' : port + ' input';
  }
  svg('text', {x: width - 8, y: 14, 'text-anchor': 'end', class: 'legend'}, root).textContent =
    graph.size ? `drawn: the oracle ranking's circuit, ${graph.size} of ${graph.edges.length} edges, faithfulness ${graph.faithfulness === null ? 'n/a' : (100 * graph.faithfulness).toFixed(1) + '%'} (gap scale)` +
                 (graph.headline && graph.headline.size !== graph.size ? `; the summary names the ${graph.headline.method}'s, ${graph.headline.size} edges, ${(100 * graph.headline.faithfulness).toFixed(0)}%` : '')
               : `no circuit below the whole graph reaches ${100 * graph.target}%`;
  box.append(el('p', {class: 'note'}, `Coloured: the smallest oracle-ranked circuit reaching ${100 * graph.target}% (width: |effect alone|); grey: the other edges. ` +
    `Bold border: the head circuit. Halo: the main path, of ${graph.main_path_of}. ${graph.pairs} held-out pairs; metric: ${graph.metric}, clean ${graph.clean}, counterfactual ${graph.counterfactual}.`));
}
function tip() { return document.getElementById('tip') || document.body.appendChild(el('div', {id: 'tip', class: 'tip', hidden: ''})); }
function moveTip(ev) { const t = tip(); t.style.left = (ev.pageX + 14) + 'px'; t.style.top = (ev.pageY + 10) + 'px'; }
function hideTip() { tip().hidden = true; document.querySelectorAll('path.edge.hover').forEach(p => p.classList.remove('hover')); }
function showEdge(ev, e, graph) {
  const t = tip();
  const ranks = Object.entries(e.ranks).map(([m, r]) => `${m} ${r}`).join(' · ');
  const rank = e.ranks[graph.curves[0].method];
  t.replaceChildren(
    el('b', {}, e.id),
    el('div', {}, `effect alone: ${signedPct(e.alone)} of the gap (metric change ${e.effect >= 0 ? '+' : ''}${fixed(e.effect, 3)})`),
    el('div', {}, edgeSentence(e, rank)),
    el('div', {}, `rank by |score| (of ${graph.edges.length}): ${ranks}`));
  t.hidden = false;
  moveTip(ev);
  document.querySelectorAll(`path.edge[data-edge="${CSS.escape(e.id)}"]`).forEach(p => p.classList.add('hover'));
}

function edgeSentence(e, rank) {
  // A sentence, not a template: "adding it to the top 0 edges moves faithfulness 0.00 -> 0.00" read
  // as nonsense for the oracle's first edge.
  const moves = fixed(e.before, 2) === fixed(e.after, 2) ? `leaves faithfulness at ${fixed(e.after, 2)}`
                                                         : `takes faithfulness from ${fixed(e.before, 2)} to ${fixed(e.after, 2)}`;
  if (!e.in) return `Not in the circuit: the oracle ranks it ${ordinal(rank)}, and the top ${rank} edges together reach faithfulness ${fixed(e.after, 2)}.`;
  if (rank === 1) return `In the circuit: the oracle ranks it first; on its own it ${moves}.`;
  return `In the circuit: the oracle ranks it ${ordinal(rank)}; added to the ${rank - 1} edge${rank === 2 ? '' : 's'} ranked above it, it ${moves}.`;
}
function ordinal(n) {
  const tens = n % 100, ones = n % 10;
  return n + (tens >= 11 && tens <= 13 ? 'th' : ones === 1 ? 'st' : ones === 2 ? 'nd' : ones === 3 ? 'rd' : 'th');
}

// ---- a head's attention at the scored positions --------------------------------------------
function headIndex(run, head) {
  const [, l, h] = head.match(/L(\d+)H(\d+)/).map(Number);
  return l * run.heads.n_heads + h;
}
function attentionRow(tokens, row, label) {
  const line = el('div', {class: 'att-row'}, el('span', {class: 'att-label'}, label));
  row.forEach((w, i) => line.append(el('span', {class: 'att-cell', style: `background:${heat(w)}`, title: `${tokens[i]}: ${w.toFixed(2)}`}, tokens[i])));
  return line;
}
function showHead(run, head) {
  const box = document.getElementById('detail');
  box.replaceChildren(el('h4', {}, `${head}: attention at the scored positions`));
  const index = headIndex(run, head);
  run.examples.forEach((pair, p) => {
    for (const [s, q] of pair.scored.entries()) {
      box.append(el('div', {class: 'note'}, `example pair ${p}, scored p${q} (answer ${pair.answers[s]}${pair.foils[s] ? ', foil ' + pair.foils[s] : ''})`));
      box.append(attentionRow(pair.clean_tokens, pair.clean[index][q], 'clean'));
      box.append(attentionRow(pair.corrupt_tokens, pair.corrupt[index][q], 'counterf.'));
    }
  });
  const byRole = run.heads.by_role;
  if (byRole) box.append(el('div', {class: 'note'}, `mean over ${byRole.rows} held-out scored rows, keys by role (a role's position varies between examples):`),
                         attentionRow(byRole.roles, byRole.mass[head], 'by role'));
  const mean = run.heads.mean[head];
  if (mean) box.append(el('div', {class: 'note'}, `mean over ${run.heads.mean_rows} held-out scored rows, keys by position:`),
                       attentionRow(run.heads.labels.map(l => l.split(' ')[0]), mean, 'mean'));
  document.querySelectorAll('g.node').forEach(g => g.classList.toggle('selected', g.dataset.node === head));
  box.scrollIntoView({block: 'nearest'});   // it opened below the fold, unseen, after a click on the graph
}

// ---- every head's pattern on an example ----------------------------------------------------
function drawAttention(panel, run) {
  const controls = el('div', {class: 'controls'});
  const pairSelect = el('select', {'aria-label': 'example pair'});
  run.examples.forEach((pair, i) => pairSelect.append(el('option', {value: i}, `pair ${i}: ${pair.clean_tokens.join(' ')}`)));
  const variant = el('select', {'aria-label': 'clean or counterfactual'}, el('option', {value: 'clean'}, 'clean'), el('option', {value: 'corrupt'}, 'counterfactual'));
  controls.append(pairSelect, ' ', variant);
  const thumbs = el('div', {class: 'thumbs'}), big = el('div', {class: 'big-head'});
  panel.append(el('div', {class: 'attention-box'}, controls, thumbs, big));
  let chosen = 0;
  const redraw = () => {
    const pair = run.examples[+pairSelect.value], which = variant.value;
    const tokens = which === 'clean' ? pair.clean_tokens : pair.corrupt_tokens;
    thumbs.replaceChildren();
    for (let l = 0; l < run.heads.n_layers; l++) for (let h = 0; h < run.heads.n_heads; h++) {
      const index = l * run.heads.n_heads + h;
      const cell = el('div', {class: 'thumb' + (index === chosen ? ' chosen' : ''), 'data-head': `L${l}H${h}`}, el('div', {}, `L${l}H${h}`));
      cell.append(patternSvg(pair[which][index], tokens, pair.scored, 84, false));
      cell.addEventListener('click', () => { chosen = index; redraw(); });
      thumbs.append(cell);
    }
    const name = `L${Math.floor(chosen / run.heads.n_heads)}H${chosen % run.heads.n_heads}`;
    big.replaceChildren(el('div', {class: 'note'}, `${name}, ${which === 'clean' ? 'clean' : 'counterfactual'} input: rows = query positions (scored ones marked *), columns = keys; hover a cell for its weight`),
                        colourScale(), patternSvg(pair[which][chosen], tokens, pair.scored, 380, true));
  };
  pairSelect.addEventListener('change', redraw); variant.addEventListener('change', redraw);
  redraw();
}
function colourScale() {
  // The same heat() the cells use, sampled: what a colour means, 0 (no attention) to 1 (all of it).
  const stops = [0, 0.25, 0.5, 0.75, 1].map(w => `${heat(w)} ${100 * w}%`).join(', ');
  return el('div', {class: 'scale'}, 'attention weight: 0', el('span', {class: 'bar', style: `background: linear-gradient(to right, ${stops})`}), '1');
}
function patternSvg(rows, tokens, scored, size, labelled) {
  const n = rows.length, margin = labelled ? 90 : 0, cell = size / n;
  const root = svg('svg', {width: size + margin + (labelled ? 40 : 0), height: size + margin, class: 'pattern'});
  rows.forEach((row, q) => row.forEach((w, k) => {
    const r = svg('rect', {x: margin + k * cell, y: q * cell, width: cell, height: cell, fill: heat(w)}, root);
    if (labelled) svg('title', {}, r).textContent = `query p${q} ${tokens[q]} -> key p${k} ${tokens[k]}: weight ${w.toFixed(2)}`;
  }));
  if (labelled) tokens.forEach((t, i) => {
    svg('text', {x: margin - 4, y: (i + 0.7) * cell, 'text-anchor': 'end', class: 'tick' + (scored.includes(i) ? ' scored' : '')}, root)
      .textContent = (scored.includes(i) ? '* ' : '') + `p${i} ${t}`;
    svg('text', {x: 0, y: 0, transform: `translate(${margin + (i + 0.7) * cell},${size + 4}) rotate(60)`, class: 'tick'}, root).textContent = t;
  });
  return root;
}

// ---- faithfulness curves ------------------------------------------------------------------
function drawCurves(panel, graph) {
  // The legend's column is as wide as its longest entry (~6.5 px a character at 11 px): a fixed
  // 145 px cut "oracle (CPR 0.93, CMD 0.02)" to "oracle (CPR 0.93, CMD 0.0".
  const legend = [...graph.curves.map(c => `${c.method} (CPR ${fixed(c.cpr, 2)}, CMD ${fixed(c.cmd, 2)})`), 'thin: oracle, every k'];
  const side = Math.max(150, Math.ceil(6.5 * Math.max(...legend.map(t => t.length))) + 12);
  const W = 410 + side, H = 260, L = 48, B = 36, total = graph.edges.length;
  const root = svg('svg', {width: W, height: H, class: 'curves'});
  const x = k => L + (W - L - side) * k / total, y = f => 10 + (H - B - 10) * (1 - Math.max(-0.2, Math.min(1.2, f)) / 1.2);
  svg('line', {x1: L, y1: y(0), x2: x(total), y2: y(0), class: 'axis'}, root);
  svg('line', {x1: L, y1: y(1.2), x2: L, y2: y(-0.2), class: 'axis'}, root);
  for (const f of [0, 0.5, 1]) svg('text', {x: L - 4, y: y(f) + 4, 'text-anchor': 'end', class: 'tick'}, root).textContent = f;
  for (const k of [0, Math.round(total / 4), Math.round(total / 2), total]) svg('text', {x: x(k), y: H - B + 14, 'text-anchor': 'middle', class: 'tick'}, root).textContent = k;
  svg('text', {x: L + (W - L - side) / 2, y: H - 4, 'text-anchor': 'middle', class: 'tick'}, root).textContent = 'edges in the circuit (top k of each ranking)';
  svg('line', {x1: L, y1: y(graph.target), x2: x(total), y2: y(graph.target), class: 'target'}, root);
  svg('polyline', {points: graph.every_k.map((f, k) => `${x(k)},${y(f)}`).join(' '), class: 'every-k'}, root);
  graph.curves.forEach((c, i) => {
    const colour = METHOD_COLOUR[i % METHOD_COLOUR.length];
    svg('polyline', {points: c.sizes.map((k, j) => `${x(k)},${y(c.faithfulness[j])}`).join(' '), stroke: colour, fill: 'none', 'stroke-width': 1.5, 'data-method': c.method}, root);
    c.sizes.forEach((k, j) => svg('circle', {cx: x(k), cy: y(c.faithfulness[j]), r: 2.5, fill: colour}, root));
    svg('text', {x: W - side + 5, y: 20 + 14 * i, fill: colour, class: 'tick legend-entry'}, root).textContent = legend[i];
  });
  svg('text', {x: W - side + 5, y: 20 + 14 * graph.curves.length, class: 'tick legend-entry'}, root).textContent = legend[legend.length - 1];
  panel.append(root, el('p', {class: 'note'}, `Faithfulness: 0 = empty circuit (the counterfactual run), 1 = the full model; dotted: the ${100 * graph.target}% target. ` +
    'MIB\'s smallest fractions (.001-.005) round to 0 edges of a graph this small, hence the edge-count axis; CPR and CMD are areas over the share of edges: CPR under faithfulness (1 = faithful at every size), CMD of |1 - faithfulness| (0 = faithful at every size).'));
  panel.append(table(['method', 'CPR (higher is better)', 'CMD (lower is better)', 'sizes measured'], graph.curves.map(c => [c.method, fixed(c.cpr, 3), fixed(c.cmd, 3), c.sizes.join(', ')])));
}
function edgeTable(panel, graph) {
  const methods = graph.curves.map(c => c.method);
  panel.append(table(['edge', 'input', 'effect alone (share of gap)', 'metric change', 'in circuit', ...methods.map(m => m + ' rank')],
    [...graph.edges].sort((a, b) => a.ranks[methods[0]] - b.ranks[methods[0]]).map(e => [e.id, e.port, signedPct(e.alone), fixed(e.effect, 3), e.in ? 'yes' : 'no', ...methods.map(m => e.ranks[m])])));
}

buildNav();
window.addEventListener('hashchange', route);
route();
