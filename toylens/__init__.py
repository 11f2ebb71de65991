"""toylens's public API: what plugins and notebooks import. Everything else may change.

    from toylens import Task, Example, ModelSpec          # write a task plugin
    from toylens import load_run, Batch, ablate            # probe a trained run from a notebook

Names are imported on first use (PEP 562), so a plugin importing `Task` does not pay for torch
and TransformerLens, and `toylens list` stays fast.
"""

from __future__ import annotations

import importlib
from pathlib import Path

_SOURCES = {
    # writing tasks
    "Task": "tasks.base",
    "Example": "tasks.base",
    "Domain": "tasks.base",
    "NoParams": "tasks.base",
    "NO_FOIL": "tasks.base",
    "standard_family": "tasks.base",
    "UsageError": "common.cli",
    # models
    "ModelSpec": "models.spec",
    "build_model": "models.spec",
    "Head": "models.components",
    # runs and data
    "Run": "tasks.training.runs",
    "find_runs": "tasks.training.runs",
    "Batch": "tasks.data",
    "task_dataset": "tasks.data",
    "get_task_class": "tasks.registry",
    "TrainSettings": "tasks.settings",
    # probes and their results
    "ablate": "probes.ablation",
    "head_ablation_sweep": "probes.ablation_sweep",
    "mlp_ablation_sweep": "probes.ablation_sweep",
    "AblationResult": "probes.ablation",
    "ablation_hooks": "probes.ablation",
    "ABLATION_METHODS": "probes.ablation",
    "Ablation": "probes.ablation",
    "ablation_named": "probes.ablation",
    "activation_patching": "probes.patching",
    "ActivationPatching": "probes.patching",
    "path_patch": "probes.circuits.path_patching",
    "PathPatch": "probes.circuits.path_patching",
    "scored_attention": "probes.attention",
    "ScoredAttention": "probes.attention",
    "example_attention": "probes.attention",
    "ExampleAttention": "probes.attention",
    "role_view": "probes.attention",
    "RoleView": "probes.attention",
    "shuffle_test": "probes.shuffle",
    "ShuffleResult": "probes.shuffle",
    "composition_scores": "probes.composition",
    "Composition": "probes.composition",
    "run_accuracy": "probes.accuracy",
    "RunAccuracy": "probes.accuracy",
    "faithfulness": "probes.circuits.search",
    "search_circuit": "probes.circuits.search",
    "Faithfulness": "probes.circuits.faithfulness",
    "training_reference": "probes.ablation",
    "ReportSettings": "probes.settings",
    # the circuit as a graph of edges: exact oracle, fast methods, planted ground truth
    "graph_of": "models.graph",
    "edge_effects": "probes.circuits.oracle",
    "EdgeEffects": "probes.circuits.oracle",
    "edge_circuit": "probes.circuits.named",
    "run_edge_circuit": "probes.circuits.named",
    "EdgeCircuit": "probes.circuits.named",
    "planted_models": "probes.circuits.truth.planted",
    "circuit_label": "probes.circuits.labels",
    "CircuitSummary": "probes.circuits.labels",
    "take_census": "probes.census",
    # figures (matplotlib Figures; a notebook shows them)
    "attention_heatmap": "probes.report.figures",
    "circuit_figure": "probes.report.edge_render",
    "example_attention_figure": "probes.report.figures",
}

__all__ = sorted([*_SOURCES, "load_run"])


def load_run(path):
    """A trained run folder (`runs/<task>/<model>/seed<k>`), checked before anything loads:
    `.load_model()`, `.batches()` (train / validation / heldout), `.task`, `.config`."""
    from tasks.training.runs import Run

    run = Run(Path(path))
    run.check()
    return run


def __getattr__(name: str):
    if name not in _SOURCES:
        raise AttributeError(f"toylens has no public name {name!r}; see toylens.__all__")
    value = getattr(importlib.import_module(_SOURCES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
