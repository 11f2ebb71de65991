"""The report's summary as tables: one per model (a row per seed, a column per fact the parts
contribute: probes.report.parts.Section.cells), one short line per model across its seeds, and the
family's short notes (run health). The terminal and report.md open with it; each part's sentences
stay in its section (and `--verbose`)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from models.spec import Attention

WIDTH = 120  # a terminal line, at most
FOLDED = "mechanism"  # the column the terminal prints under its table instead of in it


@dataclass(frozen=True)
class ModelTable:
    model_name: str
    columns: tuple[str, ...]  # after "seed"
    rows: tuple[tuple[str, ...], ...]  # seed first
    across_seeds: tuple[str, ...]  # each part's line for the model


@dataclass(frozen=True)
class Summary:
    legend: tuple[str, ...]  # what every column measures, its basis and scale
    tables: tuple[ModelTable, ...]
    notes: tuple[str, ...]


LEGEND = (
    "held-out: accuracy on the held-out split's scored positions; health: collapsed (one constant answer, or train "
    "far below peers), flagged (a model that reads order below two-candidate chance, or neither answer nor foil at "
    "half the positions: see the notes) or ok",
    "circuit / kind: the head circuit (heads @ the positions they are kept at; a named path as sender ->q/k/v "
    "receiver @ sender position) and what it is, from held-out counterfactual pairs ('via MLP0': no head "
    "feeds another directly, the edge circuit's mechanism runs through those MLPs); 'not traced: pairs differ by g': "
    "example and counterfactual partner differ by g in the answer - foil logit difference (or the answer's "
    "log-prob), under the report's min_gap: the model barely tells them apart, so no share of g means much",
    "faith.: the head circuit's faithfulness on those pairs, heads outside it at their mean over training rows, "
    "null scale (0 = every head mean-ablated, 1 = full model)",
    "blocks: block 1/2/... verdict with all its heads mean-ablated on the held-out ablation rows (needed, partly "
    "used, unused)",
    "edges (gap): the smallest edge circuit the methods found on those pairs (the oracle ranking's, or the joint "
    "search's where it is smaller at the target: 'joint'), edges kept / graph, and its faithfulness on the "
    "gap scale (0 = counterfactual run, 1 = clean run)",
    "mechanism: the edge circuit's main path (components and the input each reads, keeping >= 50% of the gap on its "
    "own edges; '(+n)': n more paths carry the mechanism beside the one shown), or its longest series chain and "
    "first other relation (a case split, OR, shared work, overlap, additive pair, AND), members by Shapley share, "
    "'=' a tie (probes.circuits.relation_classes)",
    "how many rows and pairs: each run's sentences (and report.md's Bases and scales)",
)
TERMINAL_LEGEND = (
    "faith.: head circuit, null scale (0 = all heads mean-ablated, 1 = full model)",
    "edges (gap): the smallest edge circuit found, kept/graph, faithfulness (0 = counterfactual, 1 = clean)",
    "blocks: verdict with a block's heads mean-ablated; mechanism: its main path, or the OR/AND standing in for one",
)


def summary_of(sections: dict) -> Summary:
    """The tables from the rendered parts (probes.report.parts.render_parts), models in report order."""
    cells, across, notes, order = {}, {}, [], []
    for section in sections.values():
        for (model, seed), row in section.cells.items():
            if model not in order:
                order.append(model)
            cells.setdefault((model, seed), {}).update(row)
        for model, line in section.across_seeds.items():
            across.setdefault(model, []).append(line)
        notes += section.notes
    tables = []
    for model in order:
        seeds = sorted(seed for m, seed in cells if m == model)
        columns = tuple(dict.fromkeys(c for seed in seeds for c in cells[model, seed]))
        rows = tuple((str(seed), *(cells[model, seed].get(c, "-") for c in columns)) for seed in seeds)
        tables.append(ModelTable(model, columns, rows, tuple(across.get(model, ()))))
    return Summary(LEGEND, tuple(tables), tuple(notes))


def wrapped(line: str, indent: str = "") -> list[str]:
    return textwrap.wrap(line, WIDTH, subsequent_indent=indent + "  ", initial_indent=indent) or [""]


def table_rows(t: ModelTable) -> tuple[list[str], list[list[str]]]:
    """The model's name heads its seed column."""
    return [t.model_name, *t.columns], [[f"seed {row[0]}", *row[1:]] for row in t.rows]


def terminal_lines(summary: Summary) -> list[str]:
    """Aligned plain-text tables (a table wider than WIDTH is the caller's to see: tests check it)."""
    from probes.report.render import table

    lines = [line for text in TERMINAL_LEGEND for line in wrapped(text)]
    for t in summary.tables:
        headers, rows = table_rows(t)
        # The mechanism column would widen every row past WIDTH: on the terminal it is a line below.
        folded = headers.index(FOLDED) if FOLDED in headers else None
        shown = [[c for i, c in enumerate(r) if i != folded] for r in [headers, *rows]]
        text = table(shown[0], shown[1:]).splitlines()
        lines += [row.rstrip() for i, row in enumerate(text) if i != 1]  # no dashes: one screen
        if folded is not None:
            lines += wrapped(f"{FOLDED}: " + " | ".join(f"{r[0]}: {r[folded]}" for r in rows if r[folded] != "-"), "  ")
        for line in t.across_seeds:
            lines += wrapped(line, "  ")
    for note in summary.notes:
        lines += wrapped(note)
    from common.cli import printable

    return [printable(line) for line in lines]  # role, group and token names are a plugin's


def markdown_lines(summary: Summary) -> list[str]:
    from probes.report.render import md_table

    lines = [f"- {line}" for line in summary.legend] + [""]
    for t in summary.tables:
        lines += [md_table(*table_rows(t)), ""]
        lines += [f"- {line}" for line in t.across_seeds] + ([""] if t.across_seeds else [])
    return lines + [f"- {note}" for note in summary.notes]


# ---- each part's cells ----------------------------------------------------------------------


def accuracy_cells(models) -> dict:
    """(model, seed) -> held-out accuracy and run health; `models`: probes.accuracy.ModelAccuracy."""
    return {
        (m.model_name, r.seed): {
            "held-out": f"{r.splits['heldout'].accuracy.value:.1%}",
            "health": "collapsed" if r.seed in m.collapsed else "flagged" if r.seed in m.suspect else "ok",
        }
        for m in models
        for r in m.runs
    }


def place(analysis, head: str, position: int) -> str:
    """A position in a summary cell: 'p14' where the layout is fixed (RunAnalysis.places None);
    where roles move, the role every example holds there ('query'), else the role at whose own
    position in each pair patching `head`'s output restores the most (probes.attention.RoleView,
    'value'), else '' (the number would name a different role in each example)."""
    if analysis.places is None:
        return f"p{position}"
    if position in analysis.places:
        return analysis.places[position]
    layer, index = (int(n) for n in head.removeprefix("L").split("H"))
    recovered = analysis.roles.recovered if analysis.roles is not None else {}
    best = max(recovered, key=lambda role: float(recovered[role][layer, index]), default=None)
    return best or ""


def path_place(analysis, path) -> str:
    """Where a named path's sender is patched, as `place` names it ('' for none patched alone)."""
    return place(analysis, path.sender, path.position) if path.position >= 0 else ""


def compact_circuit(analysis, settings) -> str:
    """'L0H0 ->q L1H0 @p14' for each named path (no position when only the sender at every position
    names it), + the other heads; else the heads at their kept positions ('L0H1+L1H0@p14'; a head
    kept at every position has none). Where roles move, positions are named by role (`place`)."""
    from probes.report.words import named

    def kept(head, positions):
        names = [] if positions is None else list(dict.fromkeys(place(analysis, str(head), p) for p in positions))
        return str(head) if not any(names) else f"{head}@" + "/".join(n for n in names if n)

    nodes, paths = analysis.circuit.kept, named(analysis, settings)
    if not paths:
        return "+".join(kept(*n) for n in nodes.items())
    in_paths = {head for path in paths for head in (path.sender, path.receiver)}
    others = [kept(*n) for n in nodes.items() if str(n[0]) not in in_paths]
    shown = [
        f"{p.sender} ->{p.component} {p.receiver}" + (f" @{where}" if (where := path_place(analysis, p)) else "")
        for p in paths
    ]
    return "+".join([", ".join(shown), *others])


def circuit_kind(analysis, settings) -> str:
    """The named paths' compositions; else, where the edge circuit's mechanism runs through MLPs,
    those MLPs (heads compose through them, not head to head: the mechanism column names the path);
    else what was found instead."""
    from probes.report.words import mechanism_mlps, named, paths_of

    paths = named(analysis, settings)
    if paths:
        return " + ".join(dict.fromkeys(f"{p.component.upper()}-composition" for p in paths))
    through = mechanism_mlps(analysis.mechanism)
    if through:
        return "via " + ", ".join(through)
    if analysis.paths is None:
        return "paths not measured"
    return "no head>head path" if paths_of(analysis) else "one block"


def untraced_reason(analysis, settings) -> str:
    """Why no circuit was traced, in a few words (the sentence: analysis.note)."""
    spec = analysis.spec
    if analysis.patching is not None:
        gap = analysis.patching.clean.metric - analysis.patching.corrupt.metric
        unit = "logit diff." if analysis.patching.metric == "answer - foil logit" else "log-prob"
        return f"not traced: pairs differ by {gap:+.2f} ({unit})"
    if spec.attention in (Attention.UNIFORM, Attention.NONE):
        return f"not traced: {spec.attention} attention (no pattern to trace)"
    return "not traced: the task gives no counterfactual pairs"


def block_verdicts(analysis, settings) -> str:
    from probes.report.words import intact, verdict, whole_layers

    return "/".join(
        verdict(intact(analysis), result, settings)[0].removesuffix(" used") for _, result in whole_layers(analysis)
    )


def circuit_cells(analysis, settings) -> dict:
    if analysis.circuit is None:
        return {"circuit / kind": untraced_reason(analysis, settings), "faith.": "-", "blocks": "-"}
    c = analysis.circuit
    faith = "1 (constr.)" if c.upstream else f"{c.faithfulness.normalised:.2f}"
    return {
        "circuit / kind": f"{compact_circuit(analysis, settings)} / {circuit_kind(analysis, settings)}",
        "faith.": faith,
        "blocks": block_verdicts(analysis, settings),
    }


def circuit_across_seeds(analyses, settings) -> dict:
    """model -> which seeds share a circuit (nodes, kept positions and named path:
    probes.report.words.signature), and which were not traced."""
    from probes.report.words import agreement_words, signature

    out = {}
    for model in dict.fromkeys(a.model_name for a in analyses):
        runs = [a for a in analyses if a.model_name == model]
        traced = [a for a in runs if a.circuit is not None]
        untraced = [str(a.seed) for a in runs if a.circuit is None]
        groups = {}
        for a in traced:
            groups.setdefault(signature(a, settings), []).append(str(a.seed))
        if len(groups) == 1 and len(traced) > 1:
            text = agreement_words(next(iter(groups.values())), traced).replace(" agree", " agree on one circuit")
        elif len(traced) == 1:
            text = f"one seed traced (seed {traced[0].seed})"
        elif groups:
            kind = "mechanisms" if all(a.mechanism for a in traced) else "circuits"  # as report.md's seed agreement
            text = f"{len(groups)} {kind} in {len(traced)} seeds: " + " | ".join(
                ("seeds " if len(seeds) > 1 else "seed ") + ", ".join(seeds) for seeds in groups.values()
            )
        else:
            text = "no circuit traced"
        if untraced and groups:
            text += f"; not traced: seed {', '.join(untraced)}"
        out[model] = text
    return out


def edge_cells(run, settings) -> dict:
    """(model, seed) -> the edge circuit's size and faithfulness; `run`: probes.report.edge_part.EdgeRun."""
    result = run.result
    total = len(result.graph.edges)
    if abs(result.oracle.gap) < settings.min_gap:
        text = "not traced"
    elif result.circuit.edges is None:
        text = f"none < {total}"
    else:
        from probes.circuits.redundancy import headline

        edges, faithfulness, method = headline(result, run.structure)
        text = f"{len(edges)}/{total}, {faithfulness:.0%}" + (" joint" if method == "joint search" else "")
    from probes.report.logic_words import mechanism_cell

    return {(run.model_name, run.seed): {"edges (gap)": text, "mechanism": mechanism_cell(run.logic)}}
