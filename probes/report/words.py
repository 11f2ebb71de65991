"""The circuit part's summary in words: one sentence per run, and how the seeds of a model agree.
Each clause names its basis (probes.report.run_analysis.Basis) and every verdict its threshold
(probes.settings.ReportSettings); a claim true by construction says so."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass

from common.stats import share
from models.components import Head, HeadSet
from probes.ablation import Ablation
from probes.settings import ReportSettings

COMPONENT_WORDS = {"q": "query", "k": "keys", "v": "values"}
MAX_GROUP_WORDS = 3  # more groups (e.g. induction's repeat lengths) are summarised by the all-group row


def pct(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "n/a"
    text = f"{value:.{digits}%}"
    return text[1:] if text.startswith("-") and text.strip("-0.%") == "" else text  # no "-0%"


def shuffle_text(change: float) -> str:
    """The shuffle test's largest logit change, or why it has none."""
    return "n/a (no order to permute)" if math.isnan(change) else f"{change:.1e}"


def foil_clause(rate: float) -> str:
    """'12% foil, ', or nothing for a task that names no foils."""
    return "" if math.isnan(rate) else f"{pct(rate)} foil, "


def token_share(result, vocabulary) -> str:
    """'top prediction 'field' at 93%' for an AblationResult."""
    from probes.health import token_word

    return f"top prediction {token_word(result.top_token, vocabulary)} at {pct(result.top_share)}"


def verdict(intact, ablated, settings: ReportSettings) -> tuple[str, str]:
    """('needed' | 'unused' | 'partly used', the numbers behind it) from two AblationResults, on
    accuracy and, where the task names foils, on the answer - foil logit difference."""
    drop = round(intact.accuracy - ablated.accuracy, 9)  # accuracies are k/n: 1.0 - 0.98 must be 0.02
    kept = share(ablated.logit_diff, 0.0, intact.logit_diff)
    has_logit = not math.isnan(kept)
    numbers = f"keeps {pct(ablated.accuracy)} accuracy (intact {pct(intact.accuracy)})"
    numbers += (
        f" and {pct(kept)} of the logit difference ({intact.logit_diff:+.2f} -> {ablated.logit_diff:+.2f})"
        if has_logit
        else " (no foils: accuracy only)"
    )
    if drop >= settings.needed_accuracy_drop or (has_logit and kept < settings.needed_logit_share):
        return "needed", numbers
    if drop <= settings.unused_accuracy_drop and (not has_logit or kept >= settings.unused_logit_share):
        return "unused", numbers
    return "partly used", numbers


def intact(analysis, method: Ablation = Ablation.MEAN):
    """The sweep's unablated result."""
    return next(result for result in analysis.ablations[method] if not result.heads)


def whole_layers(analysis, method: Ablation = Ablation.MEAN) -> list[tuple[int, object]]:
    """(layer, AblationResult with every head of that layer ablated), from the sweep."""
    n_heads = analysis.spec.n_heads
    found = {}
    for result in analysis.ablations[method]:
        layers = {head.layer for head in result.heads}
        if len(result.heads) == n_heads and len(layers) == 1:
            found[layers.pop()] = result
    return sorted(found.items())


def block_sentences(analysis, settings: ReportSettings) -> list[str]:
    out = []
    for layer, result in whole_layers(analysis):
        word, numbers = verdict(intact(analysis), result, settings)
        out.append(f"block {layer + 1} {word}: mean-ablating all its heads {numbers}")
    return out


def attention_words(rows: dict, labels: list[str], settings: ReportSettings) -> str:
    """Every key holding at least `attention_shown` of the row (at most three), per group where the
    groups' strongest keys differ."""

    def keys(row):
        ranked = sorted(range(len(row)), key=lambda i: -row[i])
        shown = [i for i in ranked[:3] if row[i] >= settings.attention_shown] or ranked[:1]
        return ", ".join(f"{labels[i]} ({row[i]:.2f})" for i in shown)

    groups = [g for g in rows if g != "all"]
    tops = {g: max(range(len(rows[g])), key=lambda i: rows[g][i]) for g in groups}
    if len(set(tops.values())) <= 1 or len(groups) > MAX_GROUP_WORDS:
        return "attends " + keys(rows["all"])
    return "attends " + "; ".join(f"{keys(rows[g])} for {g}" for g in groups)


def node_words(head, positions, view, analysis, settings: ReportSettings) -> str:
    """'L0H0 (kept at every position; matters at p11 adj (73%), where it attends ...)' for a circuit
    head kept at `positions` (None: every position)."""
    labels = analysis.labels
    kept = "kept at every position" if positions is None else "kept at " + " + ".join(labels[p] for p in positions)
    if not view.matters:
        return f"{head} ({kept}; {unmatched_words(head, analysis, settings)})"
    where = "; ".join(
        f"{labels[p]} ({pct(r)} of the gap), where it {attention_words(view.attention[p], labels, settings)}"
        for p, r in view.matters
    )
    return f"{head} ({kept}; patching its output matters at {where})"


def unmatched_words(head, analysis, settings: ReportSettings) -> str:
    """A circuit head whose patched output restores little at any one position: 'it matters only
    across positions' only when patching it at every position at once shows it; otherwise what
    it writes barely differs between the pairs, and the search kept it for what mean-ablating it
    costs (its knockout)."""
    everywhere = float(analysis.patching.recovered(analysis.patching.head_all[head.layer, head.head]))
    text = (
        f"patching its output restores less than {pct(settings.matters)} of the gap at any one position "
        f"and {pct(everywhere)} at every position at once"
    )
    if abs(everywhere) >= settings.matters:
        return text + ": it matters only across positions"
    knockout = analysis.circuit.knockout[head].normalised
    return (
        text + f": it matters when mean-ablated (the full model without it keeps {knockout:.2f} on the null "
        "scale), not through what differs between the pairs"
    )


def role_clause(analysis, settings: ReportSettings) -> str | None:
    """Each circuit head by role (probes.attention.RoleView), for a task that names its positions: where
    patching its output at each pair's own role position matters, and where it attends from the role
    where it matters most. None for a task without roles."""
    view = analysis.roles
    if view is None or not view.recovered:
        return None
    heads = []
    for head in analysis.circuit.kept:
        effect = sorted(
            ((float(r[head.layer, head.head]), role) for role, r in view.recovered.items()),
            key=lambda item: -abs(item[0]),
        )
        where = [(share_, role) for share_, role in effect if abs(share_) >= settings.matters]
        if not where:
            heads.append(f"{head} matters at no role alone (best {effect[0][1]}, {pct(effect[0][0])})")
            continue
        rows = view.attention.get(where[0][1], {})
        looked = sorted(((float(m[head.layer, head.head]), role) for role, m in rows.items()), key=lambda x: -x[0])
        shown = [f"{role} ({mass:.2f})" for mass, role in looked if mass >= settings.attention_shown]
        heads.append(
            f"{head} matters at "
            + " and ".join(f"{role} ({pct(share_)} of the gap)" for share_, role in where)
            + (f" and from {where[0][1]} attends " + " and ".join(shown) if shown else "")
        )
    return (
        f"by role (each pair patched at its own role positions, {view.pairs} pairs; attention over "
        f"{view.rows} examples): " + ", ".join(heads)
    )


def paths_of(analysis) -> list:
    """Every head-to-head path of the run in both views (probes.circuits.labels.circuit_paths)."""
    from probes.circuits.labels import run_paths

    return run_paths(analysis)


def named(analysis, settings: ReportSettings) -> list:
    """The paths the summary names: either view recovers at least `path_claim` of the gap."""
    from probes.circuits.labels import named_paths

    return named_paths(paths_of(analysis), settings.path_claim)


def views_words(path, analysis) -> str:
    """'63% of the gap with the sender at every position and 37% at its best single position (p2)'."""
    every = ("(not measured)" if path.everywhere is None else pct(path.everywhere)) + " of the gap"
    if path.recovered is None:
        return f"{every} with the sender at every position (no single position patched)"
    return (
        f"{every} with the sender at every position and {pct(path.recovered)} at its best single position "
        f"({path.position_label})"
    )


def edge_words(path, analysis) -> str:
    """One named path, by the edge oracle's name for it, with both views' numbers."""
    restored = (
        ""
        if path.restored is None
        else (
            f", and patched there alone it restores {pct(analysis.patching.restored_share(path.restored))} of the "
            "answers the counterfactual flips"
        )
    )
    return (
        f"{path.oracle_name} ({path.mechanism}: {path.receiver} reads {path.sender}'s output through its "
        f"{COMPONENT_WORDS[path.component]}) recovers {views_words(path, analysis)}{restored}"
    )


def chain_words(paths) -> str:
    """'; in series: L0H0 -> L1H0.k, then L1H0 -> L2H0.v (3 heads, one hop each)' where named paths
    chain (probes.circuits.labels.path_chain), so a multi-hop circuit reads as one, not as separate paths."""
    from probes.circuits.labels import path_chain

    chain = path_chain(paths)
    if len(chain) < 2:
        return ""
    return f"; in series: {', then '.join(p.oracle_name for p in chain)} ({len(chain) + 1} heads, one hop each)"


def mechanism_mlps(mechanism) -> list[str]:
    """The MLP parts of an edge circuit's mechanism (probes.circuits.signature), in its part order;
    none for a head circuit's signature (it has no MLPs) or no mechanism."""
    from probes.circuits.signature import EDGE_BASIS

    if mechanism is None or mechanism.basis != EDGE_BASIS or not mechanism.edges:
        return []
    return [part for part in mechanism.parts if part.startswith("MLP")]


def path_clause(analysis, settings: ReportSettings) -> str | None:
    paths = paths_of(analysis)
    chosen = named(analysis, settings)
    if chosen:
        return (
            f"{'path' if len(chosen) == 1 else f'{len(chosen)} paths'} (named where the sender's write "
            f"patched at every position or at one position recovers {pct(settings.path_claim)} of the gap): "
            + ", and ".join(edge_words(path, analysis) for path in chosen)
            + chain_words(chosen)
        )
    if paths:
        mlps, through = mechanism_mlps(analysis.mechanism), ""
        if mlps:
            through = (
                f" (the edge circuit's mechanism runs through {', '.join(mlps)} instead: its sentence names the path)"
            )
        elif analysis.spec.mlp:
            through = " (paths through MLPs: the edge circuit's sentence)"
        return (
            f"no head-to-head path recovers {pct(settings.path_claim)} of the gap, with the sender patched "
            f"at every position or at any single one (the strongest, {paths[0].oracle_name}, recovers "
            f"{views_words(paths[0], analysis)}){through}"
        )
    if analysis.paths is None:  # the circuit's heads traced, not the paths between them
        return analysis.note
    if analysis.spec.n_layers > 1:
        # Heads of one block cannot compose; whether later blocks' MLPs carry the decision on is
        # not measured here (the MLP section ablates them; the edge-circuit section shows their edges).
        layer = next(iter(analysis.circuit.kept)).layer
        return f"no composition between circuit heads: all of them are in block {layer + 1}"
    return None


def faithfulness_clause(circuit) -> str:
    if circuit.upstream:
        return (
            "the circuit contains every head output that can reach the scored logits, so its faithfulness "
            "is 1 by construction (not a finding)"
        )
    f, heads = circuit.faithfulness, circuit.head_faithfulness
    text = f"faithfulness {f.normalised:.2f} on the null scale ({pct(f.recovered)} of the clean - counterfactual gap)"
    if circuit.head_upstream:
        return text + (
            "; its heads at every position are every head output upstream of the scored logits (1 by construction)"
        )
    return text + f"; its heads at every position: {heads.normalised:.2f} ({pct(heads.recovered)})"


def describe(analysis, settings: ReportSettings, vocabulary=None) -> str:
    heldout = analysis.accuracy.splits["heldout"]
    head = f"{analysis.model_name} seed {analysis.seed}: held-out {pct(heldout.accuracy.value, 1)} (n = {heldout.n})"
    if analysis.circuit is None:
        return (
            f"{head}, shuffle max|dlogit| {shuffle_text(analysis.accuracy.shuffle_max_logit_change)}; "
            f"no circuit ({analysis.note})"
        )
    b, circuit = analysis.basis, analysis.circuit
    nodes = "; ".join(
        node_words(head, positions, view, analysis, settings)
        for (head, positions), view in zip(circuit.kept.items(), analysis.node_views)
    )
    parts = [head, f"circuit on {b.pairs} held-out pairs: {nodes}"]
    parts += [clause for clause in (role_clause(analysis, settings), path_clause(analysis, settings)) if clause]
    parts.append(faithfulness_clause(circuit))
    ablated = analysis.circuit_ablation
    parts.append(
        f"on {b.ablation} of {b.heldout} held-out examples (means over {b.reference} of {b.train} "
        f"training rows), mean-ablating {HeadSet(circuit.heads)} leaves {pct(ablated.accuracy)} accuracy, "
        f"{foil_clause(ablated.foil_rate)}{token_share(ablated, vocabulary)}, logit difference {ablated.logit_diff:+.2f} "
        f"(intact {intact(analysis).logit_diff:+.2f})"
    )
    parts += block_sentences(analysis, settings)
    return "; ".join(parts)


def signature(analysis, settings: ReportSettings):
    """What two seeds must share to count as the same circuit: its mechanism signature
    (probes.circuits.signature: heads by layer and measured role, so relabelled heads agree) where
    it was measured, else its heads and the named paths' mechanism (as the census label: where the
    search pinned a head is a position, which varies with the layout)."""
    from probes.circuits.labels import mechanism_text

    if analysis.circuit is None:
        return ()
    if analysis.mechanism is not None:
        return analysis.mechanism
    chosen = named(analysis, settings)
    return analysis.circuit.heads, mechanism_text(chosen) if chosen else ""


def describe_signature(sig, settings: ReportSettings) -> str:
    from probes.circuits.signature import MechanismSignature

    if isinstance(sig, MechanismSignature):
        return sig.text
    nodes, mechanism = sig
    text = " + ".join(map(str, nodes))
    return text + (f", {mechanism}" if mechanism else f", no path >= {pct(settings.path_claim)}")


def seed_agreement(analyses, settings: ReportSettings) -> list[str]:
    """Per model, the seeds counted by circuit: how many share each (nodes, claimed path)."""
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
            kinds[signature(a, settings)].append(str(a.seed))
        verdict_text = (
            agreement_words(next(iter(kinds.values())), traced) + ": " + describe_signature(next(iter(kinds)), settings)
            if len(kinds) == 1
            else f"{len(kinds)} {'mechanisms' if all(a.mechanism for a in traced) else 'circuits'} in "
            f"{len(traced)} seeds: "
            + " | ".join(
                f"seed {', '.join(seeds)}: {describe_signature(sig, settings)}" for sig, seeds in kinds.items()
            )
        )
        untraced = [str(a.seed) for a in runs if a.circuit is None]
        if untraced:
            verdict_text += f"; no circuit traced for seed {', '.join(untraced)}"
        lines.append(f"{model}: {verdict_text}")
    return lines


def agreement_words(seeds: list[str], traced) -> str:
    """'seeds 0, 1, 2: one mechanism (heads relabelled)' when the seeds' mechanism signatures agree
    but other heads play its parts, else 'seeds 0, 1, 2 agree'."""
    from probes.circuits.signature import relabelled_heads

    mechanisms = [a.mechanism for a in traced]
    if all(mechanisms) and relabelled_heads(mechanisms):
        return f"seeds {', '.join(seeds)}: one mechanism (heads relabelled)"
    return f"seeds {', '.join(seeds)} agree"


def circuit_summary(analysis):
    """The stored facts of a run's circuit (probes.circuits.labels.CircuitSummary), with this
    report's sentence for it."""
    from probes.circuits.labels import summarise
    from probes.settings import DEFAULT

    return summarise(analysis, describe(analysis, DEFAULT, analysis.vocabulary))


HEAD_EDGE = re.compile(r"L\d+H\d+ -> L\d+H\d+\.[qkv]")  # a head-to-head edge of models.graph


@dataclass(frozen=True)
class ViewAgreement:
    """The head view's named paths against the edge oracle's head-to-head edges, both at the claim."""

    head_view: tuple[str, ...]  # oracle names of the paths the summary names
    edge_view: tuple[str, ...]  # head-to-head edges whose effect alone is >= the claim
    head_circuit: tuple[str, ...]  # the head circuit's heads
    edge_senders: tuple[str, ...]  # the heads among the edge circuit's senders
    agree: bool  # the same paths and the same heads
    words: str


def views_agree(analysis, edges, settings: ReportSettings) -> ViewAgreement:
    """Do the run's summary (path patching, denoising: the clean write restored) and its edge
    circuit (probes.circuits.named.EdgeCircuit, the oracle: noising, one edge given its
    counterfactual write) name the same head-to-head paths? Where not, each difference with both
    numbers."""
    share = dict(zip(map(str, edges.oracle.edges), edges.oracle.normalised().tolist()))
    strong = {name: v for name, v in share.items() if HEAD_EDGE.fullmatch(name) and abs(v) >= settings.path_claim}
    paths = {p.oracle_name: p for p in paths_of(analysis)}
    chosen = {p.oracle_name for p in named(analysis, settings)}
    edge_view = tuple(sorted(strong))
    head_heads = {str(h) for h in analysis.circuit.heads}
    edge_heads = (
        {str(e.sender) for e in edges.circuit.edges if isinstance(e.sender, Head)}
        if edges.circuit.edges is not None
        else set()
    )
    differ = [
        f"{name}: the edge oracle {pct(share.get(name, 0.0))} alone, path patching "
        + (views_words(paths[name], analysis) if name in paths else "not measured")
        for name in sorted(chosen ^ set(strong))
    ]
    heads = tuple(sorted(head_heads)), tuple(sorted(edge_heads))
    if head_heads != edge_heads:
        differ.append(
            f"the head circuit has {', '.join(sorted(head_heads)) or 'no head'}, the edge circuit's "
            f"senders {', '.join(sorted(edge_heads)) or 'no head'}"
        )
    if not differ:
        words = f"the head view and the edge view agree: both name heads {', '.join(sorted(head_heads))} and " + (
            f"the paths {', '.join(edge_view)}"
            if chosen
            else f"no head-to-head path at {pct(settings.path_claim)} of the gap"
        )
        return ViewAgreement(tuple(sorted(chosen)), edge_view, *heads, True, words)
    return ViewAgreement(
        tuple(sorted(chosen)),
        edge_view,
        *heads,
        False,
        f"the head view and the edge view differ at {pct(settings.path_claim)} of the gap: " + "; ".join(differ),
    )
