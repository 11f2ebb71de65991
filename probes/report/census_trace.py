"""The census-only trace: of the report's circuit part (probes.report.run_analysis.analyse_run),
exactly what a run's circuit.json holds for the census (its circuit, the paths between its heads
and their positions, the note, the mechanism's signature with its roles), measured by the same
functions on the same rows and reusing the run context's forwards, without what only the report
reads (the head and MLP ablation sweeps, the attention views, composition scores, the circuit's
ablation, where its heads matter, the figure). A sweep for the census (`toylens sweep --trace
census`) runs this; `python -m probes.circuit report RUNS` gives any run its full report."""

from __future__ import annotations

import dataclasses

from probes.report.run_analysis import (
    RunAnalysis,
    basis,
    circuit_paths_measured,
    position_names,
    run_mechanism,
    small_gap,
    unpathed_reason,
    untraceable,
)

# circuit.json's sentence for a run traced for the census alone (the report writes its own).
CENSUS_SUMMARY = "traced for the census alone; `python -m probes.circuit report` writes this run's full report"


def census_analysis(context) -> RunAnalysis:
    """The run's RunAnalysis with the fields circuit.json's census facts are read from
    (probes.circuits.labels.summarise): equal to analyse_run's there, the other fields None."""
    from probes.patching import activation_patching

    run, settings, model = context.run, context.settings, context.model
    analysis = RunAnalysis(run.model_name, run.seed, str(run.path), context.spec, context.accuracy, basis(context))
    if (why := untraceable(context)) is not None:
        return dataclasses.replace(analysis, note=why)
    patching = activation_patching(model, context.pairs)
    analysis = dataclasses.replace(analysis, **position_names(context), vocabulary=context.vocabulary)
    gap = patching.clean.metric - patching.corrupt.metric
    if not settings.traces(gap):
        return dataclasses.replace(analysis, note=small_gap(gap, settings))
    measured = circuit_paths_measured(model, context.pairs, context.reference, patching, settings)
    analysis = dataclasses.replace(analysis, **measured, note=unpathed_reason(context.spec) or "")
    return dataclasses.replace(analysis, mechanism=run_mechanism(context, analysis))
