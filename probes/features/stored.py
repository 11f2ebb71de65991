"""A run's stored dictionaries graded again where a report finds them: every dictionary `toylens
features RUNS_DIR` wrote for the run (RUNS_DIR/features/MODEL/seedN, SAELens's layout), read through
probes.features.store (which refuses one trained on another run), graded on the held-out split
against the task's planted variables, and, for each variable some feature recovers, the roles of
the positions where that feature fires strongest. Nothing is trained here."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch

from probes.features import store
from probes.features.activations import Activations, collect, mlp_site
from probes.features.grade import DictionaryGrade, grade, linear_presence
from probes.features.measure import TracedRun, traced_through
from probes.features.variables import task_variables
from models import Model

TOP = 20  # a recovering feature's strongest activations whose roles are counted
SHOWN = 5  # of them, the tokens shown
NO_ROLE = "no role"


@dataclass(frozen=True)
class FeatureExamples:
    """Where one recovering feature fires strongest on the held-out split."""

    dictionary: str  # its DictionaryConfig.name
    hook: str  # the hook it reads
    variable: str
    feature: int
    mcc: float
    roles: tuple[tuple[str, int], ...]  # (role, how many of its TOP strongest activations sit there), most first
    tokens: tuple[str, ...]  # the tokens at its SHOWN strongest


@dataclass(frozen=True)
class RunFeatures:
    run: str  # "model seed k"
    folder: str  # where the dictionaries were read from, under the runs folder
    grades: tuple[DictionaryGrade, ...]  # by kind, hook, size, k
    examples: tuple[FeatureExamples, ...]
    traced: TracedRun | None  # the feature circuit, where every MLP has a stored transcoder


def features_folder(run) -> Path:
    """Where `toylens features RUNS_DIR` (its default --out) stores `run`'s dictionaries."""
    return run.path.parent.parent / "features" / run.model_name / f"seed{run.seed}"


def role_at(batch, acts: Activations, index: int) -> str:
    row, position = int(acts.rows[index]), int(acts.positions[index])
    return next((name for name, where in sorted(batch.roles.items()) if int(where[row]) == position), NO_ROLE)


def strongest(dictionary, grade_of: DictionaryGrade, acts: Activations, batch, vocabulary) -> list[FeatureExamples]:
    config = dictionary.config
    encoded = dictionary.encode(acts.values[config.hook_in])
    out = []
    for r in grade_of.recoveries:
        if not r.mcc >= grade_of.threshold:
            continue
        top = encoded[:, r.feature].topk(min(TOP, len(encoded))).indices.tolist()
        roles = Counter(role_at(batch, acts, i) for i in top).most_common()
        tokens = tuple(vocabulary[int(batch.inputs[acts.rows[i], acts.positions[i]])] for i in top[:SHOWN])
        out.append(FeatureExamples(config.name, config.hook_in, r.variable, r.feature, r.mcc, tuple(roles), tokens))
    return out


@torch.no_grad()
def stored_features(run, model: Model, heldout, vocabulary: list[str]) -> RunFeatures | None:
    """None when no dictionary is stored for `run`."""
    folder = features_folder(run)
    found = sorted(p.parent for p in folder.rglob(store.CFG)) if folder.is_dir() else []
    if not found:
        return None
    identity = store.run_identity(run.config)
    dictionaries = sorted(
        (store.load(f, identity) for f in found),
        key=lambda d: (d.config.kind, d.config.hook_in, d.config.d_sae, d.config.k),
    )
    names = sorted({name for d in dictionaries for name in (d.config.hook_in, d.config.hook_out)})
    acts = collect(model, heldout.inputs, heldout.real_positions(), names)
    variables = task_variables(heldout, acts, vocabulary)
    label = f"{run.model_name} seed {run.seed}"
    linear: dict = {}
    grades, examples = [], []
    for d in dictionaries:
        x_out = acts.values[d.config.hook_out]
        if d.config.hook_out not in linear:
            linear[d.config.hook_out] = linear_presence(variables, x_out)
        graded = grade(
            label, d, acts.values[d.config.hook_in], x_out, variables, "heldout", linear=linear[d.config.hook_out]
        )
        grades.append(graded)
        examples += strongest(d, graded, acts, heldout, vocabulary)
    where = folder.relative_to(run.path.parent.parent).as_posix()
    traced = circuit_through(model, heldout, dictionaries, acts, variables, label, run.spec)
    return RunFeatures(label, where, tuple(grades), tuple(examples), traced)


def circuit_through(model: Model, heldout, dictionaries, acts, variables, label: str, spec) -> TracedRun | None:
    """Through each MLP's first stored transcoder (smallest size, then k), when every MLP has one;
    `acts` and `variables`: stored_features' own, read once for the grades and the circuit."""
    if not spec.mlp:
        return None
    first = {
        layer: next((d for d in dictionaries if d.config.hook_in == mlp_site(layer).hook_in), None)  # sorted: smallest
        for layer in range(spec.n_layers)
    }
    if any(d is None for d in first.values()):
        return None
    return traced_through(model, heldout, first, acts, variables, label)
