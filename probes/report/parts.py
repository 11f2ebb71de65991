"""The report as a list of parts. A part is a (measure, render) pair: `measure(context)` runs once
per run, in the report's worker processes, and returns a typed result (None where the run's data
do not call for the part); `render(results, out, settings)` turns every run's result, in report
order, into one Section of report.md, its summary lines and its report.json entry. Adding a probe
to the report means adding one Part to PARTS.

Every part of one run shares one RunContext: the model is loaded once, the splits built once, and
the examples each number is measured on (ReportSettings) chosen once, so two parts that ablate the
same head on the held-out split measure the same examples.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from probes.settings import DEFAULT, ReportSettings

if TYPE_CHECKING:
    from models.spec import ModelSpec
    from tasks.training.runs import Run


@dataclass
class RunContext:
    """One run as the report's parts see it. Parts read it and never modify what it holds."""

    run: Run
    out: Path | None  # the report folder (figures go under it); None: draw none
    settings: ReportSettings = DEFAULT
    device: str | None = None  # where the model runs (None: the CPU); results come back to the CPU

    @cached_property
    def model(self):
        return self.run.load_model(self.device)

    @cached_property
    def batches(self) -> dict:
        return self.run.batches()

    @property
    def heldout(self):
        return self.batches["heldout"]

    @property
    def spec(self) -> ModelSpec:
        return self.run.spec

    @cached_property
    def vocabulary(self) -> list[str]:
        return self.run.task.vocabulary()

    @cached_property
    def accuracy(self):
        """probes.accuracy.RunAccuracy: as training measured it, or measured now on this model."""
        from probes.accuracy import run_accuracy

        return run_accuracy(self.run, lambda: self.model)

    @cached_property
    def reference(self):
        """The training rows mean and resample ablation average over, with their activations
        (probes.ablation.Reference: one forward for every ablation of the run)."""
        from probes.ablation import reference_activations, training_reference

        rows = training_reference(self.run, self.settings.reference_rows)
        return reference_activations(self.model, rows, self.stage_hooks)

    @cached_property
    def sample(self):
        """The held-out examples every ablation number is measured on."""
        from tasks.data import spread_subset

        return spread_subset(self.heldout, self.settings.ablation_rows)

    @cached_property
    def clean(self):
        """The unablated run over the sample that the ablation sweeps replay (probes.ablation_sweep.CleanRun)."""
        from probes.ablation_sweep import clean_run

        return clean_run(self.model, self.sample, self.stage_hooks)

    @cached_property
    def stage_hooks(self) -> tuple[str, ...]:
        """Where the sublayer part reads the residual stream (probes.sublayers.stages): kept from the
        forwards over the reference rows and the sample that other parts run anyway."""
        from probes.sublayers import stages

        return tuple(hook for _, hook in stages(self.model))

    @cached_property
    def mlp_ablations(self) -> dict:
        """Ablation -> each MLP alone ablated on the sample (the ablation table's MLP rows and the
        sublayer part's verdicts: one measurement for both)."""
        from probes.ablation import ABLATION_METHODS
        from probes.ablation_sweep import mlp_ablation_sweep

        return {
            method: mlp_ablation_sweep(self.model, self.sample, method, self.run.seed, self.reference, self.clean)
            for method in ABLATION_METHODS
        }

    @cached_property
    def pairs(self):
        """The held-out counterfactual pairs patching and circuit search use (ReportSettings.pair_count)."""
        from tasks.data import spread_subset

        return spread_subset(self.heldout, self.settings.pair_count(self.heldout))

    @cached_property
    def edge_graph(self):
        """models.graph.Graph of the run's spec (the edge circuit's graph)."""
        from models.graph import graph_of

        return graph_of(self.spec)

    @cached_property
    def edge_runs(self):
        """The clean and counterfactual runs of `pairs` every edge patch of the run moves between
        (probes.circuits.oracle.Runs, Direction.NOISE): recorded once for the oracle, the
        circuit's redundancy and its positional refinement, whose graphs share these senders."""
        from probes.circuits.oracle import Direction, record_runs

        return record_runs(self.model, self.pairs, self.edge_graph, Direction.NOISE)

    @cached_property
    def edge_circuit(self):
        """probes.circuits.named.EdgeCircuit by the oracle alone on `pairs` (the edge part's, which
        the circuit timeline replays): computed once per run."""
        from probes.circuits.named import edge_circuit

        expected = self.run.task.expected_circuit(self.run.model_name, self.spec)
        return edge_circuit(
            self.model, self.pairs, self.edge_graph, compare_methods=False, expected=expected, runs=self.edge_runs
        )


@dataclass(frozen=True)
class Section:
    title: str
    markdown: str
    summary: list[str]  # the part's sentences (report.json; printed with --verbose)
    data: object  # JSON-able numbers behind the markdown
    # What the part adds to the summary tables (probes.report.summary): per run, short cells by
    # column; per model, one short line across its seeds; family-wide short notes.
    cells: dict = field(default_factory=dict)  # (model_name, seed) -> {column: text}
    across_seeds: dict = field(default_factory=dict)  # model_name -> text
    notes: list = field(default_factory=list)


@dataclass(frozen=True)
class Part:
    key: str  # its entry in report.json
    measure: Callable[[RunContext], object]  # one run -> typed result, or None
    render: Callable[[list, Path, ReportSettings], Section | None]


@dataclass(frozen=True)
class MeasuredRun:
    model_name: str
    seed: int
    results: dict = field(default_factory=dict)  # part key -> its measure's result (None: not called for)


def jsonable(value):
    """Dataclasses, tensors and tuples as plain JSON (write_json stores NaN as null)."""
    import torch

    from models.components import Head, HeadSet

    if isinstance(value, (Head, HeadSet)):
        return str(value)
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
    return value
