"""A mechanism's signature: a run's circuit with every head abstracted to its layer and its measured
role, MLPs to their layer, in a canonical form that does not change when heads within a layer are
relabelled. Two runs have the same mechanism when their signatures are equal.

A permutation of the heads of one layer (their q/k/v/o weights moved together) leaves the model's
function unchanged, so the mechanism must not change either; today's labels are built from head
indices and count such a run as a new circuit. The canonical form is colour refinement (1-WL) on
the circuit graph: each node starts with a colour built from what is invariant under relabelling
(kind, layer, measured role), then takes, round by round, the sorted multiset of its edges'
(direction, receiver input, position, neighbour colour). Colours are compressed to their rank
among the sorted distinct colours of the round, a function of the colour values alone, never of
node order. A part is one final colour class; the signature is the multiset of edges between
parts. Each step is a function of the graph up to relabelling, so the signature is invariant by
construction (tests/test_signature.py checks it on random relabellings). Heads with equal final
colours are interchangeable in the circuit and are counted as one part with a multiplicity.
Refinement can merge two graphs that are not isomorphic (1-WL is not complete); on circuits of a
few tiny layers that needs regular structures a trained circuit does not have.

Roles come from measurement (probes.circuits.roles).

The edge basis (multi-block runs) is coarser than the head basis: a part there is a layer's heads of
one role whatever their number, and only the part edges that carry the mechanism are kept (the
main path from the embedding to the logits and every part edge costing at least its weakest edge:
`carrying_parts`, docs/census.md), because the full edge circuit's small edges, and how many heads
share a part, differ between seeds of one mechanism.
Relations between parts (AND / OR / in series, from minimal sufficient sets) have a slot,
`relations`, filled by probes.circuits.logic when it is run.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from common.cli import UsageError
from common.jsonfiles import check_fields, of_type
from common.stages import timed
from probes.circuits.roles import UNNAMED, RoleMasses, circuit_roles, read_at_scored, role_masses
from models import Model

SIGNATURE = "signature"  # its field in circuit.json, timeline.json and report.json
LAST = 10**9  # the logits' stage: after every layer's
FIELDS = {"parts": list, "edges": list, "heads": dict, "relations": list, "basis": str, "profiles": dict}
OPTIONAL = {"profiles"}  # circuit.json written before profiles were kept has none


@dataclass(frozen=True)
class MechanismSignature:
    """Equal signatures = one mechanism. `heads` says which heads play each part in this run and is
    left out of equality: it is what relabelling changes."""

    parts: tuple[str, ...]  # every part, canonical order, e.g. 'L0 previous-token head', 'MLP0', 'logits'
    edges: tuple[str, ...]  # the edges between parts, e.g. 'L0 previous-token head -> MLP0' ('x2': two edges)
    basis: str = ""  # what circuit it was computed from ('edge circuit' | 'head circuit')
    relations: tuple[str, ...] | None = (
        None  # AND / OR / series between parts (probes.circuits.logic); None: not measured
    )
    heads: tuple[tuple[str, tuple[str, ...]], ...] = field(default=(), compare=False)  # part -> heads, e.g. ('L0H1',)
    # part -> its heads' mean attention mass on each role (probes.circuits.roles.RoleMasses.profile):
    # what the role word was read from, so a census can say how far apart two rows' roles were
    profiles: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = field(default=(), compare=False)

    @property
    def text(self) -> str:
        """The mechanism in one line: its edges, or its parts where it has none."""
        return "; ".join(self.edges) if self.edges else " + ".join(self.parts) or "no circuit"

    @property
    def head_map(self) -> dict[str, tuple[str, ...]]:
        return dict(self.heads)

    def to_dict(self) -> dict:
        return {
            "parts": list(self.parts),
            "edges": list(self.edges),
            "basis": self.basis,
            "relations": None if self.relations is None else list(self.relations),
            "heads": {part: list(heads) for part, heads in self.heads},
            "profiles": {part: dict(masses) for part, masses in self.profiles},
        }

    @classmethod
    def from_dict(cls, data, where: str, fix: str) -> "MechanismSignature":
        check_fields(data, FIELDS, where, fix, nullable=("relations",))
        if set(data) | OPTIONAL != set(FIELDS):
            raise UsageError(f"{where}: {SIGNATURE} lacks field(s) {sorted(set(FIELDS) - set(data) - OPTIONAL)}; {fix}")
        profiles = data.get("profiles", {})
        if not all(isinstance(v, dict) and all(of_type(m, float) for m in v.values()) for v in profiles.values()):
            raise UsageError(f"{where}: {SIGNATURE}.profiles must map each part to role -> mass; {fix}")
        heads = data["heads"]
        if not all(isinstance(v, list) and all(isinstance(h, str) for h in v) for v in heads.values()):
            raise UsageError(f"{where}: {SIGNATURE}.heads must map each part to a list of head names; {fix}")
        return cls(
            tuple(data["parts"]),
            tuple(data["edges"]),
            data["basis"],
            None if data["relations"] is None else tuple(data["relations"]),
            tuple((part, tuple(v)) for part, v in heads.items()),
            tuple((part, tuple(v.items())) for part, v in profiles.items()),
        )


# ---- the canonical form ----------------------------------------------------------------------


def initial_colour(node, roles: dict) -> tuple:
    """What relabelling heads within a layer leaves unchanged: where the node reads and writes along
    the residual stream (models.graph.stage: its kind and layer; so parts sort in the order the
    signal flows) and, for a head, its measured role."""
    from models.components import Head
    from models.graph import Logits, stage

    if isinstance(node, Logits):
        return (LAST, "")
    return (stage(node, LAST), roles.get(node, UNNAMED) if isinstance(node, Head) else "")


def ranks(colours: dict) -> dict:
    """Each node's colour as its rank among the sorted distinct colours: values only, no node order."""
    order = {colour: i for i, colour in enumerate(sorted(set(colours.values())))}
    return {node: order[colour] for node, colour in colours.items()}


def refine(nodes: set, edges: list, roles: dict) -> dict:
    """node -> final colour rank (colour refinement until the number of classes stops growing)."""
    colour = ranks({node: initial_colour(node, roles) for node in nodes})
    while True:
        seen = {node: (colour[node], [], []) for node in nodes}
        for sender, receiver, port, position in edges:
            seen[sender][1].append((port, position, colour[receiver]))
            seen[receiver][2].append((port, position, colour[sender]))
        new = ranks({node: (c, tuple(sorted(out)), tuple(sorted(into))) for node, (c, out, into) in seen.items()})
        if len(set(new.values())) == len(set(colour.values())):
            return new
        colour = new


def head_words(layer: int, role: str) -> str:
    if role == UNNAMED:
        return f"L{layer} head of unnamed role"
    if role.endswith("head"):
        return f"L{layer} {role}"
    return f"L{layer} head that {role}" if role.startswith("attends") else f"L{layer} head: {role}"


def part_names(nodes: set, colour: dict, roles: dict) -> dict:
    """colour rank -> the part's name in words; classes that share a layer and role are told apart
    by a letter in the order of their ranks (themselves invariant)."""
    from models.components import Head

    words = {}
    for node in nodes:
        words[colour[node]] = head_words(node.layer, roles.get(node, UNNAMED)) if isinstance(node, Head) else str(node)
    same = Counter(words.values())
    letters = Counter()
    named = {}
    for rank in sorted(words):
        text = words[rank]
        if same[text] > 1:
            text = f"{text} ({chr(ord('a') + letters[words[rank]])})"
            letters[words[rank]] += 1
        named[rank] = text
    return named


def mechanism_signature(edges, roles: dict, heads=(), basis: str = "") -> MechanismSignature:
    """The signature of a circuit: `edges` models.graph.Edge (sender -> receiver input at an optional
    position); `roles` Head -> measured role (head_roles); `heads` circuit heads with no edge (a
    one-block head circuit, whose heads write to the logits only)."""
    from models.components import Head

    flat = [(e.sender, e.receiver.node, e.receiver.port, -1 if e.position is None else e.position) for e in edges]
    nodes = {n for s, r, _, _ in flat for n in (s, r)} | set(heads)
    colour = refine(nodes, flat, roles)
    names = part_names(nodes, colour, roles)
    members = Counter(colour[n] for n in nodes)
    parts = tuple(names[r] + (f" x{members[r]}" if members[r] > 1 else "") for r in sorted(members))
    counted = Counter((colour[s], port, position, colour[r]) for s, r, port, position in flat)
    lines = []
    for (s, port, position, r), count in sorted(counted.items()):
        target = names[r] if port == "in" else f"{names[r]}.{port}"  # MLPs and the logits have one input
        where = "" if position < 0 else f" @p{position}"
        lines.append(f"{names[s]} -> {target}{where}" + (f" x{count}" if count > 1 else ""))
    by_part = {}
    for node in nodes:
        if isinstance(node, Head):
            by_part.setdefault(names[colour[node]], []).append(node)
    heads_of = tuple((part, tuple(str(h) for h in sorted(hs))) for part, hs in sorted(by_part.items()))
    return MechanismSignature(parts, tuple(lines), basis, None, heads_of)


def relabelled_heads(signatures) -> bool:
    """Equal signatures whose runs use different heads for some part: one mechanism, heads relabelled."""
    maps = {s.heads for s in signatures}
    return len(set(signatures)) == 1 and len(maps) > 1


# ---- from a traced circuit ---------------------------------------------------------------------

EDGE_BASIS, HEAD_BASIS = "edge circuit", "head circuit"


@timed("signature")
def edge_signature(
    model: Model, pairs, graph, roles: RoleMasses | None = None, circuit=None
) -> MechanismSignature | None:
    """The signature of the part graph that carries the mechanism (`carrying_parts`), its heads'
    roles read from the exact oracle's smallest edge circuit on `pairs` (`roles`: role_masses,
    None measures them on `pairs`; `circuit`: the probes.circuits.named.EdgeCircuit already
    measured, None measures it, the oracle alone); None when no circuit smaller than the whole
    graph reaches the target, or no path from the embedding to the logits costs anything."""
    from models.components import Head
    from probes.circuits.named import edge_circuit

    found = circuit if circuit is not None else edge_circuit(model, pairs, graph, compare_methods=False)
    if found.circuit.edges is None:
        return None
    measured = role_masses(model, pairs) if roles is None else roles
    read = read_at_scored(found.circuit.edges)
    heads = {n for e in graph.edges for n in (e.sender, e.receiver.node) if isinstance(n, Head)}
    head_roles = {h: measured.role(h, h in read) for h in heads}
    return with_profiles(carrying_parts(model, pairs, graph, head_roles, found.oracle), measured, read)


def carrying_parts(model: Model, pairs, graph, roles: dict, oracle) -> MechanismSignature | None:
    """The mechanism as a graph of parts, each part a layer's heads of one measured role (or an MLP,
    the embedding, the logits), whatever the number of heads that play it. A part edge is every
    graph edge from one part into one input of another; its cost is the share of the gap lost when
    all of them are knocked out together (patched to the counterfactual, the oracle's direction).
    Kept: the main path from the embedding to the logits (the one whose weakest part edge costs the
    most), and every part edge that costs at least as much as that weakest edge and lies on a path
    from the embedding to the logits through kept edges. No share is tuned: the bar is the main
    path's own. Why coarse: the full edge circuit's small edges, and how many heads share a part's
    work, differ between seeds of one mechanism (3 seeds of tests/plugins/census_tasks.py's
    neighbour gave 3 signatures each on attn-only-2x2 and block-2). A part's heads are those whose
    member edges in kept part edges move the gap by REFERENCE_NOISE alone, summed (a head with
    several smaller edges is kept too), ordered by that sum, largest first (never by index). The embedding's
    edges into one part are one part edge whatever the input (q, k or v): which input carries the
    tokens and which the positions is split differently by seeds of one mechanism (markcopy's
    layer-0 head read the embedding most through its values in two seeds, its keys in the third),
    and composition, which the inputs name, is between components, not from the embedding."""
    from models.components import Head
    from models.graph import Embed, Logits
    from probes.circuits.methods.scores import REFERENCE_NOISE

    members, names = part_edges(graph, roles, oracle)
    keys = sorted(members)
    cost = part_edge_costs(model, pairs, graph, members, keys)
    kept = carried(keys, cost, initial_colour(Embed(), roles), initial_colour(Logits(), roles))
    if kept is None:
        return None
    nodes: dict = {p: set() for k in kept for p in (k[0], k[3])}
    carried_by: dict = {}  # node -> the summed share alone of its member edges in kept part edges
    for k in kept:
        for edge, alone in members[k]:
            for part, node in ((k[0], edge.sender), (k[3], edge.receiver.node)):
                carried_by[part, node] = carried_by.get((part, node), 0.0) + alone
    for (part, node), total in carried_by.items():
        if total >= REFERENCE_NOISE:
            nodes[part].add(node)
    lines = []
    for sender, port, position, receiver in kept:
        target = names[receiver] if port == "in" else f"{names[receiver]}.{port}"
        lines.append(f"{names[sender]} -> {target}" + ("" if position < 0 else f" @p{position}"))
    heads_of = tuple(
        (names[p], tuple(str(h) for h in sorted(ns, key=lambda h: (-carried_by[p, h], h)) if isinstance(h, Head)))
        for p, ns in sorted(nodes.items())
        if any(isinstance(h, Head) for h in ns)
    )
    return MechanismSignature(tuple(names[p] for p in sorted(nodes)), tuple(lines), EDGE_BASIS, None, heads_of)


def part_edges(graph, roles: dict, oracle) -> tuple[dict, dict]:
    """The graph's edges grouped into part edges, (sender part, input, position, receiver part) ->
    [(edge, its share of the gap alone)], a part being a node's `initial_colour`; and each part's
    name in words (input "in" for every edge from the embedding: `carrying_parts` says why)."""
    from collections import defaultdict

    from models.components import Head
    from models.graph import Embed

    def part(node):
        return initial_colour(node, roles)

    members, names = defaultdict(list), {}
    for edge, alone in zip(graph.edges, oracle.normalised().tolist()):
        for node in (edge.sender, edge.receiver.node):
            names[part(node)] = head_words(node.layer, roles[node]) if isinstance(node, Head) else str(node)
        port = "in" if isinstance(edge.sender, Embed) else edge.receiver.port
        key = (part(edge.sender), port, -1 if edge.position is None else edge.position)
        members[(*key, part(edge.receiver.node))].append((edge, alone))
    return members, names


def part_edge_costs(model: Model, pairs, graph, members: dict, keys: list) -> dict:
    """Each part edge of `keys` -> the share of the gap lost when all its member edges are patched
    to the counterfactual together (the oracle's direction)."""
    from probes.circuits.oracle import Direction, patched_outcomes, record_runs

    runs = record_runs(model, pairs, graph, Direction.NOISE)
    outcomes = patched_outcomes(model, pairs, graph, [frozenset(e for e, _ in members[k]) for k in keys], runs)
    gap = runs.other.outcome.metric - runs.base.outcome.metric
    return {k: (o.metric - runs.base.outcome.metric) / gap for k, o in zip(keys, outcomes)}


def carried(keys: list, cost: dict, start, end) -> list | None:
    """The part edges `keys` ((sender part, input, position, receiver part), sorted) that carry the
    mechanism by `carrying_parts`' rule: each costing at least the weakest edge of the main path
    from `start` to `end`, on a path between them through kept edges; None when no such path costs
    anything."""
    # widest path by stage, latest first: every part edge runs from a lower stage to a higher one
    widest = {end: math.inf}
    for k in sorted(keys, key=lambda k: k[0], reverse=True):
        if k[3] in widest:
            widest[k[0]] = max(widest.get(k[0], -math.inf), min(cost[k], widest[k[3]]))
    bar = widest.get(start, -math.inf)
    if not bar > 0:
        return None
    return on_paths([k for k in keys if cost[k] >= bar], start, end)


def on_paths(kept: list, start, end) -> list:
    """`kept` without the edges off every path from `start` to `end` through kept edges."""
    while True:
        senders, receivers = {k[0] for k in kept} | {end}, {k[3] for k in kept} | {start}
        on_path = [k for k in kept if k[3] in senders and k[0] in receivers]
        if len(on_path) == len(kept):
            return sorted(kept)
        kept = on_path


@timed("signature")
def summary_signature(summary, roles: RoleMasses) -> MechanismSignature | None:
    """The signature of a head circuit (probes.circuits.labels.CircuitSummary): its heads, and each
    named path as an edge into its receiver's q, k or v (a one-block circuit has heads alone: no
    head composes with another). A head that feeds no other head of the circuit writes to the
    logits, so it is read at the scored positions. None when no circuit was traced."""
    from models.components import Head
    from models.graph import Edge, Input
    from probes.settings import DEFAULT

    heads = list(dict.fromkeys(Head.parse(node.split("@")[0]) for node in summary.nodes))
    if not heads:
        return None
    paths = [p for p in summary.paths or ((summary.edge,) if summary.edge else ()) if p.strength >= DEFAULT.path_claim]
    edges = [Edge(Head.parse(p.sender), Input(Head.parse(p.receiver), p.component)) for p in paths]
    sinks = set(heads) - {e.sender for e in edges}
    signature = mechanism_signature(edges, circuit_roles(edges, roles, heads, sinks), heads, basis=HEAD_BASIS)
    return with_profiles(signature, roles, read_at_scored(edges, sinks))


def with_profiles(signature: MechanismSignature | None, measured: RoleMasses, read) -> MechanismSignature | None:
    """`signature` with each head part's profile: its heads' mean mass on each role they compete
    for (RoleMasses.profile; `read` the nodes read at the scored positions) and, for a head read
    there, on each role per group ('(crossed) attends the adjective role'), to 3 decimals."""
    import dataclasses

    from models.components import Head

    if signature is None:
        return None
    profiles = []
    for part, names in signature.heads:
        heads = [Head.parse(name) for name in names]
        each = [
            {r: m for r, (m, _) in measured.profile(h, h in read).masses.items()}
            | (measured.by_group(h) if h in read else {})
            for h in heads
        ]
        roles = sorted({r for masses in each for r in masses})
        mean = {r: round(sum(m.get(r, 0.0) for m in each) / len(each), 3) for r in roles}
        profiles.append((part, tuple(mean.items())))
    return dataclasses.replace(signature, profiles=tuple(profiles))
