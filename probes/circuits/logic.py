"""What a circuit's components are to each other, derived from measurement on the exact oracle, in
any layer: minimal sufficient sets of components, the relations they imply, and the paths from the
embeddings to the logits through heads' q/k/v inputs and MLPs.

A component is a head or an MLP (a sender of models/graph.py other than the embeddings). Keeping a
set S of components: every edge whose sender is outside S (and is not the embeddings) gets its
counterfactual write, so each component outside S writes what it writes on the counterfactual run,
to every reader. f(S) is on the gap scale (0 = the counterfactual run, 1 = the clean run); f(all) = 1
by construction. S suffices when f(S) >= SUFFICES; it is minimal when no proper subset suffices.

Relations between the circuit's members (the heads and MLPs that send its edges) are not read
off the minimal sets: probes.circuits.subsets measures f on subsets of the members (each knocked out
by its own output, everything else kept), probes.circuits.interactions their contributions and
interactions, probes.circuits.relation_classes and .rows the classes, each with its rule.
Why by hand: no library computes minimal sufficient sets over a TransformerLens 4 model. A set of
components is knocked out at the components themselves (their hook_z / hook_mlp_out given the
counterfactual run's values, many sets as replicas of one forward): the same numbers as patching
every out-edge on the edge oracle (tested), without its per-edge bookkeeping, which made 2^8 sets
cost seconds per set on a planted model.

Paths: every path of the circuit's edge DAG from the embeddings to the logits. A path's effect is
f of its own edges plus the circuit's other edges from the embeddings into its first component
(that head's other inputs), every other edge given its counterfactual write. Paths that come to one
edge set that way (a head read through its keys and through its values) are one path, with both
readings of the first head.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from models.graph import Edge, Embed, Graph, Logits
from models import Model
from probes.circuits.components import Component, KnockOut, ordered
from probes.circuits.interactions import Interactions, interactions
from probes.circuits.methods.joint import SetFaithfulness
from probes.circuits.oracle import Direction, Runs, record_runs
from probes.circuits.relation_classes import Relation, relations
from probes.circuits.subsets import Subsets, budget_pairs
from tasks.data import Batch

SUFFICES = 0.9  # a set of components keeping this share of the gap suffices
NEEDED = 0.1  # a share below this is no contribution (a partial backup carries at least this)
EXHAUSTIVE = 8  # up to this many components every subset is measured (2^8 sets, batched; 2^10 took 35-47 s
# on block-2 under load, the greedy search below 5-10x less)
PATH_CARRIES = 0.5  # a path carries the circuit when it keeps this share of the gap on its own
MAX_PATHS = 64  # paths measured per circuit, the strongest by their weakest edge's effect alone


@dataclass(frozen=True)
class Path:
    edges: tuple[Edge, ...]  # embed -> ... -> logits, in order
    effect: float  # f of the path's own edges with its first component's other embedding inputs
    readings: tuple[Edge, ...] = ()  # the first edges of the paths that came to the same edge set

    @property
    def components(self) -> tuple[Component, ...]:
        # Only the first edge leaves the embedding, so the filter drops nothing; it narrows the type.
        return tuple(e.sender for e in self.edges[1:] if not isinstance(e.sender, Embed))


@dataclass(frozen=True)
class Logic:
    components: tuple[Component, ...]  # every head and MLP considered
    minimal_sets: tuple[frozenset, ...]  # minimal sufficient sets of components
    exhaustive: bool  # every subset measured (else the bounded search)
    limit: int  # the most components searched exhaustively
    sets_measured: int
    relations: tuple[Relation, ...]
    paths: tuple[Path, ...]  # strongest first
    pairs: int
    interactions: Interactions | None = None  # of the circuit's members

    @property
    def necessary(self) -> frozenset:
        return frozenset.intersection(*self.minimal_sets) if self.minimal_sets else frozenset()

    @property
    def carrying_paths(self) -> tuple[Path, ...]:
        return tuple(p for p in self.paths if p.effect >= PATH_CARRIES)


def every_subset(components: tuple[Component, ...]) -> list[frozenset]:
    return [frozenset(c) for k in range(len(components) + 1) for c in itertools.combinations(components, k)]


def greedy_minimal(values: dict, f, start: frozenset) -> frozenset:
    """From a sufficient `start`, drop the component whose removal keeps f highest while the rest
    suffices, until none can go: a set no single removal keeps sufficient."""
    current = start
    while current:
        trial = [current - {c} for c in ordered(current)]
        missing = [t for t in trial if t not in values]
        values.update(zip(missing, f(missing)))
        kept = [t for t in trial if values[t] >= SUFFICES]
        if not kept:
            return current
        current = max(kept, key=lambda t: (values[t], sorted(map(str, t))))
    return current


def bounded_sets(values: dict, f, components: tuple[Component, ...]) -> tuple[frozenset, ...]:
    """Beyond EXHAUSTIVE: a greedy minimal set from the whole, then one from the whole without each
    member of every set found (where that still suffices), so alternatives are found as an OR."""
    whole = frozenset(components)
    values.setdefault(whole, f([whole])[0])
    found, tried, queue = [], set(), [whole]
    while queue:
        start = queue.pop(0)
        if start in tried or values.get(start, 0.0) < SUFFICES:
            continue
        tried.add(start)
        found.append(greedy_minimal(values, f, start))
        common = frozenset.intersection(*found)
        starts = [whole - {member} for member in ordered(found[-1])]
        starts.append(whole - (frozenset().union(*found) - common))  # without every branch found so far
        missing = [s for s in starts if s not in values]
        values.update(zip(missing, f(missing)))
        queue += starts
    return tuple(dict.fromkeys(s for s in found if not any(t < s for t in found)))


def minimal(values: dict[frozenset, float]) -> tuple[frozenset, ...]:
    """Sufficient sets none of whose measured proper subsets suffices."""
    sufficient = [s for s, v in values.items() if v >= SUFFICES]
    return tuple(s for s in sufficient if not any(t < s for t in sufficient))


def linking_edges(graph: Graph, circuit: frozenset) -> frozenset[Edge]:
    """The circuit's edges, and every graph edge touching a component outside it (a backup the ranked
    circuit left out: how it is wired is not measured, so the graph's wiring stands in)."""
    inside = {e.sender for e in circuit} | {e.receiver.node for e in circuit}
    return frozenset(circuit) | frozenset(
        e
        for e in graph.edges
        if not isinstance(e.sender, Embed)
        and not isinstance(e.receiver.node, Logits)
        and (e.sender not in inside or e.receiver.node not in inside)
    )


def circuit_paths(graph: Graph, circuit: frozenset, single: dict[Edge, float]) -> list[tuple[Edge, ...]]:
    """Every embed -> logits path of the circuit's edges (positions ignored), the MAX_PATHS strongest
    by their weakest edge's |effect| alone."""
    out_of: dict = {}
    for edge in circuit:
        out_of.setdefault(edge.sender, []).append(edge)
    found: list[tuple[Edge, ...]] = []

    def walk(node, trail: tuple[Edge, ...]):
        for edge in sorted(out_of.get(node, ()), key=str):
            receiver = edge.receiver.node
            if isinstance(receiver, Logits):
                found.append(trail + (edge,))
            elif len(found) < 50 * MAX_PATHS:
                walk(receiver, trail + (edge,))

    walk(Embed(), ())
    found.sort(key=lambda p: (-min(abs(single.get(e, 0.0)) for e in p), len(p), list(map(str, p))))
    return found[:MAX_PATHS]


def logic(
    model: Model,
    batch: Batch,
    graph: Graph,
    circuit: frozenset,
    single,
    runs: Runs | None = None,
    components: tuple[Component, ...] | None = None,
    wide: Batch | None = None,
) -> Logic:
    """`single`: each edge's share of the gap knocked out alone (EdgeEffects.normalised()).
    `components`: those to relate (default: every head and MLP of the graph, so a backup the ranked
    circuit left out is still seen). `wide`: the pairs the relations between the circuit's members
    are measured on (subsets.budget_pairs of them; default `batch`); the minimal sets and the paths
    are measured on `batch`, as the circuit was found."""
    runs = runs or record_runs(model, batch, graph, Direction.NOISE)
    f = SetFaithfulness(model, batch, graph, runs)
    components = ordered(components or [s for s in graph.senders if not isinstance(s, Embed)])
    knock_out = KnockOut(model, batch, runs, components)
    exhaustive = len(components) <= EXHAUSTIVE
    if exhaustive:
        candidates = every_subset(components)
        values = dict(zip(candidates, knock_out(candidates)))
        sets = minimal(values)
    else:
        values = {}
        sets = bounded_sets(values, knock_out, components)
    members = ordered({e.sender for e in circuit if not isinstance(e.sender, Embed)})
    subsets = relation_subsets(
        model, batch if wide is None else wide, runs if wide is None else None, members, len(batch)
    )
    found = own_paths(graph, frozenset(circuit), dict(zip(graph.edges, single.tolist())), f)
    return Logic(
        components,
        sets,
        exhaustive,
        EXHAUSTIVE,
        knock_out.measured + f.measured + (subsets.measured if subsets else 0),
        relations(subsets, linking_edges(graph, frozenset(circuit))) if subsets else (),
        found,
        len(batch),
        interactions(subsets) if subsets else None,
    )


def relation_subsets(model: Model, batch: Batch, runs: Runs | None, members, least: int) -> Subsets | None:
    """f on subsets of the members over `batch`'s pairs within subsets.TOKEN_BUDGET, at least `least`
    of them (`runs`: those of `batch`, or None; not used when the budget takes fewer pairs)."""
    if not members:
        return None
    pairs = budget_pairs(batch, members, least)
    return Subsets(model, pairs, runs if len(pairs) == len(batch) else None, members)


def own_paths(graph: Graph, circuit: frozenset, share: dict, f) -> tuple[Path, ...]:
    """Each path measured on its own edges and its first component's other embedding inputs; paths
    that come to one edge set are one, with each first edge a reading (strongest first)."""
    by_set: dict[frozenset, list] = {}
    for p in circuit_paths(graph, circuit, share):
        first = p[0].receiver.node
        raw = frozenset(e for e in circuit if isinstance(e.sender, Embed) and e.receiver.node == first)
        by_set.setdefault(frozenset(p) | raw, []).append(p)
    sets = list(by_set)
    effects = f(sets) if sets else []
    found = [
        Path(by_set[s][0], v, tuple(dict.fromkeys(p[0] for p in by_set[s])) if len(by_set[s]) > 1 else ())
        for s, v in zip(sets, effects)
    ]
    return tuple(sorted(found, key=lambda p: (-p.effect, len(p.edges))))
