"""The task interface: everything the toolkit needs to know about a generated task.

A task is a class with a `name`, a frozen `Params` dataclass and four methods. The toolkit never
special-cases a task: training, accuracy, the shuffle test, ablation, patching and the circuit
report all read the `Example`s it generates.
"""

from __future__ import annotations

import dataclasses
import functools
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Callable, ClassVar

from common.jsonfiles import not_unicode
from models import ModelSpec, UsageError
from models.spec import Attention, Positions

SPLITS = ("train", "validation", "heldout")
NO_FOIL = -1


@dataclass(frozen=True)
class Example:
    """One sequence of token ids and the positions where the model's next-token prediction is scored.

    `positions[i]` is the position whose logits are scored; its answer is `tokens[positions[i] + 1]`.
    `foils[i]` is the wrong answer a shortcut would give there (NO_FOIL when the task has none).
    `counterfactual` has the same length and differs where the answer should change (empty when the
    task has no counterfactual partners); patching runs clean = tokens, corrupt = counterfactual.
    `roles` names positions of this example by what they hold (e.g. {"binder_end": 7}): where a
    task's layout varies per example, attention, patching and circuit labels are then summarised
    per role rather than per absolute position.
    """

    tokens: tuple[int, ...]
    positions: tuple[int, ...]
    foils: tuple[int, ...] = ()
    group: str = ""
    counterfactual: tuple[int, ...] = ()
    roles: dict[str, int] = field(default_factory=dict, hash=False)

    @property
    def answers(self) -> tuple[int, ...]:
        return tuple(self.tokens[p + 1] for p in self.positions)


@dataclass(frozen=True)
class Domain:
    """Every input a task can pose, indexed: `size` examples, the i-th made by `example(i)` for
    0 <= i < size (deterministic, each with its counterfactual partner where the task has them).
    A certificate (probes.circuits.certificate) checks a circuit on all of them within its budget,
    else on a uniform sample of indices (`sample`), and says which it did."""

    size: int
    example: Callable[[int], Example]
    described: str = ""  # what the domain is, in a few words (e.g. "every noun pair in both orders x 8 adjectives")

    def sample(self, n: int, seed: int) -> list[int]:
        return uniform_indices(self.size, n, seed)


def uniform_indices(size: int, n: int, seed: int) -> list[int]:
    """`n` indices of 0..size-1 drawn uniformly without replacement (all of them when n >= size), sorted."""
    import random

    if n >= size:
        return list(range(size))
    rng, drawn = random.Random(seed), set()
    while len(drawn) < n:  # randrange, not sample: a domain may be larger than an index fits
        drawn.add(rng.randrange(size))
    return sorted(drawn)


@dataclass(frozen=True)
class NoParams:
    pass


def plugin_call(owner, member: str, function, *args, **kwargs):
    """Call into plugin code; whatever it raises (sys.exit included) becomes one line naming the
    plugin and the member. A UsageError is the plugin's own one-line refusal and passes through."""
    try:
        return function(*args, **kwargs)
    except UsageError:
        raise
    except (Exception, SystemExit) as error:  # noqa: BLE001
        name = getattr(owner, "name", type(owner).__name__)
        raise UsageError(
            f"task plugin {name!r}: {member} raised {type(error).__name__}: "
            f"{str(error)[:200]}; fix or uninstall that plugin"
        ) from None


def checked_vocabulary(task, tokens):
    if not (isinstance(tokens, list) and tokens and all(isinstance(t, str) for t in tokens)):
        raise UsageError(
            f"task plugin {task.name!r}: vocabulary() must return a non-empty list of strings, "
            f"got {type(tokens).__name__}"
        )
    if len(set(tokens)) != len(tokens):  # two ids would print as one word in every report
        repeated = next(t for i, t in enumerate(tokens) if t in tokens[:i])
        raise UsageError(
            f"task plugin {task.name!r}: vocabulary() lists {repeated!r} twice; every token string must be distinct"
        )
    broken = next((i for i, t in enumerate(tokens) if not_unicode(t)), None)
    if broken is not None:  # it would be written into report.json and the exports, which readers refuse
        raise UsageError(
            f"task plugin {task.name!r}: vocabulary() token {broken} ({ascii(tokens[broken])[:60]}) "
            "holds a lone surrogate, which is not Unicode text; give every token valid Unicode"
        )
    return tokens


def checked_training(task, overrides):
    if not isinstance(overrides, dict):
        raise UsageError(
            f"task plugin {task.name!r}: default_training() must return a dict of "
            f"TrainSettings fields, got {type(overrides).__name__}"
        )
    return overrides


def checked_model_training(task, overrides, model_name):
    if not isinstance(overrides, dict):
        raise UsageError(
            f"task plugin {task.name!r}: model_training({model_name!r}) must return a dict of "
            f"TrainSettings fields, got {type(overrides).__name__}"
        )
    return overrides


def checked_expected_circuit(task, edges, model_name, spec):
    """None, or edges of the model's graph on both sides of the AUROC it is scored by."""
    from models.graph import graph_of

    if edges is None:
        return None
    graph = frozenset(graph_of(spec).edges)
    rule = (
        f"task plugin {task.name!r}: expected_circuit({model_name!r}, spec) must return None or a frozenset "
        f"of some, not all, of the {len(graph)} edges of models.graph.graph_of(spec)"
    )
    if not isinstance(edges, (set, frozenset)):
        raise UsageError(f"{rule}, got {type(edges).__name__}")
    stray = next((edge for edge in edges if edge not in graph), None)
    if stray is not None:
        raise UsageError(f"{rule}; {stray!r} is not one of them")
    if not edges or edges == graph:
        raise UsageError(f"{rule}, got {'none' if not edges else 'all'} of them")
    return frozenset(edges)


def checked_domain(task, domain):
    if domain is not None and not (isinstance(domain, Domain) and isinstance(domain.size, int) and domain.size > 0):
        raise UsageError(
            f"task plugin {task.name!r}: domain() must return None or a tasks.base.Domain with a positive "
            f"integer size, got {type(domain).__name__}"
        )
    return domain


# default_models() is checked by tasks.validate.validate_family, before anything trains; a domain's
# examples by tasks.validate.validate_domain.
RESULT_CHECKS: dict[str, Callable[..., object]] = {
    "domain": checked_domain,
    "vocabulary": checked_vocabulary,
    "default_training": checked_training,
    "model_training": checked_model_training,
    "expected_circuit": checked_expected_circuit,
}


def guarded(member: str, method):
    """`method` with every failure made one line naming the plugin and `member`, and its result
    checked where the toolkit relies on its type."""
    check = RESULT_CHECKS.get(member)

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        result = plugin_call(self, f"{member}()", method, self, *args, **kwargs)
        return check(self, result, *args, **kwargs) if check else result

    call.guarded = True  # type: ignore[attr-defined]  # a marker on the wrapper, read by getattr in __init_subclass__
    return call


class Task(ABC):
    """Subclass, set `name` and `Params`, implement the abstract methods, register the class."""

    name: ClassVar[str]
    Params: ClassVar[type] = NoParams
    # True when no token sequence may occur in two splits (the held-out set is truly unseen).
    disjoint_splits: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs):
        # Every call the toolkit makes into a plugin goes through these guards, wherever it is made.
        super().__init_subclass__(**kwargs)
        for member in (
            "__init__",
            "vocabulary",
            "generate",
            "default_models",
            "default_training",
            "model_training",
            "expected_circuit",
            "domain",
        ):
            method = cls.__dict__.get(member)
            if callable(method) and not getattr(method, "guarded", False):
                setattr(cls, member, guarded(member, method))

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
        """Overrides of `tasks.settings.TrainSettings` fields for this task."""
        return {}

    def model_training(self, model_name: str) -> dict:
        """Overrides for one model of the family, on top of `default_training()` (e.g. a lower lr
        or a shorter budget for the block models); the command line overrides both."""
        return {}

    def expected_circuit(self, model_name: str, spec: ModelSpec) -> frozenset | None:
        """Optionally, the edges (`models.graph.Edge`s of `models.graph.graph_of(spec)`) this model
        is expected to use, known by construction; circuit methods are then scored against them.
        None (the default): not known."""
        return None

    def domain(self) -> Domain | None:
        """Optionally, every input the task can pose (a Domain: its size and its i-th example), so a
        circuit can be certified on all of them, or on a uniform sample said to be one. None (the
        default): not declared."""
        return None

    def decode(self, tokens) -> str:
        vocabulary = self.vocabulary()
        return " ".join(vocabulary[int(t)] for t in tokens)

    def params_dict(self) -> dict:
        return dataclasses.asdict(self.params)


def standard_family(d_model: int = 128, n_heads: int = 4, layers: tuple[int, ...] = (1, 2)) -> dict[str, ModelSpec]:
    """The family the built-in tasks train, for a plugin's default_models(): the order-blind bag of
    words (the baseline a task must defeat), attention-only models of one head per block
    (`attn-only-1x1`, `attn-only-2x1`, ... for each of `layers`), and full blocks with `n_heads`
    heads and an MLP (`block-1`, `block-2`, ...)."""
    family = {
        "bag-of-words": ModelSpec(
            n_layers=1, d_model=d_model, n_heads=n_heads, attention=Attention.UNIFORM, positions=Positions.NONE
        )
    }
    family.update({f"attn-only-{n}x1": ModelSpec(n_layers=n, d_model=d_model, n_heads=1, mlp=False) for n in layers})
    family.update({f"block-{n}": ModelSpec(n_layers=n, d_model=d_model, n_heads=n_heads) for n in layers})
    return family
