"""The report's example pairs: every head's full attention pattern on a few held-out counterfactual
pairs (the clean example and its partner), for the interactive views of report.html (per-head
attention, a node's attention at the scored positions). No markdown section: the numbers the
markdown shows are means over many examples (probes.report.run_analysis); these are single
examples, shown as such."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from models.spec import Attention
from probes.report.parts import RunContext

EXAMPLE_PAIRS = 2  # evenly spread over the report's patching pairs: the first and the last


@dataclass(frozen=True)
class ExamplePair:
    example: int  # which of the run's example pairs (0 .. EXAMPLE_PAIRS - 1)
    scored: tuple[int, ...]  # the example's scored positions
    answers: tuple[str, ...]  # per scored position: the answer token ...
    foils: tuple[str, ...]  # ... and the foil ('' when the task names none)
    clean_tokens: tuple[str, ...]  # the input the model reads (answers excluded)
    corrupt_tokens: tuple[str, ...]
    clean: torch.Tensor  # [layer, head, query, key]
    corrupt: torch.Tensor


@dataclass(frozen=True)
class RunExamples:
    model_name: str
    seed: int
    pairs: tuple[ExamplePair, ...]


def measure_examples(context: RunContext) -> RunExamples | None:
    from probes.attention import patterns
    from probes.patching import corrupt_inputs
    from tasks.base import NO_FOIL
    from tasks.data import spread_subset

    if context.spec.attention != Attention.SOFTMAX or context.heldout.counterfactual is None:
        return None
    batch = spread_subset(context.pairs, EXAMPLE_PAIRS).to("cpu")
    words = context.vocabulary
    clean, corrupt = patterns(context.model, batch.inputs), patterns(context.model, corrupt_inputs(batch))
    pairs = []
    for row in range(len(batch)):
        length = int(batch.lengths[row]) - 1
        mine = batch.example_index == row
        foils = batch.foils[mine].tolist()
        pairs.append(
            ExamplePair(
                example=row,
                scored=tuple(batch.positions[mine].tolist()),
                answers=tuple(words[t] for t in batch.answers[mine].tolist()),
                foils=tuple("" if f == NO_FOIL else words[f] for f in foils),
                clean_tokens=tuple(words[t] for t in batch.inputs[row, :length].tolist()),
                corrupt_tokens=tuple(words[t] for t in corrupt_inputs(batch)[row, :length].tolist()),
                clean=clean[row, :, :, :length, :length],
                corrupt=corrupt[row, :, :, :length, :length],
            )
        )
    return RunExamples(context.run.model_name, context.run.seed, tuple(pairs))


def render_examples(results: list, out, settings) -> None:
    """No section of its own: report.html reads the typed results."""
    return None
