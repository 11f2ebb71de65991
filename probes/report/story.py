"""report.md as a story: per run, what its circuit is in a few lines (the mechanism), then the
evidence as bullets, each one finding with its numbers. Built from the typed results the report's
parts measured (probes.report.parts.MeasuredRun); the tables, every position's detail and each
run's whole sentence stay in the parts' sections, which probes.report.document puts in the
appendix."""

from __future__ import annotations

from dataclasses import dataclass

from models.components import HeadSet
from probes.report.words import COMPONENT_WORDS, pct
from probes.settings import ReportSettings

SHOWN_RELATIONS = 2  # relations of the logic stated in a run's evidence (the appendix has up to six)

INTRO = (
    "Per run: what its circuit is in a few lines, then the evidence, one finding a bullet with its "
    "numbers (bases and scales above). The tables, every position's detail and each run's whole "
    "sentence are in the Appendix."
)


@dataclass(frozen=True)
class RunStory:
    title: str  # 'model seed k', as the appendix's sections name the run
    mechanism: tuple[str, ...]  # 1-5 lines: what the circuit is
    evidence: tuple[str, ...]  # one finding a line
    figure: str | None  # relative to the report folder


def traced_edges(measured, settings: ReportSettings):
    """The run's edge part (probes.report.edge_part.EdgeRun) when it found a circuit below the
    whole graph, else None."""
    edges = measured.results.get("edge_circuits")
    if edges is None or not settings.traces(edges.result.oracle.gap) or edges.result.circuit.edges is None:
        return None
    return edges


def run_story(measured, settings: ReportSettings) -> RunStory:
    analysis, edges = measured.results["runs"], traced_edges(measured, settings)
    title = f"{measured.model_name} seed {measured.seed}"
    figure = edges.figure if edges is not None and edges.figure else analysis.figure
    mechanism = mechanism_lines(analysis, edges, settings)
    return RunStory(title, tuple(mechanism), tuple(evidence_lines(analysis, edges, settings)), figure)


def sentence(text: str) -> str:
    """`text` with its first letter upper case (str.capitalize lowers the rest: 'L0h0')."""
    return text[:1].upper() + text[1:]


# ---- the mechanism --------------------------------------------------------------------------


def mechanism_lines(analysis, edges, settings: ReportSettings) -> list[str]:
    from probes.health import budget_note

    if analysis.circuit is None:
        lines = [f"No circuit: {analysis.note}."]
    else:
        lines = [circuit_line(analysis, settings), heads_line(analysis, settings)]
        if edges is not None:
            lines.append(edges_line(edges))
        lines.append(ablation_line(analysis, settings))
    budget = budget_note(analysis.accuracy, settings)
    if budget is not None:
        lines.append(f"Budget-limited: {budget}; what it learned may be the budget's, not the model's.")
    return lines


def circuit_line(analysis, settings: ReportSettings) -> str:
    """'Q-composition: L0H0 ->q L1H0 @p14; L1H0 reads L0H0's output through its query (98% of the gap).'"""
    from probes.report.summary import circuit_kind, compact_circuit
    from probes.report.words import named

    reads = "".join(
        f"; {p.receiver} reads {p.sender}'s output through its {COMPONENT_WORDS[p.component]} "
        f"({pct(p.strength)} of the gap)"
        for p in named(analysis, settings)
    )
    return f"{sentence(circuit_kind(analysis, settings))}: {compact_circuit(analysis, settings)}{reads}."


def heads_line(analysis, settings: ReportSettings) -> str:
    """Each circuit head where patching its output matters most, and what it attends there; by role
    where the task's roles move (RunAnalysis.places), since an absolute position there holds a
    different role in each example."""
    from probes.report.words import attention_words, role_clause

    if analysis.places is not None and (by_role := role_clause(analysis, settings)) is not None:
        return sentence(by_role) + "."
    labels, said = analysis.labels, []
    for (head, _), view in zip(analysis.circuit.kept.items(), analysis.node_views):
        if not view.matters:
            said.append(f"{head} restores less than {pct(settings.matters)} of the gap at any one position")
            continue
        position, share = view.matters[0]
        said.append(
            f"{head} matters most at {labels[position]} ({pct(share)} of the gap), where it "
            f"{attention_words(view.attention[position], labels, settings)}"
        )
    return sentence("; ".join(said)) + "."


def edges_line(edges) -> str:
    """The headline edge circuit and what its components are to each other (probes.circuits.logic)."""
    from probes.circuits.redundancy import headline

    kept, faithfulness, method = headline(edges.result, edges.structure)
    line = (
        f"Edges: {len(kept)} of {len(edges.result.graph.edges)} keep {pct(faithfulness)} of the gap on "
        f"{edges.result.pairs} pairs ({method}, every other edge given its counterfactual write)"
    )
    return line + (f"; {logic_gist(edges.logic)}." if edges.logic is not None else ".")


def logic_gist(logic) -> str:
    """The main path, or the relations that stand in for one, in a few words."""
    from probes.circuits.logic import PATH_CARRIES
    from probes.report.logic_words import mechanism_cell, path_text

    carrying = logic.carrying_paths
    if carrying:
        more = f" (and {len(carrying) - 1} more)" if len(carrying) > 1 else ""
        return f"main path {path_text(carrying[0])} keeps {pct(carrying[0].effect)} on its own{more}"
    return f"no single path keeps {pct(PATH_CARRIES)} on its own edges: {mechanism_cell(logic)}"


def ablation_line(analysis, settings: ReportSettings) -> str:
    from probes.report.summary import block_verdicts
    from probes.report.words import intact

    ablated = analysis.circuit_ablation
    blocks = ", ".join(f"block {i + 1} {v}" for i, v in enumerate(block_verdicts(analysis, settings).split("/")))
    return (
        f"Mean-ablating its heads leaves {pct(ablated.accuracy)} accuracy (intact {pct(intact(analysis).accuracy)}); "
        f"a whole block's heads: {blocks}."
    )


# ---- the evidence ---------------------------------------------------------------------------


def evidence_lines(analysis, edges, settings: ReportSettings) -> list[str]:
    from probes.report.words import block_sentences, faithfulness_clause, path_clause, role_clause, shuffle_text

    heldout = analysis.accuracy.splits["heldout"]
    lines = [
        f"held-out {pct(heldout.accuracy.value, 1)} [{heldout.accuracy.low:.1%}, {heldout.accuracy.high:.1%}] "
        f"(Wilson 95%, n = {heldout.n}), train {pct(analysis.accuracy.splits['train'].accuracy.value, 1)}; "
        f"permuting the prefix moves the scored logits by at most {shuffle_text(analysis.accuracy.shuffle_max_logit_change)}"
    ]
    if analysis.circuit is None:
        return lines
    b = analysis.basis
    lines.append(
        f"head circuit on {b.pairs} held-out pairs, {HeadSet(analysis.circuit.heads)}: "
        + faithfulness_clause(analysis.circuit)
    )
    lines += [clause for clause in (path_clause(analysis, settings), role_clause(analysis, settings)) if clause]
    lines += block_sentences(analysis, settings)
    if edges is not None:
        lines += edge_evidence(analysis, edges, settings)
    return lines


def edge_evidence(analysis, edges, settings: ReportSettings) -> list[str]:
    from probes.report.logic_words import path_sentence, ranked_relations, relation_sentence
    from probes.report.words import views_agree

    lines = []
    if edges.logic is not None:
        ranked = ranked_relations(edges.logic.relations)
        lines += [relation_sentence(r) for r in ranked[:SHOWN_RELATIONS]]
        if len(ranked) > SHOWN_RELATIONS:
            lines.append(f"{len(ranked) - SHOWN_RELATIONS} more relations in the Appendix and report.json")
        lines.append(path_sentence(edges.logic))
    return lines + [views_agree(analysis, edges.result, settings).words] + unshown_compositions(edges.result)


def unshown_compositions(result) -> list[str]:
    """Partner feedback: where no edge into a query or a key moves the gap by REFERENCE_NOISE on its
    own, these pairs cannot show Q- or K-composition; said, not left for the reader to infer."""
    from probes.circuits.methods.scores import REFERENCE_NOISE

    shares = [
        abs(share)
        for edge, share in zip(result.graph.edges, result.oracle.normalised().tolist())
        if edge.receiver.port in ("q", "k")
    ]
    if not shares or max(shares) > REFERENCE_NOISE:
        return []
    return [
        f"No edge into a query or a key moves the gap by more than {pct(REFERENCE_NOISE)} on its own (the largest: "
        f"{pct(max(shares), 1)}): these pairs cannot show which positions the heads choose to read (Q- or "
        "K-composition), only what they carry; a partner that also moves where the deciding token sits would"
    ]


# ---- markdown -------------------------------------------------------------------------------


def story_markdown(stories: list[RunStory]) -> str:
    blocks = [INTRO]
    for s in stories:
        block = [f"### {s.title}", "", "Mechanism:", *(f"- {line}" for line in s.mechanism), "", "Evidence:"]
        block += [f"- {line}" for line in s.evidence]
        if s.figure:
            block += ["", f"![{s.title}]({s.figure})"]
        blocks.append("\n".join(block))
    return "\n\n".join(blocks)
