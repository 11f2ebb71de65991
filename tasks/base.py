"""The task interface: everything the toolkit needs to know about a generated task.

A task is a class with a `name`, a frozen `Params` dataclass and four methods. The toolkit never
special-cases a task: training, accuracy, the shuffle test, ablation, patching and the circuit
report all read the `Example`s it generates.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from models import ModelSpec

SPLITS = ("train", "validation", "heldout")
NO_FOIL = -1


@dataclass(frozen=True)
class Example:
    """One sequence of token ids and the positions where the model's next-token prediction is scored.

    `positions[i]` is the position whose logits are scored; its answer is `tokens[positions[i] + 1]`.
    `foils[i]` is the wrong answer a shortcut would give there (NO_FOIL when the task has none).
    `counterfactual` has the same length and differs where the answer should change (empty when the
    task has no counterfactual partners); patching runs clean = tokens, corrupt = counterfactual.
    """

    tokens: tuple[int, ...]
    positions: tuple[int, ...]
    foils: tuple[int, ...] = ()
    group: str = ""
    counterfactual: tuple[int, ...] = ()

    @property
    def answers(self) -> tuple[int, ...]:
        return tuple(self.tokens[p + 1] for p in self.positions)


@dataclass(frozen=True)
class NoParams:
    pass


class Task(ABC):
    """Subclass, set `name` and `Params`, implement the abstract methods, register the class."""

    name: ClassVar[str]
    Params: ClassVar[type] = NoParams
    # True when no token sequence may occur in two splits (the held-out set is truly unseen).
    disjoint_splits: ClassVar[bool] = True

    def __init__(self, params=None):
        self.params = params if params is not None else self.Params()

    @abstractmethod
    def vocabulary(self) -> list[str]:
        """Token strings; the id of a token is its index."""

    @abstractmethod
    def generate(self, seed: int) -> dict[str, list[Example]]:
        """Examples for each of SPLITS, a deterministic function of (params, seed)."""

    @abstractmethod
    def default_models(self) -> dict[str, ModelSpec]:
        """Named model family trained by default; n_ctx and d_vocab are filled in by the toolkit."""

    def default_training(self) -> dict:
        """Overrides of `tasks.training.TrainSettings` fields for this task."""
        return {}

    def expected_circuit(self, model_name: str, spec: ModelSpec) -> frozenset | None:
        """Optionally, the edges (`models.graph.Edge`s of `models.graph.graph_of(spec)`) this model
        is expected to use, known by construction; circuit methods are then scored against them.
        None (the default): not known."""
        return None

    def decode(self, tokens) -> str:
        vocabulary = self.vocabulary()
        return " ".join(vocabulary[int(t)] for t in tokens)

    def params_dict(self) -> dict:
        return dataclasses.asdict(self.params)
