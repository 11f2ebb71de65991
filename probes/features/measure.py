"""Dictionaries for one trained run (or one Tracr program): train each (site, size, k) on the
training split's activations, or read it back when this run and config already have one, then
grade it against the planted variables on held-out activations.

Tracr programs have no splits: a dictionary trains and is graded on every input of the compiled
length (the whole domain, a few hundred sequences), and the variables are the residual stream's
own `variable:value` dimensions at the hook the SAE reads.

A run with MLPs is also traced as a feature circuit (probes.features.circuit) through its
transcoders of the grid's first size and k.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from probes.features import store
from probes.features.activations import Activations, Site, collect, mlp_site, resid_site
from probes.features.circuit import FeatureCircuit, feature_circuit
from probes.features.dictionary import DictionaryConfig, train_dictionary
from probes.features.grade import DictionaryGrade, feature_matches, grade, linear_presence
from probes.features.variables import Variable, task_variables, tracr_variables
from models import Model

PAIRS = 64  # held-out counterfactual pairs the circuit is measured on (as the circuit report's)


@dataclass(frozen=True)
class Grid:
    """Which dictionaries to train: every site x size x k (pairs with k >= size are skipped)."""

    sites: tuple[Site, ...]
    sizes: tuple[int, ...] = (64, 256)
    ks: tuple[int, ...] = (4, 16)
    steps: int = 600
    seed: int = 0

    def configs(self, d_model: int):
        for site in self.sites:
            for size in self.sizes:
                for k in self.ks:
                    if k < size:
                        yield DictionaryConfig(
                            site.kind,
                            site.hook_in,
                            site.hook_out,
                            d_model,
                            d_model,
                            size,
                            k,
                            steps=self.steps,
                            seed=self.seed,
                        )


def trained_or_read(root: Path, config: DictionaryConfig, train: Activations, run: dict, context: int, progress: bool):
    found = store.reusable(root, config, run)
    if found is not None:
        return found
    torch.manual_seed(config.seed)  # nothing else draws, but keep the global state out of it
    dictionary = train_dictionary(train.values[config.hook_in], train.values[config.hook_out], config, progress)
    store.save(root, dictionary, run, context)
    return dictionary


def graded(
    label: str,
    grid: Grid,
    root: Path,
    train: Activations,
    held: Activations,
    d_model: int,
    variables_at,
    run: dict,
    context: int,
    split: str,
    progress: bool,
) -> list[DictionaryGrade]:
    out, linear = [], {}
    for config in grid.configs(d_model):
        dictionary = trained_or_read(root, config, train, run, context, progress)
        variables, x_out = variables_at(config), held.values[config.hook_out]
        if config.hook_out not in linear:
            linear[config.hook_out] = linear_presence(variables, x_out)
        out.append(
            grade(
                label, dictionary, held.values[config.hook_in], x_out, variables, split, linear=linear[config.hook_out]
            )
        )
    return out


def run_grades(run, grid: Grid, root: Path, progress: bool = True) -> list[DictionaryGrade]:
    """Every dictionary of `grid` on `run` (tasks.training.runs.Run), written under `root`."""
    model, batches = run.load_model(), run.batches()
    names = [name for site in grid.sites for name in (site.hook_in, site.hook_out)]
    train, held = batches["train"], batches["heldout"]
    train_acts = collect(model, train.inputs, train.real_positions(), names)
    held_acts = collect(model, held.inputs, held.real_positions(), names)
    variables = task_variables(held, held_acts, run.config["vocabulary"])
    return graded(
        f"{run.model_name} seed {run.seed}",
        grid,
        root,
        train_acts,
        held_acts,
        run.spec.d_model,
        lambda config: variables,
        store.run_identity(run.config),
        run.spec.n_ctx,
        "heldout",
        progress,
    )


@dataclass(frozen=True)
class TracedRun:
    """A run's feature circuit and, per transcoder layer, each feature's best-matching planted
    variable on the held-out split (what the circuit's nodes are read as)."""

    circuit: FeatureCircuit
    matches: dict  # layer -> [(variable, MCC)] per feature


def run_circuit(run, grid: Grid, root: Path, pairs: int = PAIRS) -> TracedRun | None:
    """The feature circuit of `run` through the grid's first (size, k) transcoder of every MLP (as
    trained by run_grades under `root`); None for a model without MLPs."""
    layers = [site.layer for site in grid.sites if site.kind == "transcoder"]
    if not layers:
        return None
    identity = store.run_identity(run.config)
    dictionaries = {}
    for layer in layers:
        config = next(c for c in grid.configs(run.spec.d_model) if c.hook_in == mlp_site(layer).hook_in)
        dictionaries[layer] = store.load(store.folder_of(root, config), identity)
    model, held = run.load_model(), run.batches()["heldout"]
    acts = collect(model, held.inputs, held.real_positions(), [mlp_site(l).hook_in for l in layers])
    variables = task_variables(held, acts, run.config["vocabulary"])
    return traced_through(model, held, dictionaries, acts, variables, f"{run.model_name} seed {run.seed}", pairs)


def traced_through(
    model: Model, held, dictionaries: dict, acts: Activations, variables: list[Variable], label: str, pairs: int = PAIRS
) -> TracedRun:
    """The feature circuit through `dictionaries` (MLP layer -> its transcoder) on `pairs` held-out
    pairs, and what each feature reads as: on `acts`, the whole held-out split's activations at
    each transcoder's input, against `variables`."""
    from tasks.data import spread_subset

    circuit = feature_circuit(model, spread_subset(held, pairs), dictionaries, label)
    matches = {l: feature_matches(d.encode(acts.values[d.config.hook_in]), variables) for l, d in dictionaries.items()}
    return TracedRun(circuit, matches)


def tracr_grades(name: str, grid: Grid, root: Path, progress: bool = True) -> list[DictionaryGrade]:
    """Every dictionary of `grid` (SAE sites only: the labels are residual dimensions) on a Tracr fixture."""
    from common.jsonfiles import canonical_sha256
    from probes.circuits.truth import tracr

    compiled = tracr.load(name)
    model = tracr.bridge(compiled)
    tokens = tracr.domain(compiled, compiled.config["n_ctx"] - 1)[:, :-1]
    acts = collect(model, tokens, torch.ones_like(tokens, dtype=torch.bool), [s.hook_in for s in grid.sites])
    cache: dict[str, list[Variable]] = {}

    def variables_at(config: DictionaryConfig) -> list[Variable]:
        return cache.setdefault(config.hook_in, tracr_variables(acts.values[config.hook_in], compiled.residual_labels))

    identity = {
        "run_sha256": canonical_sha256({"config": compiled.config, "labels": list(compiled.residual_labels)}),
        "weights_sha256": canonical_sha256({k: v.tolist() for k, v in sorted(compiled.state.items())}),
        "model_name": f"tracr-{name}",
        "seed": 0,
    }
    return graded(
        f"tracr {name}",
        grid,
        root,
        acts,
        acts,
        compiled.config["d_model"],
        variables_at,
        identity,
        compiled.config["n_ctx"],
        "domain (also trained on)",
        progress,
    )


def tracr_sites(name: str) -> tuple[Site, ...]:
    from probes.circuits.truth import tracr

    return (resid_site(tracr.load(name).config["n_layers"] - 1),)
