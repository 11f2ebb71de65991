"""toylens's public API: what plugins and notebooks import. Everything else may change.

    from toylens import Task, Example, ModelSpec          # write a task plugin
    from toylens import load_run, Batch, ablate            # probe a trained run from a notebook

Names are imported on first use (PEP 562), so a plugin importing `Task` does not pay for torch
and TransformerLens, and `toylens list` stays fast.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports each name on first use
    # (tests/test_public_api.py keeps these imports equal to _SOURCES)
    from common.cli import UsageError as UsageError
    from models.components import Head as Head
    from models.graph import graph_of as graph_of
    from models.spec import build_model as build_model, ModelSpec as ModelSpec
    from probes.ablation import (
        ablate as ablate,
        Ablation as Ablation,
        ablation_hooks as ablation_hooks,
        ABLATION_METHODS as ABLATION_METHODS,
        ablation_named as ablation_named,
        AblationResult as AblationResult,
        training_reference as training_reference,
    )
    from probes.ablation_sweep import (
        head_ablation_sweep as head_ablation_sweep,
        mlp_ablation_sweep as mlp_ablation_sweep,
    )
    from probes.accuracy import run_accuracy as run_accuracy, RunAccuracy as RunAccuracy
    from probes.attention import (
        example_attention as example_attention,
        ExampleAttention as ExampleAttention,
        role_view as role_view,
        RoleView as RoleView,
        scored_attention as scored_attention,
        ScoredAttention as ScoredAttention,
    )
    from probes.census import take_census as take_census
    from probes.circuits.faithfulness import Faithfulness as Faithfulness
    from probes.circuits.labels import circuit_label as circuit_label, CircuitSummary as CircuitSummary
    from probes.circuits.named import (
        edge_circuit as edge_circuit,
        EdgeCircuit as EdgeCircuit,
        run_edge_circuit as run_edge_circuit,
    )
    from probes.circuits.oracle import edge_effects as edge_effects, EdgeEffects as EdgeEffects
    from probes.circuits.path_patching import path_patch as path_patch, PathPatch as PathPatch
    from probes.circuits.search import faithfulness as faithfulness, search_circuit as search_circuit
    from probes.circuits.truth.planted import planted_models as planted_models
    from probes.composition import Composition as Composition, composition_scores as composition_scores
    from probes.patching import activation_patching as activation_patching, ActivationPatching as ActivationPatching
    from probes.report.edge_render import circuit_figure as circuit_figure
    from probes.report.figures import (
        attention_heatmap as attention_heatmap,
        example_attention_figure as example_attention_figure,
    )
    from probes.settings import ReportSettings as ReportSettings
    from probes.shuffle import shuffle_test as shuffle_test, ShuffleResult as ShuffleResult
    from tasks.base import (
        Domain as Domain,
        Example as Example,
        NO_FOIL as NO_FOIL,
        NoParams as NoParams,
        standard_family as standard_family,
        Task as Task,
    )
    from tasks.data import Batch as Batch, task_dataset as task_dataset
    from tasks.registry import get_task_class as get_task_class
    from tasks.settings import TrainSettings as TrainSettings
    from tasks.training.runs import find_runs as find_runs, Run as Run

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
