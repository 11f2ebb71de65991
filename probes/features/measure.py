"""Dictionaries for one trained run (or one Tracr program): train each (site, size, k) on the
training split's activations, or read it back when this run and config already have one, then
grade it against the planted variables on held-out activations.

Tracr programs have no splits: a dictionary trains and is graded on every input of the compiled
length (the whole domain, a few hundred sequences), and the variables are the residual stream's
own `variable:value` dimensions at the hook the SAE reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from probes.features import store
from probes.features.activations import Activations, Site, collect, resid_site
from probes.features.dictionary import DictionaryConfig, train_dictionary
from probes.features.grade import DictionaryGrade, grade
from probes.features.variables import Variable, task_variables, tracr_variables


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
                        yield DictionaryConfig(site.kind, site.hook_in, site.hook_out, d_model, d_model, size, k,
                                               steps=self.steps, seed=self.seed)


def trained_or_read(root: Path, config: DictionaryConfig, train: Activations, run: dict, context: int,
                    progress: bool):
    found = store.reusable(root, config, run)
    if found is not None:
        return found
    torch.manual_seed(config.seed)   # nothing else draws, but keep the global state out of it
    dictionary = train_dictionary(train.values[config.hook_in], train.values[config.hook_out], config, progress)
    store.save(root, dictionary, run, context)
    return dictionary


def graded(label: str, grid: Grid, root: Path, train: Activations, held: Activations, d_model: int,
           variables_at, run: dict, context: int, split: str, progress: bool) -> list[DictionaryGrade]:
    out = []
    for config in grid.configs(d_model):
        dictionary = trained_or_read(root, config, train, run, context, progress)
        out.append(grade(label, dictionary, held.values[config.hook_in], held.values[config.hook_out],
                         variables_at(config), split))
    return out


def run_grades(run, grid: Grid, root: Path, progress: bool = True) -> list[DictionaryGrade]:
    """Every dictionary of `grid` on `run` (tasks.training.runs.Run), written under `root`."""
    model, batches = run.load_model(), run.batches()
    names = [name for site in grid.sites for name in (site.hook_in, site.hook_out)]
    train, held = batches["train"], batches["heldout"]
    train_acts = collect(model, train.inputs, train.real_positions(), names)
    held_acts = collect(model, held.inputs, held.real_positions(), names)
    variables = task_variables(held, held_acts, run.config["vocabulary"])
    return graded(f"{run.model_name} seed {run.seed}", grid, root, train_acts, held_acts, run.spec.d_model,
                  lambda config: variables, store.run_identity(run.config), run.spec.n_ctx, "heldout", progress)


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

    identity = {"run_sha256": canonical_sha256({"config": compiled.config, "labels": list(compiled.residual_labels)}),
                "weights_sha256": canonical_sha256({k: v.tolist() for k, v in sorted(compiled.state.items())}),
                "model_name": f"tracr-{name}", "seed": 0}
    return graded(f"tracr {name}", grid, root, acts, acts, compiled.config["d_model"], variables_at, identity,
                  compiled.config["n_ctx"], "domain (also trained on)", progress)


def tracr_sites(name: str) -> tuple[Site, ...]:
    from probes.circuits.truth import tracr

    return (resid_site(tracr.load(name).config["n_layers"] - 1),)
