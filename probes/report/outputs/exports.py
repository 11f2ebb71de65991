"""Edge scores in the formats the field's tools read, and validators written from those formats'
rules (docs/exports.md).

- MIB's edge-score JSON (read by EAP-IG's `Graph.from_json`): top-level `cfg` (`n_layers`,
  `n_heads`, `parallel_attn_mlp`, `d_model`), `nodes` and `edges`; nodes `input`, `a{l}.h{h}`,
  `m{l}`, `logits`; an edge into a head names its input (`a0.h1->a1.h0<q>`); every edge holds
  `score` and `in_graph`. The reader builds its graph from `cfg` alone (`Graph.from_model`: an MLP
  node for every layer, whether or not the model has MLPs) and raises on a name it does not know, so
  every edge of that graph is written, those our graph lacks (an attention-only model's MLPs) with
  score 0. Sign: positive = corrupting the edge lowers the logit difference, so score = -(the
  oracle's effect), which is the metric's change when the edge alone carries its counterfactual write.
- The attribution-graph JSON of circuit-tracer / Neuronpedia's viewer, one prompt (one clean /
  counterfactual pair) per file: token nodes, head and MLP nodes at positions, the logit node, and
  links weighted by the exact effect of each position-resolved edge on that prompt. Attention is
  frozen in those graphs, so a head's query input is its own node at the query position and its key
  and value inputs are reader nodes at the key position, the input named in each node's label.
  The validator checks the structure written here from Neuronpedia's graph-schema.json (what its
  upload and /graph/validator check, with Ajv) and the required fields of circuit-tracer's own graph
  model (its frontend/graph_models.py); benchmarks/check_exports_with_readers.py runs both readers.
"""

from __future__ import annotations

import math

from common.cli import UsageError
from models.graph import MLP, Edge, Embed, Head, Logits
from models import Model

# ---- MIB -----------------------------------------------------------------------------------

MIB_CFG = {"n_layers": int, "n_heads": int, "parallel_attn_mlp": bool, "d_model": int}


def mib_node(node) -> str:
    if isinstance(node, Embed):
        return "input"
    if isinstance(node, Head):
        return f"a{node.layer}.h{node.head}"
    return f"m{node.layer}" if isinstance(node, MLP) else "logits"


def mib_edge(edge: Edge) -> str:
    port = f"<{edge.receiver.port}>" if isinstance(edge.receiver.node, Head) else ""
    return f"{mib_node(edge.sender)}->{mib_node(edge.receiver.node)}{port}"


def mib_graph(n_layers: int, n_heads: int, parallel_attn_mlp: bool = False) -> tuple[list[str], list[str]]:
    """(node names, edge names) of EAP-IG's Graph.from_model for this cfg: a head reads the input and
    every earlier head and MLP through q, k and v; m{l} reads those and, unless parallel, its own
    layer's heads; the logits read everything."""
    nodes, edges, upstream = ["input"], [], ["input"]
    for layer in range(n_layers):
        heads = [f"a{layer}.h{h}" for h in range(n_heads)]
        edges += [f"{s}->{head}<{port}>" for head in heads for port in "qkv" for s in upstream]
        mlp_reads = upstream if parallel_attn_mlp else upstream + heads
        edges += [f"{s}->m{layer}" for s in mlp_reads]
        upstream = upstream + heads + [f"m{layer}"]
        nodes += heads + [f"m{layer}"]
    edges += [f"{s}->logits" for s in upstream]
    return nodes + ["logits"], edges


def mib_json(result, scores, d_model: int, circuit=None) -> dict:
    """`scores` (probes.circuits.methods.attribution.EdgeScores, the oracle's convention) of `result`
    (probes.circuits.named.EdgeCircuit) in MIB's format; in_graph marks `circuit` (default: the
    smallest oracle circuit reaching its target, or every edge when none does)."""
    graph = result.graph
    if any(e.position is not None for e in graph.edges):
        raise UsageError("MIB's format has no per-position edges; export a position-free graph")
    circuit = set(circuit if circuit is not None else result.circuit.edges or graph.edges)
    n_heads = max(s.head for s in graph.senders if isinstance(s, Head)) + 1
    names, edge_names = mib_graph(graph.n_layers, n_heads)
    score = {mib_edge(e): -float(s) for e, s in zip(scores.edges, scores.score)}
    kept = {mib_edge(e) for e in circuit}
    unknown = set(score) - set(edge_names)
    if unknown:
        raise UsageError(f"edges {sorted(unknown)[:3]} are not in MIB's graph of this model")
    used = {mib_node(node) for e in circuit for node in (e.sender, e.receiver.node)}
    return {
        "cfg": {"n_layers": graph.n_layers, "n_heads": n_heads, "parallel_attn_mlp": False, "d_model": d_model},
        "nodes": {n: {"in_graph": n in used or n == "logits"} for n in names},
        "edges": {e: {"score": score.get(e, 0.0), "in_graph": e in kept} for e in edge_names},
    }


def mib_problems(data) -> list[str]:
    """Everything in `data` that breaks MIB's rules (an empty list: it passes)."""
    if not isinstance(data, dict) or set(data) != {"cfg", "nodes", "edges"}:
        return ["top level must be an object with exactly the keys cfg, nodes, edges"]
    cfg, problems = data["cfg"], []
    if not isinstance(cfg, dict) or set(cfg) != set(MIB_CFG):
        return [f"cfg must hold exactly {sorted(MIB_CFG)}"]
    for key, kind in MIB_CFG.items():
        # bool is an int in Python: a flag given for a count (or a count for a flag) is refused.
        if (
            not isinstance(cfg[key], kind)
            or (kind is int and isinstance(cfg[key], bool))
            or (kind is int and cfg[key] < 1)
        ):
            problems.append(f"cfg.{key} must be a {'positive int' if kind is int else kind.__name__}")
    if problems:
        return problems
    nodes, edges = mib_graph(cfg["n_layers"], cfg["n_heads"], cfg["parallel_attn_mlp"])
    if not isinstance(data["nodes"], dict) or not isinstance(data["edges"], dict):
        return ["nodes and edges must be objects keyed by name"]
    problems += [f"unknown node {n!r}" for n in data["nodes"] if n not in nodes]
    problems += [
        f"node {n!r} needs a bool in_graph"
        for n, v in data["nodes"].items()
        if not isinstance(v, dict) or not isinstance(v.get("in_graph"), bool)
    ]
    problems += [f"unknown edge {e!r}" for e in data["edges"] if e not in set(edges)]
    problems += [f"missing edge {e!r}" for e in edges if e not in data["edges"]]
    for name, entry in data["edges"].items():
        if not isinstance(entry, dict) or not isinstance(entry.get("in_graph"), bool):
            problems.append(f"edge {name!r} needs a bool in_graph")
        elif (
            not isinstance(entry.get("score"), (int, float))
            or isinstance(entry["score"], bool)
            or not math.isfinite(entry["score"])
        ):
            problems.append(f"edge {name!r} needs a finite number score")
    return problems


def check_mib(data, where: str) -> None:
    problems = mib_problems(data)
    if problems:
        raise UsageError(
            f"{where} is not a valid MIB edge-score file: {problems[0]}"
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
        )


def mib_scores(data) -> dict[str, float]:
    """Edge name -> score of a valid MIB file (the round trip's reading side)."""
    check_mib(data, "the file")
    return {name: entry["score"] for name, entry in data["edges"].items()}


# ---- the attribution graph ------------------------------------------------------------------

FEATURE_TYPES = ("embedding", "logit", "cross layer transcoder", "mlp reconstruction error")
NODE_FIELDS = {
    "node_id": str,
    "feature": int,
    "layer": str,
    "ctx_idx": int,
    "feature_type": str,
    "jsNodeId": str,
    "clerp": str,
}
# Neuronpedia's schema requires the first four metadata fields and no qParams field; circuit-tracer's
# graph model also requires transcoder_list, clickedId and sg_pos, so they are written (empty) too.
METADATA_FIELDS = {"slug": str, "scan": str, "prompt_tokens": list, "prompt": str, "transcoder_list": list}
QPARAMS_FIELDS = {"pinnedIds": list, "supernodes": list, "linkType": str, "clickedId": str, "sg_pos": str}
# The optional metadata.info fields the schema types (the others are free), and its generator's.
INFO_FIELDS: dict[str, tuple[type | tuple[type, ...], str]] = {
    "description": (str, "a string"),
    "creator_name": (str, "a string"),
    "creator_url": (str, "a string"),
    "source_urls": (list, "an array"),
    "generator": (dict, "an object"),
    "create_time_ms": ((int, float), "a number"),
}
GENERATOR_FIELDS = ("name", "version", "url", "email")
LINK_FLOOR = 0.01  # links whose |effect| is below this share of the prompt's clean - counterfactual gap are left out
PORT_FEATURE = {"q": 0, "k": 1, "v": 2}


def node(node_id: str, feature: int, layer: str, position: int, kind: str, label: str) -> dict:
    return {
        "node_id": node_id,
        "feature": feature,
        "layer": layer,
        "ctx_idx": position,
        "feature_type": kind,
        "jsNodeId": node_id,
        "clerp": label,
    }


def component_node(component, port: str, position: int, tokens: list[int], words: list[str], n_heads: int) -> dict:
    """The node of a sender's write or a receiver's input at a position. A head's query input and its
    output share one node (both at the query position); its key and value inputs at a key position
    are nodes of their own. An MLP's input and output share one node; features number a layer's
    nodes: 4 per head (output and q, k, v), then the MLP."""
    where = f"p{position} '{words[position]}'"
    if isinstance(component, Embed):
        token = tokens[position]
        return node(f"E_{token}_{position}", token, "E", position, "embedding", f"'{words[position]}' (p{position})")
    if isinstance(component, MLP):
        feature = 4 * n_heads
        return node(
            f"{component.layer}_{feature}_{position}",
            feature,
            str(component.layer),
            position,
            "mlp reconstruction error",
            f"MLP{component.layer} at {where}",
        )
    if port in ("q", "out"):
        label = f"{component} at {where}: its query (q) input and its output"
        feature = 4 * component.head
    else:
        label = f"{component} {'key' if port == 'k' else 'value'} ({port}) input at {where}"
        feature = 4 * component.head + PORT_FEATURE[port]
    return node(
        f"{component.layer}_{feature}_{position}",
        feature,
        str(component.layer),
        position,
        "cross layer transcoder",
        label,
    )


def attribution_graph(model: Model, pair, spec, vocabulary: list[str], slug: str, scan: str) -> dict:
    """One prompt's attribution graph. `pair`: a Batch of one clean example and its counterfactual
    partner, scored at one position; every edge resolved by position up to that position and
    measured exactly by probes.circuits.oracle on this prompt alone."""
    from models.graph import graph_of
    from probes.circuits.oracle import edge_effects
    from probes.patching import metric_name
    from tasks.base import NO_FOIL

    if len(pair) != 1 or len(pair.answers) != 1:
        raise UsageError("an attribution graph is one prompt scored at one position")
    scored = int(pair.positions[0])
    tokens = pair.inputs[0, : int(pair.lengths[0]) - 1].tolist()
    words = [vocabulary[t] for t in tokens]
    graph = graph_of(spec, positions=tuple(range(scored + 1)))
    effects = edge_effects(model, pair, graph)
    gap = -effects.gap
    answer, foil = int(pair.answers[0]), int(pair.foils[0])
    foil_word = None if foil == NO_FOIL else vocabulary[foil]
    nodes, links = {}, []
    logit = node(
        f"L_{answer}_{scored}",
        answer,
        str(graph.n_layers + 1),
        scored,
        "logit",
        f"logit '{vocabulary[answer]}'" + (f" - logit '{foil_word}'" if foil_word else "") + f" at p{scored}",
    )
    for edge, effect in zip(graph.edges, effects.effect.tolist()):
        if abs(effect) < LINK_FLOOR * abs(gap):
            continue
        assert edge.position is not None  # the graph is resolved by position: graph_of(spec, positions=...)
        source = component_node(edge.sender, "out", edge.position, tokens, words, spec.n_heads)
        receiver = edge.receiver.node
        target = (
            logit
            if isinstance(receiver, Logits)
            else component_node(receiver, edge.receiver.port, edge.position, tokens, words, spec.n_heads)
        )
        nodes.setdefault(source["node_id"], source)
        nodes.setdefault(target["node_id"], target)
        # Positive: the clean write supports the answer (corrupting the edge alone lowers the metric).
        links.append({"source": source["node_id"], "target": target["node_id"], "weight": -effect})
    info = {
        "metric": metric_name(pair),
        "clean_metric": effects.base.metric,
        "counterfactual_metric": effects.other.metric,
        "counterfactual_tokens": [vocabulary[t] for t in pair.counterfactual[0, : len(tokens)].tolist()],
        "link_weight": "exact change in the metric when the edge alone is given its "
        "counterfactual write, negated (positive: the edge supports the answer)",
        "link_floor": f"links below {LINK_FLOOR:.0%} of |clean - counterfactual| left out",
    }
    return graph_json(slug, scan, words, info, list(nodes.values()), links)


def graph_json(slug: str, scan: str, words: list[str], info: dict, nodes: list, links: list, transcoders=()) -> dict:
    """The attribution-graph file around its nodes and links: the metadata and the viewer's query
    parameters (empty) that Neuronpedia's schema and circuit-tracer's graph model require."""
    return {
        "metadata": {
            "slug": slug,
            "scan": scan,
            "prompt_tokens": words,
            "prompt": " ".join(words),
            "info": {**info, "generator": {"name": "toylens"}},
            "transcoder_list": list(transcoders),
        },
        "qParams": {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""},
        "nodes": nodes,
        "links": links,
    }


def feature_attribution_graph(traced, tokens: list[str], scored: int, slug: str, scan: str) -> dict:
    """A feature circuit (probes.features.measure.TracedRun) as an attribution graph: each
    transcoder feature and each error node a node, the metric one logit node. Links: feature ->
    logits, the exact change of the metric when that sender alone takes its counterfactual write,
    negated (positive: it supports the answer), kept from LINK_FLOOR of the gap; feature -> feature,
    the receiving feature's activation change, negated, kept from LINK_FLOOR of the largest. The
    edges are means over the circuit's pairs at their scored positions, so every node sits at the
    scored position of `tokens` (the first pair's clean prompt, shown as the graph's prompt)."""
    c = traced.circuit
    logit = node(f"L_0_{scored}", 0, str(len(traced.matches) + 1), scored, "logit", f"answer - foil logit at p{scored}")
    within = c.effect[:, :-1].nan_to_num(0.0)
    largest = float(within.abs().max()) if within.numel() else 0.0
    nodes, links = {logit["node_id"]: logit}, []
    for s, sender in enumerate(c.senders):
        kept = [(logit, -float(c.effect[s, -1]))] if abs(float(c.effect[s, -1])) >= LINK_FLOOR * abs(c.gap) else []
        kept += [
            (feature_node(traced, receiver, scored), -float(within[s, r]))
            for r, receiver in enumerate(c.receivers[:-1])
            if largest and abs(float(within[s, r])) >= LINK_FLOOR * largest
        ]
        source = feature_node(traced, sender, scored)
        for target, weight in kept:
            nodes.setdefault(source["node_id"], source)
            nodes.setdefault(target["node_id"], target)
            links.append({"source": source["node_id"], "target": target["node_id"], "weight": weight})
    info = {
        "description": f"feature circuit through {', '.join(c.dictionaries)} on {c.pairs} counterfactual pairs",
        "clean_metric": c.clean_metric,
        "counterfactual_metric": c.other_metric,
        "link_weight": "to the logit node: exact change of the answer - foil logit when the sender alone "
        "takes its counterfactual write, negated, mean over the pairs; between features: the receiving "
        "feature's activation change, negated (its own units)",
        "link_floor": f"links below {LINK_FLOOR:.0%} of |clean - counterfactual| (to the logits) or of the "
        "largest feature change (between features) left out",
    }
    return graph_json(slug, scan, tokens, info, list(nodes.values()), links, c.dictionaries)


def feature_node(traced, sender, scored: int) -> dict:
    """A transcoder feature's node, labelled with the planted variable it reads best as, or its
    error node's (numbered d_sae, after the features)."""
    d_sae = len(traced.matches[sender.layer])
    if sender.feature is None:
        label, kind, feature = f"MLP{sender.layer}'s transcoder error", "mlp reconstruction error", d_sae
    else:
        variable, mcc = traced.matches[sender.layer][sender.feature]
        label, kind, feature = (
            f"{sender}: reads best as {variable} (MCC {mcc:.2f})",
            "cross layer transcoder",
            sender.feature,
        )
    return node(f"{sender.layer}_{feature}_{scored}", feature, str(sender.layer), scored, kind, label)


def attribution_problems(data) -> list[str]:
    """What breaks the attribution-graph structure (an empty list: it passes)."""

    def typed(obj, fields, where):
        if not isinstance(obj, dict):
            return [f"{where} must be an object"]
        return [
            f"{where}.{k} must be {t.__name__}"
            for k, t in fields.items()
            if not isinstance(obj.get(k), t) or (t is int and isinstance(obj.get(k), bool))
        ]

    if not isinstance(data, dict) or not {"metadata", "qParams", "nodes", "links"} <= set(data):
        return ["top level must hold metadata, qParams, nodes and links"]
    problems = typed(data["metadata"], METADATA_FIELDS, "metadata") + typed(data["qParams"], QPARAMS_FIELDS, "qParams")
    problems += info_problems(data["metadata"].get("info", {}) if isinstance(data["metadata"], dict) else {})
    if not isinstance(data["nodes"], list) or not isinstance(data["links"], list):
        return problems + ["nodes and links must be lists"]
    ids = set()
    for i, n in enumerate(data["nodes"]):
        found = typed(n, NODE_FIELDS, f"nodes[{i}]")
        problems += found
        if found:
            continue
        if n["node_id"] in ids:
            problems.append(f"node id {n['node_id']!r} appears twice")
        ids.add(n["node_id"])
        if n["feature_type"] not in FEATURE_TYPES:
            problems.append(f"nodes[{i}].feature_type {n['feature_type']!r} is not one of {FEATURE_TYPES}")
        if (n["feature_type"] == "embedding") != (n["layer"] == "E"):
            problems.append(f"nodes[{i}]: embedding nodes, and only they, are at layer 'E'")
        if n["jsNodeId"] != n["node_id"]:
            problems.append(f"nodes[{i}].jsNodeId differs from its node_id")
    logits = [n for n in data["nodes"] if isinstance(n, dict) and n.get("feature_type") == "logit"]
    if not logits:
        problems.append("no logit node")
    layers = [
        int(n["layer"])
        for n in data["nodes"]
        if isinstance(n, dict) and str(n.get("layer", "E")).isdigit() and n.get("feature_type") != "logit"
    ]
    if logits and layers and any(int(n["layer"]) <= max(layers) for n in logits):
        problems.append("a logit node must sit above every other layer (n_layers + 1)")
    for i, link in enumerate(data["links"]):
        if not isinstance(link, dict) or link.get("source") not in ids or link.get("target") not in ids:
            problems.append(f"links[{i}] must join two known node ids")
        elif not isinstance(link.get("weight"), (int, float)) or not math.isfinite(link["weight"]):
            problems.append(f"links[{i}].weight must be a finite number")
    return problems


def info_problems(info) -> list[str]:
    if not isinstance(info, dict):
        return ["metadata.info must be an object"]
    problems = [
        f"metadata.info.{k} must be {what}"
        for k, (kind, what) in INFO_FIELDS.items()
        if k in info and (not isinstance(info[k], kind) or isinstance(info[k], bool))
    ]
    generator = info.get("generator", {})
    if isinstance(generator, dict):
        problems += [
            f"metadata.info.generator.{k} must be a string"
            for k in GENERATOR_FIELDS
            if k in generator and not isinstance(generator[k], str)
        ]
    return problems


# ---- writing -------------------------------------------------------------------------------


def write_mib(path, result, scores, d_model: int) -> None:
    """One MIB file, checked against the rules before it is written."""
    from common.atomic import write_json

    data = mib_json(result, scores, d_model)
    check_mib(data, str(path))
    write_json(path, data)


def write_report_mib(measured: list, folder, settings) -> list:
    """The report's MIB files: the oracle's edge scores of every run whose edges were traced (the
    clean - counterfactual gap at least settings.min_gap), folder/mib/<model>_seed<k>.json."""
    from pathlib import Path

    from probes.circuits.named import ORACLE

    written = []
    for m in measured:
        edge_run, analysis = m.results.get("edge_circuits"), m.results.get("runs")
        if edge_run is None or abs(edge_run.result.oracle.gap) < settings.min_gap:
            continue
        oracle = next(r.scores for r in edge_run.result.methods if r.scores.method == ORACLE)
        path = Path(folder) / "mib" / f"{slug(m.model_name)}_seed{m.seed}.json"
        write_mib(path, edge_run.result, oracle, analysis.spec.d_model)
        written.append(path)
    return written


def write_attribution(path, data: dict) -> None:
    from common.atomic import write_json

    problems = attribution_problems(data)
    if problems:
        raise UsageError(f"{path}: the attribution graph breaks the viewer's structure: {problems[0]}")
    write_json(path, data)


def slug(text: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in text).strip("-").lower()
