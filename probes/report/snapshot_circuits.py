"""A run's circuit facts at each of its weight snapshots, then at its final weights, measured by
the rule `circuit.json`'s are (probes.report.run_analysis): the circuit search, every head pair's
path patch and its routes resolved by position, on the run's counterfactual pairs.

Why this classifier and not "whichever candidate circuit's edge effect is larger": one rule at
every step means the final entry reproduces `circuit.json`'s label exactly (a check the census
makes, true by construction), so an early step that names another mechanism shows the mechanism
changing, never two classifiers disagreeing; and it needs no candidate list, which would have to
come from the final labels. The price is strictness: a step whose own clean - counterfactual gap is
below ReportSettings.min_gap names no circuit (as a final run with that gap would), so a mechanism
still forming counts as not told. Shares are of the step's own gap: another step's gap would mix in
how much the model has learned by then.
"""

from __future__ import annotations

import dataclasses
import math

from probes.circuits.labels import summarise
from probes.circuits.mechanism_timeline import SnapshotCircuit

SNAPSHOT_FIX = "retrain the run to rewrite its snapshots"


def snapshot_circuits(context, progress: bool = False) -> list[SnapshotCircuit]:
    """`context` (probes.report.parts.RunContext) of a run with weight snapshots: one entry per
    snapshot before its last step, then its final weights. The context's model is restored after."""
    from tqdm.auto import tqdm

    from models.checkpoint import WEIGHTS, load_weights
    from common.jsonfiles import sha256_file
    from probes.dynamics import snapshot_files

    run, model = context.run, context.model
    final = int(run.metrics["steps"])
    own = {name: value.clone() for name, value in model.state_dict().items()}
    steps = [(step, path) for step, path in snapshot_files(run.path) if step < final] + [(final, run.path / WEIGHTS)]
    entries = []
    try:
        for step, path in tqdm(steps, desc=f"{run.model_name} seed {run.seed} snapshots", disable=not progress,
                               leave=False):
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
    from probes.attention import position_labels
    from probes.patching import activation_patching
    from probes.report.run_analysis import RunAnalysis, basis, circuit_paths_measured
    from tasks.evaluate import score_split

    run, model, pairs, settings = context.run, context.model, context.pairs, context.settings
    scored, sample = score_split(model, context.heldout)
    accuracy = RunAccuracy(run.model_name, run.seed, str(run.path), step,
                           {"heldout": split_accuracy(scored, sample.groups)}, math.nan)
    analysis = RunAnalysis(run.model_name, run.seed, str(run.path), context.spec, accuracy, basis(context),
                           labels=position_labels(context.heldout.inputs, context.vocabulary))
    gap = clean_gap(model, pairs)
    if settings.traces(gap):
        patching = activation_patching(model, pairs)
        reference = reference_activations(model, training_reference(run, settings.reference_rows))
        analysis = dataclasses.replace(analysis, **circuit_paths_measured(model, pairs, reference, patching, settings))
    else:
        analysis = dataclasses.replace(analysis, note=f"clean minus counterfactual metric {gap:+.2f} at step {step}: "
                                                      f"below {settings.min_gap:g} in size, no circuit traced")
    return float(gap), summarise(analysis, "")


def clean_gap(model, pairs) -> float:
    """Clean minus counterfactual metric, as activation_patching measures it (its two unpatched
    runs), without the patches a step too early to trace would not use."""
    from models.bridge import device_of
    from probes.patching import corrupt_inputs, run_outcome

    pairs = pairs.to(device_of(model))
    return run_outcome(model, pairs, pairs.inputs).metric - run_outcome(model, pairs, corrupt_inputs(pairs)).metric
