"""The circuit report: the summary in words, report.md with its figures, and report.json holding
every number the markdown shows. Computing lives in probes.circuit; this only renders."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from pathlib import Path

from common.io import atomic_write, write_json

COMPONENT_WORDS = {"q": "query", "k": "keys", "v": "values"}
UNUSED_MARGIN = 0.02   # a block whose full ablation keeps accuracy within this is "unused"
EDGE_CLAIM = 0.5       # a path patch must recover this share of the gap to be named as the route


# ---- words -------------------------------------------------------------------------------

def pct(value: float) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.0%}"


def baseline_accuracy(analysis, method: str = "mean") -> float:
    return analysis.ablations[method][0].accuracy


def block_use(analysis, method: str = "mean") -> list[tuple[int, float]]:
    """(layer, held-out accuracy with every head of that layer ablated)."""
    n_layers = analysis.spec["n_layers"]
    n_heads = analysis.spec["n_heads"]
    results = analysis.ablations[method]
    whole = {}
    for result in results:
        layers = {int(name[1:].split("H")[0]) for name in result.heads}
        if len(result.heads) == n_heads and len(layers) == 1:
            whole[layers.pop()] = result.accuracy
    return [(layer, whole[layer]) for layer in range(n_layers) if layer in whole]


def block_sentences(analysis) -> list[str]:
    baseline = baseline_accuracy(analysis)
    out = []
    for layer, accuracy in block_use(analysis):
        verdict = "unused" if accuracy >= baseline - UNUSED_MARGIN else "needed"
        out.append(f"block {layer + 1} {verdict}: mean-ablating all its heads keeps {pct(accuracy)} "
                   f"(intact {pct(baseline)})")
    return out


def top_key(row: list[float], labels: list[str]) -> tuple[str, float]:
    index = max(range(len(row)), key=lambda i: row[i])
    return labels[index], row[index]


MAX_GROUP_WORDS = 3   # more groups (e.g. induction's repeat lengths) are summarised by the all-group row


def attention_words(analysis, node) -> str:
    rows = analysis.node_attention[node.describe()]
    groups = [g for g in rows if g != "all"]
    tops = {g: top_key(rows[g], analysis.labels) for g in groups}
    if len({label for label, _ in tops.values()}) <= 1 or len(groups) > MAX_GROUP_WORDS:
        label, weight = top_key(rows["all"], analysis.labels)
        return f"attends {label} ({weight:.2f})"
    return "attends " + "; ".join(f"{label} ({weight:.2f}) for {g}" for g, (label, weight) in tops.items())


def node_words(node, analysis) -> str:
    """'L0H0 at p14 the attends ...' or 'L0H0 (needed at every position; at p14 the attends ...)'."""
    query = analysis.labels[node_query_position(node, analysis)]
    if node.positions is None:
        return f"{node.name} (needed at every position; at {query} {attention_words(analysis, node)})"
    where = " + ".join(analysis.labels[p] for p in node.positions)
    return f"{node.name} at {where} {attention_words(analysis, node)}"


def node_query_position(node, analysis) -> int:
    return node.positions[0] if node.positions else analysis.pair.position


def best_edges(analysis) -> list:
    """Per (sender, receiver) circuit pair, the single-position path patch that recovers most."""
    best = {}
    for patch in analysis.path_positions or []:
        key = (patch.sender, patch.receiver)
        if key not in best or patch.recovered > best[key].recovered:
            best[key] = patch
    return sorted(best.values(), key=lambda p: -p.recovered)


def edge_words(patch, analysis) -> str:
    position = analysis.labels[patch.positions[0]]
    return (f"{patch.receiver} reads {patch.sender}'s output at {position} through its "
            f"{COMPONENT_WORDS[patch.component]} ({patch.component.upper()}-composition: path patch "
            f"recovers {pct(patch.recovered)}, restores {pct(patch.restored)} of answers)")


def describe(analysis) -> str:
    head = f"{analysis.model_name} seed {analysis.seed}"
    heldout = analysis.accuracy.splits["heldout"].accuracy.value
    if analysis.circuit is None:
        return (f"{head}: held-out {pct(heldout)}, shuffle max|dlogit| "
                f"{analysis.accuracy.shuffle_max_logit_change:.1e}; no circuit ({analysis.note})")
    circuit = analysis.circuit
    nodes = "; ".join(node_words(n, analysis) for n in circuit.nodes)
    parts = [f"{head}: held-out {pct(heldout)}", nodes]
    edges = best_edges(analysis)
    if edges and edges[0].recovered >= EDGE_CLAIM:
        parts.append(edge_words(edges[0], analysis))
    elif edges:
        parts.append(f"no single path carries it (best: {edge_words(edges[0], analysis)})")
    elif analysis.spec["n_layers"] > 1:
        parts.append("no composition between circuit heads: the decision happens in one block")
    parts.append(f"faithfulness {pct(circuit.faithfulness.recovered)} "
                 f"(heads at every position {pct(circuit.head_faithfulness.recovered)})")
    parts.append(f"mean-ablating {'+'.join(circuit.heads)} leaves {pct(analysis.circuit_ablation.accuracy)} held-out")
    parts += block_sentences(analysis)
    return "; ".join(parts)


def signature(analysis) -> tuple:
    """What two seeds must share to count as the same circuit."""
    if analysis.circuit is None:
        return ()
    edges = best_edges(analysis)
    edge = (edges[0].sender, edges[0].receiver, edges[0].component, edges[0].positions) if edges else ()
    return tuple(n.describe() for n in analysis.circuit.nodes), edge


def seed_agreement(analyses) -> list[str]:
    by_model = defaultdict(list)
    for analysis in analyses:
        by_model[analysis.model_name].append(analysis)
    lines = []
    for model, runs in by_model.items():
        traced = [a for a in runs if a.circuit is not None]
        if len(runs) < 2 or not traced:
            continue
        kinds = defaultdict(list)
        for a in traced:
            kinds[signature(a)].append(str(a.seed))
        verdict = ("seeds " + ", ".join(next(iter(kinds.values()))) + " agree" if len(kinds) == 1 else
                   "seeds differ: " + " | ".join(f"seed {', '.join(seeds)}: {describe_signature(sig)}"
                                                 for sig, seeds in kinds.items()))
        untraced = [str(a.seed) for a in runs if a.circuit is None]
        if untraced:
            verdict += f"; no circuit traced for seed {', '.join(untraced)}"
        lines.append(f"{model}: {verdict}")
    return lines


def describe_signature(sig: tuple) -> str:
    nodes, edge = sig
    text = " + ".join(nodes)
    if edge:
        sender, receiver, component, positions = edge
        text += f", {sender}->{receiver} {component.upper()} at p{positions[0]}"
    return text


def summary_lines(analyses) -> list[str]:
    return [describe(a) for a in analyses] + seed_agreement(analyses)


# ---- JSON ----------------------------------------------------------------------------------

def jsonable(value):
    """Dataclasses, tensors and tuples as plain JSON (NaN as null)."""
    import torch

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for name in ("label", "name", "where"):
            if hasattr(type(value), name) and isinstance(getattr(type(value), name), property):
                out[name] = getattr(value, name)
        return out
    if isinstance(value, torch.Tensor):
        return jsonable(value.tolist())
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def run_json(analysis) -> dict:
    out = jsonable(analysis)
    out["summary"] = describe(analysis)
    if analysis.patching is not None:
        out["patching"]["head_out_recovered"] = jsonable(analysis.patching.recovered(analysis.patching.head_out))
        out["patching"]["head_all_recovered"] = jsonable(analysis.patching.recovered(analysis.patching.head_all))
        out["patching"]["resid_pre_recovered"] = jsonable(analysis.patching.recovered(analysis.patching.resid_pre))
        out["blocks"] = [{"layer": layer, "mean_ablated_accuracy": acc} for layer, acc in block_use(analysis)]
    return out


# ---- markdown ------------------------------------------------------------------------------

def md_table(headers: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])


def accuracy_section(analyses) -> str:
    rows = []
    for a in analyses:
        split = a.accuracy.splits["heldout"]
        rows.append([a.model_name, a.seed, f"{split.accuracy.value:.1%} [{split.accuracy.low:.0%}, {split.accuracy.high:.0%}]",
                     f"{split.foil_rate:.1%}", f"{a.accuracy.shuffle_max_logit_change:.1e}"])
    return "## Accuracy and shuffle test\n\n" + md_table(
        ["model", "seed", "held-out (Wilson 95%)", "wrong answer (foil)", "shuffle max abs dlogit"], rows)


def ablation_table(analysis) -> str:
    methods = list(analysis.ablations)
    groups = sorted(analysis.ablations[methods[0]][0].by_group)
    rows = []
    for index, result in enumerate(analysis.ablations[methods[0]]):
        row = [result.label]
        for method in methods:
            r = analysis.ablations[method][index]
            row.append(f"{pct(r.accuracy)} / {r.logit_diff:+.2f}")
        row += [pct(analysis.ablations["mean"][index].by_group[g]["accuracy"]) for g in groups]
        rows.append(row)
    headers = ["ablated"] + [f"{m}: acc / logit diff" for m in methods] + [f"mean, {g}" for g in groups]
    return md_table(headers, rows)


def patching_table(analysis, top: int = 8) -> str:
    p = analysis.patching
    recovered = p.recovered(p.head_out)
    cells = [(float(recovered[l, pos, h]), l, pos, h) for l in range(recovered.shape[0])
             for pos in range(recovered.shape[1]) for h in range(recovered.shape[2])]
    cells.sort(key=lambda c: -abs(c[0]))
    rows = [[f"L{l}H{h}", analysis.labels[pos], pct(value), pct(float(p.head_out_restored[l, pos, h]))]
            for value, l, pos, h in cells[:top]]
    return md_table(["head", "position", "recovered", "answers restored"], rows)


def path_table(patches, top: int = 10) -> str:
    patches = sorted(patches, key=lambda x: -abs(x.recovered))[:top]
    rows = [[p.sender, p.where, p.receiver, p.component.upper(), pct(p.recovered), pct(p.restored),
             f"{p.attention_moved:.2f}"] for p in patches]
    return md_table(["sender", "at", "receiver", "input", "recovered", "answers restored",
                     "receiver attention moved (TV)"], rows)


def composition_table(analysis) -> str:
    c = analysis.composition
    n_layers, n_heads = analysis.spec["n_layers"], analysis.spec["n_heads"]
    rows = []
    for sl in range(n_layers):
        for sh in range(n_heads):
            for rl in range(sl + 1, n_layers):
                for rh in range(n_heads):
                    rows.append([f"L{sl}H{sh}", f"L{rl}H{rh}"] + [
                        f"{c.score(k, (sl, sh), (rl, rh)):.3f} ({c.ratio(k, (sl, sh), (rl, rh)):.1f}x)" for k in "QKV"])
    baseline = ", ".join(f"{k} {c.baseline_mean[k]:.3f} +- {c.baseline_std[k]:.3f}" for k in "QKV")
    return (md_table(["sender", "receiver", "Q (x random)", "K (x random)", "V (x random)"], rows)
            + f"\n\nRandom-weight baseline ({c.baseline_draws} draws): {baseline}.")


def group_accuracies(result) -> str:
    return ", ".join(f"{group} {pct(values['accuracy'])}" for group, values in result.by_group.items())


def circuit_section(analysis) -> str:
    c = analysis.circuit
    trace = "; ".join(f"{'+'.join(heads)} -> {pct(r)}" for heads, r in c.trace)
    knockout = ", ".join(f"{h} {pct(r)}" for h, r in c.knockout.items())
    return "\n".join([
        f"- nodes: {', '.join(n.describe() for n in c.nodes)}",
        f"- faithfulness (outside mean-ablated, clean input): {pct(c.faithfulness.recovered)} of the gap, "
        f"answer still top at {pct(c.faithfulness.accuracy)} of scored positions; heads at every position: "
        f"{pct(c.head_faithfulness.recovered)}",
        f"- knockout (full model minus one head, recovered): {knockout}",
        f"- search trace: {trace}",
        f"- mean-ablating the circuit's heads: held-out {pct(analysis.circuit_ablation.accuracy)}"
        f" (per group: {group_accuracies(analysis.circuit_ablation)})",
    ])


def run_section(analysis, figure: str | None) -> str:
    title = f"### {analysis.model_name} seed {analysis.seed}"
    if analysis.circuit is None and analysis.patching is None:
        return f"{title}\n\n{describe(analysis)}"
    parts = [title, "", describe(analysis), ""]
    if figure:
        parts += [f"![{analysis.model_name} seed {analysis.seed}]({figure})", ""]
    parts += ["Head ablation on the held-out split (accuracy / mean answer - foil logit):", "",
              ablation_table(analysis), ""]
    parts += [f"Activation patching ({analysis.patching.metric}; clean {analysis.patching.clean.metric:+.2f}, "
              f"corrupt {analysis.patching.corrupt.metric:+.2f}), strongest single head outputs:", "",
              patching_table(analysis), ""]
    if analysis.circuit is None:
        return "\n".join(parts + [analysis.note])
    if analysis.paths:
        parts += ["Path patching, sender at every position:", "", path_table(analysis.paths), ""]
    if analysis.path_positions:
        parts += ["Path patching between circuit heads, sender at one position:", "",
                  path_table(analysis.path_positions), ""]
    if analysis.composition is not None:
        parts += ["Composition scores:", "", composition_table(analysis), ""]
    parts += ["Circuit:", "", circuit_section(analysis)]
    return "\n".join(parts)


def markdown(analyses, figures: dict, task: str, extra=()) -> str:
    a = next((a for a in analyses if a.patching is not None), None)
    method = ("" if a is None else
              f"Patching and circuit search use {a.patching.pairs} evenly spread held-out counterfactual pairs "
              f"(clean = example, corrupt = its counterfactual; metric: {a.patching.metric}); "
              "mean ablation averages each head's output per position over training examples; MLPs and "
              "embeddings are never ablated. 'recovered' is (patched - corrupt) / (clean - corrupt).")
    sections = [f"# Circuit report: {task}", "", method, "", "## Summary", "",
                *[f"- {line}" for line in summary_lines(analyses)], "", accuracy_section(analyses), ""]
    for section in extra:   # probes.sections.Section: extra sections the data called for
        sections += [f"## {section.title}", "", *[f"- {line}" for line in section.summary], "",
                     section.markdown, ""]
    sections += ["## Runs", ""]
    sections += [run_section(a, figures.get((a.model_name, a.seed))) + "\n" for a in analyses]
    return "\n".join(sections)


def write_run_figure(analysis, out: Path) -> str | None:
    """Draw one run's figure into out/figures; its path relative to `out`, or None if it has none.
    Separate from write_report so the report's worker processes can draw their own runs."""
    from probes.figures import run_figure, save

    if analysis.attention is None or analysis.patching is None:
        return None
    name = f"figures/{analysis.model_name}-seed{analysis.seed}.png"
    save(run_figure(analysis), Path(out) / name)
    return name


def write_report(analyses, figures: list, out: Path, task: str, extra=()) -> Path:
    """`figures`: each analysis's write_run_figure result (a path under `out`, or None)."""
    out = Path(out)
    named = {(a.model_name, a.seed): name for a, name in zip(analyses, figures) if name}
    write_json(out / "report.json", {"task": task, "runs": [run_json(a) for a in analyses],
                                     "summary": summary_lines(analyses),
                                     "sections": {s.title: s.data for s in extra}})
    text = markdown(analyses, named, task, extra)
    atomic_write(out / "report.md", lambda path: Path(path).write_text(text))
    return out / "report.md"
