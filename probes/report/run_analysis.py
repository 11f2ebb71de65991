"""The report's circuit part, measured: for one run, attention at the scored positions, the head
ablation sweeps, activation patching, the circuit search, path patching between the circuit's
heads and composition scores, each on the basis its RunContext fixes (probes.report.parts); and a
run's circuit facts at each of its weight snapshots by the same rule (snapshot_circuits)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from models.components import Head
from models.spec import Attention, NormPlace
from models import Model
from probes.circuits.labels import summarise
from probes.circuits.mechanism_timeline import SnapshotCircuit
from probes.circuits.search import Circuit, search_circuit, where

if TYPE_CHECKING:
    from models.spec import ModelSpec
    from probes.ablation import AblationResult
    from probes.accuracy import RunAccuracy
    from probes.attention import PairAttention, RoleView, ScoredAttention
    from probes.circuits.signature import MechanismSignature
    from probes.composition import Composition
    from probes.patching import ActivationPatching


@dataclass(frozen=True)
class Basis:
    """The examples the run's numbers were measured on."""

    heldout: int  # examples in the held-out split
    ablation: int  # held-out examples every ablation number is measured on
    train: int  # examples in the training split
    reference: int  # training examples mean and resample ablation average over
    pairs: int  # held-out counterfactual pairs for patching, path patching and the search


@dataclass(frozen=True)
class NodeView:
    """Where patching shows a circuit head matters, and where it attends from there."""

    node: str  # the head and its kept positions (probes.circuits.search.where)
    matters: list[tuple[int, float]]  # (position, share of the gap its output restores there), strongest first
    attention: dict[int, dict[str, list]]  # position -> group (and "all") -> attention row over keys


@dataclass(frozen=True)
class RunAnalysis:
    """Everything the circuit part shows for one run. Uniform-attention runs (a bag of words) get
    their accuracy and shuffle test only: there is no attention pattern to trace."""

    model_name: str
    seed: int
    path: str
    spec: ModelSpec
    accuracy: RunAccuracy
    basis: Basis
    note: str = ""  # why no circuit was traced, if none was
    attention: ScoredAttention | None = None  # ablation rows
    pair: PairAttention | None = None
    ablations: dict | None = None  # Ablation -> list[AblationResult] (head sweep, ablation rows)
    mlp_ablations: dict | None = None  # Ablation -> list[AblationResult] (each MLP alone, ablation rows)
    patching: ActivationPatching | None = None  # pairs
    paths: list | None = None  # PathPatch, every head pair, all positions
    path_positions: list | None = None  # PathPatch, circuit head pairs, one position at a time
    composition: Composition | None = None
    circuit: Circuit | None = None
    circuit_ablation: AblationResult | None = None  # the circuit's heads mean-ablated (ablation rows)
    node_views: list | None = None  # NodeView per circuit node
    labels: list | None = None  # key position labels
    places: dict | None = None  # probes.attention.role_places: None where the layout is fixed
    vocabulary: list | None = None  # token strings, for naming predictions
    roles: RoleView | None = None  # for a task that names positions by role
    figure: str | None = None  # its figure, relative to the report folder
    mechanism: MechanismSignature | None = None  # the circuit up to relabelled heads (probes.circuits.signature)


def routes(paths: list, circuit: Circuit, floor: float) -> list:
    """Path patches (sender at all positions) worth resolving by position: between circuit heads,
    recovering at least `floor` of the gap, or the best input of each circuit pair otherwise."""
    heads = set(circuit.kept)
    inside = [p for p in paths if set(p.sender) <= heads and set(p.receiver) <= heads]
    best = {}
    for p in inside:
        key = (p.sender, p.receiver)
        if key not in best or abs(p.recovered) > abs(best[key].recovered):
            best[key] = p
    return [p for p in inside if abs(p.recovered) >= floor or best[(p.sender, p.receiver)] is p]


def head_effect(patching, layer: int, head: int, positions) -> list[tuple[int, float]]:
    """(position, share of the gap restored by patching the head's output there), strongest first."""
    effect = patching.recovered(patching.head_out[layer, :, head])
    return sorted(((p, float(effect[p])) for p in positions), key=lambda item: -abs(item[1]))


def route_positions(patching, sender: Head, batch, count: int) -> list[int]:
    """The sender's `count` live positions where restoring its output matters most: a task scored
    at many positions (induction) would otherwise need one path patch per position."""
    from probes.patching import live_positions

    layer, head = sender
    return sorted(p for p, _ in head_effect(patching, layer, head, live_positions(batch))[:count])


def node_view(model: Model, pairs, patching, head: Head, kept: tuple[int, ...] | None, threshold: float) -> NodeView:
    """The circuit head's positions (its `kept` ones, else every live one) where patching its output
    restores at least `threshold` of the gap, at most three; the attention rows there."""
    from probes.attention import attention_from
    from probes.patching import live_positions

    positions = kept if kept is not None else live_positions(pairs)
    matters = [(p, r) for p, r in head_effect(patching, head.layer, head.head, positions) if abs(r) >= threshold][:3]
    attention = {}
    for position, _ in matters:
        rows = attention_from(model, pairs, position)
        attention[position] = {g: rows[g][head.layer, head.head].tolist() for g in rows}
    return NodeView(where(head, kept), matters, attention)


def basis(context) -> Basis:
    return Basis(
        len(context.heldout),
        len(context.sample),
        len(context.batches["train"]),
        len(context.reference),
        len(context.pairs),
    )


def untraced_reason(spec) -> str | None:
    """Why the circuit of a model of `spec` is not traced, or None where it is."""
    if spec.attention == Attention.UNIFORM:
        return "uniform attention: a bag of words has no circuit to trace"
    if spec.attention == Attention.NONE:
        return "no attention: each position reads only its own token, no circuit to trace"
    return None


def unpathed_reason(spec) -> str | None:
    """Why the paths between a traced circuit's heads are not measured (its heads are: the head
    circuit ablates nodes, which any block allows), or None where they are (or one block has none)."""
    if spec.n_layers == 1:
        return None
    if spec.norm_place == NormPlace.POST:
        # Path patching and the edge oracle recompute a receiver's input as its block's pre-norm
        # LayerNorm of the residual and read the MLP's input at hook_resid_mid, which TL 4's block
        # bridge aliases to ln2.hook_in: a post-norm block calls ln2 after its MLP (or never, attention
        # only), so that hook holds another tensor or does not fire.
        return "post-norm blocks: the heads traced, not the paths between them (path patching needs pre-norm blocks)"
    if not spec.residual:
        # Path patching sends a head's write to later layers through the residual stream; without it
        # a write reaches the next block only.
        return (
            "attention replaces the residual stream: the heads traced, not the paths between them "
            "(path patching needs a residual stream)"
        )
    return None


def untraceable(context) -> str | None:
    """Why the run's circuit is not traced at all (None: it is)."""
    if (why := untraced_reason(context.spec)) is not None:
        return why
    return None if context.heldout.counterfactual is not None else "the task declares no counterfactual pairs"


def small_gap(gap: float, settings) -> str:
    """The note of a run whose pairs the model barely tells apart (no circuit traced)."""
    return (
        f"clean minus counterfactual metric is only {gap:+.2f} (below {settings.min_gap:g} in size): the model "
        "barely tells the pairs apart, so no share of that gap means much"
    )


def position_names(context) -> dict:
    """RunAnalysis's `labels` and `places` for the held-out split: a position is named by its
    number where the layout is fixed, by the role every example holds there where roles move."""
    from probes.attention import position_labels, role_places

    places = role_places(context.heldout)
    return {"labels": position_labels(context.heldout.inputs, context.vocabulary, places), "places": places}


def analyse_run(context) -> RunAnalysis:
    """The circuit part's measure: the run's RunAnalysis, with its figure drawn under the report."""
    from probes.ablation import ABLATION_METHODS
    from probes.ablation_sweep import head_ablation_sweep
    from probes.attention import pair_attention, patterns, role_view, scored_attention
    from probes.circuits.roles import role_masses
    from probes.patching import activation_patching

    run, settings = context.run, context.settings
    base = dict(
        model_name=run.model_name,
        seed=run.seed,
        path=str(run.path),
        spec=context.spec,
        accuracy=context.accuracy,
        basis=basis(context),
    )
    if (why := untraceable(context)) is not None:
        return RunAnalysis(**base, note=why)
    model, sample, reference = context.model, context.sample, context.reference
    ablations = {
        method: head_ablation_sweep(model, sample, method, run.seed, reference, context.clean)
        for method in ABLATION_METHODS
    }
    patching = activation_patching(model, context.pairs)
    attention = patterns(model, sample.inputs)  # the sample's, read by three measurements below
    analysis = RunAnalysis(
        **base,
        attention=scored_attention(model, sample, context.vocabulary, attention),
        pair=pair_attention(model, context.heldout, 0, context.vocabulary),
        ablations=ablations,
        mlp_ablations=context.mlp_ablations,
        patching=patching,
        **position_names(context),
        vocabulary=context.vocabulary,
        roles=role_view(model, sample, context.pairs, patching, attention),
    )
    gap = patching.clean.metric - patching.corrupt.metric
    if not settings.traces(gap):
        analysis = dataclasses.replace(analysis, note=small_gap(gap, settings))
    else:
        traced = trace_circuit(context, patching)
        analysis = dataclasses.replace(analysis, **traced, note=unpathed_reason(context.spec) or "")
        roles = role_masses(model, sample, attention=attention)
        analysis = dataclasses.replace(analysis, mechanism=run_mechanism(context, analysis, roles=roles))
    return dataclasses.replace(analysis, figure=draw_figure(analysis, context.out))


def run_mechanism(context, analysis, edges=None, roles=None):
    """The signature of the run's circuit (probes.circuits.signature), roles measured on the
    ablation rows: of the exact oracle's smallest edge circuit where the edge part traces one
    (multi-block runs; `edges` the EdgeCircuit measured on the weights now in the model, default
    the context's), else of the head circuit (one-block runs, or no edge circuit below the whole
    graph); None when neither was traced. `roles`: role_masses of these weights, if the caller has them."""
    from probes.circuits.roles import role_masses
    from probes.circuits.signature import edge_signature, summary_signature
    from probes.report.edge_part import traceable

    roles = role_masses(context.model, context.sample) if roles is None else roles
    if traceable(context.spec):
        found = edges if edges is not None else context.edge_circuit
        if context.settings.traces(found.oracle.gap) and found.circuit.edges is not None:
            return edge_signature(context.model, context.pairs, context.edge_graph, roles, circuit=found)
    return summary_signature(summarise(analysis, ""), roles) if analysis.circuit is not None else None


def trace_circuit(context, patching) -> dict:
    """The RunAnalysis fields of the circuit: search, paths between its heads, where its heads
    matter, composition, and the circuit's heads mean-ablated on the ablation rows."""
    from probes.ablation import Ablation, ablate
    from probes.composition import composition_scores

    model, pairs, settings, seed = context.model, context.pairs, context.settings, context.run.seed
    measured = circuit_paths_measured(model, pairs, context.reference, patching, settings)
    circuit = measured["circuit"]
    return dict(
        **measured,
        composition=composition_scores(model, seed=seed) if model.cfg.n_layers > 1 else None,
        circuit_ablation=ablate(model, context.sample, circuit.heads, Ablation.MEAN, seed, context.reference),
        node_views=[
            node_view(model, pairs, patching, head, kept, settings.matters) for head, kept in circuit.kept.items()
        ],
    )


def circuit_paths_measured(model: Model, pairs, reference, patching, settings) -> dict:
    """The RunAnalysis fields a circuit's label is named from (probes.circuits.labels): the search,
    every head pair's path patch with the sender at all positions, and the routes among them
    resolved one sender position at a time (None where the stream allows no path patching)."""
    from models.bridge import stream_is_a_sum
    from probes.circuits.path_patching import PathTarget, path_patch_many, path_runs, path_sweep

    circuit = search_circuit(model, pairs, reference, patching, settings.circuit_target)
    if not stream_is_a_sum(model) and model.cfg.n_layers > 1:  # unpathed_reason: the analysis's note says why
        return dict(circuit=circuit, paths=None, path_positions=None)
    runs = path_runs(model, pairs) if model.cfg.n_layers > 1 else None  # both path patchings share them
    paths = path_sweep(model, pairs, runs) if runs else []
    targets = [
        PathTarget(p.sender, (position,), p.receiver, p.component)
        for p in routes(paths, circuit, settings.route_floor)
        for position in route_positions(patching, p.sender[0], pairs, settings.route_positions)
    ]
    return dict(
        circuit=circuit, paths=paths, path_positions=path_patch_many(model, pairs, targets, runs) if targets else []
    )


def draw_figure(analysis: RunAnalysis, out) -> str | None:
    """Draw the run's figure into out/figures, here in the worker; its path relative to `out` (no
    figure without an `out`)."""
    from pathlib import Path

    from probes.report.figures import run_figure, save

    if out is None or analysis.attention is None or analysis.patching is None:
        return None
    name = f"figures/{analysis.model_name}-seed{analysis.seed}.png"
    save(run_figure(analysis), Path(out) / name)
    return name


# Snapshot circuits: a run's circuit facts at each of its weight snapshots, then at its final weights, measured by
# the rule `circuit.json`'s are (probes.report.run_analysis): the circuit search, every head pair's
# path patch and its routes resolved by position, on the run's counterfactual pairs.
#
# Why this classifier and not "whichever candidate circuit's edge effect is larger": one rule at
# every step means the final entry reproduces `circuit.json`'s label exactly (a check the census
# makes, true by construction), so an early step that names another mechanism shows the mechanism
# changing, never two classifiers disagreeing; and it needs no candidate list, which would have to
# come from the final labels. The price is strictness: a step whose own clean - counterfactual gap is
# below ReportSettings.min_gap names no circuit (as a final run with that gap would), so a mechanism
# still forming counts as not told. Shares are of the step's own gap: another step's gap would mix in
# how much the model has learned by then.


def snapshot_circuits(context, progress: bool = False) -> list[SnapshotCircuit]:
    """`context` (probes.report.parts.RunContext) of a run with weight snapshots: one entry per
    snapshot before its last step, then its final weights. The context's model is restored after."""
    from tqdm.auto import tqdm

    from models.checkpoint import WEIGHTS, load_weights
    from common.jsonfiles import sha256_file
    from probes.dynamics import SNAPSHOT_FIX, snapshot_files

    run, model = context.run, context.model
    final = int(run.metrics["steps"])
    own = {name: value.clone() for name, value in model.state_dict().items()}
    steps = [(step, path) for step, path in snapshot_files(run.path) if step < final] + [(final, run.path / WEIGHTS)]
    entries = []
    try:
        for step, path in tqdm(
            steps, desc=f"{run.model_name} seed {run.seed} snapshots", disable=not progress, leave=False
        ):
            if step == final:
                model.load_state_dict(own)
            else:
                load_weights(model, path, fix=SNAPSHOT_FIX)
            model.eval()
            gap, summary = snapshot_summary(context, step)
            name = path.relative_to(run.path).as_posix()
            entries.append(SnapshotCircuit(step, name, sha256_file(path), gap, summary))
    finally:
        model.load_state_dict(own)
    return entries


def snapshot_summary(context, step: int):
    """(gap, CircuitSummary) of the weights now in `context.model`: analyse_run's circuit facts,
    without the parts no label reads (ablation sweeps, attention, composition)."""
    from probes.ablation import reference_activations, training_reference
    from probes.accuracy import RunAccuracy, split_accuracy
    from probes.patching import activation_patching
    from tasks.evaluate import score_split

    run, model, pairs, settings = context.run, context.model, context.pairs, context.settings
    scored, sample = score_split(model, context.heldout)
    accuracy = RunAccuracy(
        run.model_name, run.seed, str(run.path), step, {"heldout": split_accuracy(scored, sample.groups)}, math.nan
    )
    analysis = RunAnalysis(
        run.model_name,
        run.seed,
        str(run.path),
        context.spec,
        accuracy,
        basis(context),
        **position_names(context),
    )
    gap = clean_gap(model, pairs)
    untraced = untraced_reason(context.spec)
    if untraced is not None:
        analysis = dataclasses.replace(analysis, note=untraced)
    elif settings.traces(gap):
        patching = activation_patching(model, pairs)
        reference = reference_activations(model, training_reference(run, settings.reference_rows))
        measured = circuit_paths_measured(model, pairs, reference, patching, settings)
        analysis = dataclasses.replace(analysis, **measured, note=unpathed_reason(context.spec) or "")
        analysis = dataclasses.replace(analysis, mechanism=snapshot_mechanism(context, analysis))
    else:
        analysis = dataclasses.replace(
            analysis,
            note=f"clean minus counterfactual metric {gap:+.2f} at step {step}: "
            f"below {settings.min_gap:g} in size, no circuit traced",
        )
    return float(gap), summarise(analysis, "")


def snapshot_mechanism(context, analysis):
    """run_mechanism on the weights now in the model: the context's edge circuit belongs to the
    final weights, so a snapshot's is measured afresh, by the same rule on the same pairs."""
    from probes.circuits.named import edge_circuit
    from probes.report.edge_part import traceable

    edges = (
        edge_circuit(context.model, context.pairs, context.edge_graph, compare_methods=False)
        if traceable(context.spec)
        else None
    )
    return run_mechanism(context, analysis, edges)


def clean_gap(model: Model, pairs) -> float:
    """Clean minus counterfactual metric, as activation_patching measures it (its two unpatched
    runs), without the patches a step too early to trace would not use."""
    from models.bridge import device_of
    from probes.patching import corrupt_inputs, run_outcome

    pairs = pairs.to(device_of(model))
    return run_outcome(model, pairs, pairs.inputs).metric - run_outcome(model, pairs, corrupt_inputs(pairs)).metric
