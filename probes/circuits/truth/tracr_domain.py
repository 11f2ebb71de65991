"""A Tracr program's whole input domain as a certificate's Inputs (probes.circuits.certificate):
every input at the full compiled length (tracr.domain: at most a few hundred), each paired with
another input of the domain drawn by a seeded permutation (the counterfactual's partner), every
position after BOS scored on the full model's own output (the answer a circuit must keep)."""

from __future__ import annotations

import dataclasses

import torch

from probes.circuits.certificate import Inputs
from tasks.data import Batch
from models import Model


def tracr_inputs(model: Model, compiled, seed: int = 0) -> Inputs:
    from probes.circuits.truth.tracr import domain, every_position

    every = domain(compiled, compiled.config["n_ctx"] - 1)
    partner = every[torch.randperm(len(every), generator=torch.Generator().manual_seed(seed))]
    with torch.no_grad():
        answers = model(every[:, :-1]).argmax(-1)

    def batch(indices: list[int]) -> Batch:
        scored = every_position(compiled, every[indices])
        outputs = answers[indices][scored.example_index, scored.positions]
        return dataclasses.replace(scored, answers=outputs, counterfactual=partner[indices])

    value = {i: v for v, i in compiled.input_map.items()}

    def text(i: int) -> str:
        return " ".join(str(value[t]) for t in every[i, 1:-1].tolist())

    return Inputs(len(every), batch, text, f"every input of length {every.shape[1] - 2}")
