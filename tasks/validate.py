"""Checks every generated example against the task contract, so a broken plugin fails with one
line naming the plugin, the example and the rule, instead of a shape error deep in training."""

from __future__ import annotations

import numbers
import re
from dataclasses import replace
from typing import TypeGuard

from common.cli import path_name
from common.jsonfiles import not_unicode
from models import ModelSpec, UsageError
from tasks.base import NO_FOIL, SPLITS, Domain, Example, Task, plugin_call


def refuse(task: Task, where: str, rule: str) -> UsageError:
    return UsageError(f"task plugin {task.name!r}: {where} {rule}")


# A toy task's data: sequences a toy model can attend over, and tensors that fit in memory.
MAX_LENGTH = 4096
MAX_EXAMPLES = 2_000_000
MAX_DATA_BYTES = 4 * 2**30
# What toylens writes beside the model folders of a runs (or sweep point) folder: a model of one of
# these names would be overwritten (publishing the report swaps in a new `report/`) or block it.
RESERVED_MODEL_NAMES = frozenset({"report", "edges", "census", "summary.json", "point.json"})


def validate_family(task: Task) -> dict[str, ModelSpec]:
    """The task's default models, each spec checked before anything trains (vocabulary size and
    context length are filled in from the data later, so placeholders stand in for them here)."""
    family = task.default_models()
    if not isinstance(family, dict) or not family:
        raise refuse(
            task, "default_models()", f"must return a non-empty dict of name -> ModelSpec, got {type(family).__name__}"
        )
    for name, spec in family.items():
        if not isinstance(name, str) or not isinstance(spec, ModelSpec):
            raise refuse(task, f"default model {name!r}", f"is a {type(spec).__name__}, not a ModelSpec")
        path_name(name, f"task plugin {task.name!r}: model name")  # it becomes a folder name
        if name in RESERVED_MODEL_NAMES:
            raise refuse(
                task,
                f"model name {name!r}",
                f"is taken by what toylens writes beside the runs "
                f"({', '.join(sorted(RESERVED_MODEL_NAMES))}); rename the model",
            )
        try:
            replace(spec, d_vocab=max(spec.d_vocab, 1)).validate()
        except UsageError as error:
            raise refuse(task, f"default model {name!r}:", str(error)) from None
        task.expected_circuit(name, spec)  # checked now, not after training when the report asks for it
    return family


SLOW_GENERATE_SECONDS = 10.0  # after this, say what toylens is waiting for, then every 30 s


def generated(task: Task, seed: int):
    """`task.generate(seed)`, saying on stderr what toylens waits for when a plugin takes long
    (a generator that never finishes would otherwise hang `train` with no output)."""
    import sys
    import threading
    import time

    done, start = threading.Event(), time.monotonic()

    def notify():
        wait = SLOW_GENERATE_SECONDS
        while not done.wait(wait):
            print(
                f"waiting for task plugin {task.name!r}: generate(seed={seed}) has run "
                f"{time.monotonic() - start:.0f} s (Ctrl-C stops it)",
                file=sys.stderr,
                flush=True,
            )
            wait = 30.0

    threading.Thread(target=notify, daemon=True).start()
    try:
        return task.generate(seed)
    finally:
        done.set()


def validate_task_examples(task: Task, seed: int) -> dict[str, list[Example]]:
    splits = generated(task, seed)
    if (
        not isinstance(splits, dict)
        or set(splits) != set(SPLITS)
        or not all(isinstance(v, (list, tuple)) for v in splits.values())
    ):
        got = sorted(map(str, splits)) if isinstance(splits, dict) else type(splits).__name__
        raise refuse(
            task, "generate()", f"must return a dict with exactly the splits {list(SPLITS)} (each a list), got {got}"
        )
    check_size(task, splits)
    vocabulary_size = len(task.vocabulary())
    for split, examples in splits.items():
        if not examples:
            raise refuse(task, f"split {split!r}", "is empty; every split needs examples")
        for index, example in enumerate(examples):
            check_example(task, f"{split} example {index}", example, vocabulary_size)
        check_partners(task, split, examples)
        check_role_names(task, split, examples)
    check_deterministic(task, seed, splits)
    if task.disjoint_splits:
        check_disjoint(task, splits)
    validate_domain(task)
    return splits


DOMAIN_CHECKS = 8  # a domain's examples checked when the task's data are built: the first, the last, a sample


def validate_domain(task: Task) -> Domain | None:
    """The task's declared domain, with its first, last and a few sampled examples checked against
    the example contract (a domain may hold millions: the rest are checked as a certificate reads them)."""
    domain = task.domain()
    if domain is not None:
        indices = sorted({0, domain.size - 1, *domain.sample(DOMAIN_CHECKS - 2, 0)})
        domain_examples(task, domain, indices)
    return domain


def domain_examples(task: Task, domain: Domain, indices: list[int]) -> list[Example]:
    """The domain's examples at `indices`, each made through the plugin guard and checked."""
    vocabulary_size, out = len(task.vocabulary()), []
    for i in indices:
        example = plugin_call(task, f"domain().example({i})", domain.example, i)
        check_example(task, f"domain example {i} of {domain.size}", example, vocabulary_size)
        out.append(example)
    return out


def check_size(task: Task, splits: dict) -> None:
    """Refuse data too big to pad into tensors, before the padding (or a model sized to it) is made."""
    count = sum(len(examples) for examples in splits.values())
    if count > MAX_EXAMPLES:
        raise refuse(task, "generate()", f"made {count} examples, more than toylens's limit of {MAX_EXAMPLES}")
    need = 0
    for split, examples in splits.items():
        lengths = [
            len(e.tokens) if isinstance(e, Example) and isinstance(e.tokens, (tuple, list)) else 0 for e in examples
        ]
        longest = max(lengths, default=0)
        if longest > MAX_LENGTH:
            raise refuse(
                task,
                f"split {split!r}",
                f"has a {longest}-token example, longer than toylens's limit of {MAX_LENGTH} tokens per sequence",
            )
        need += 2 * 8 * len(examples) * longest  # tokens and counterfactual, int64, padded
    if need > MAX_DATA_BYTES:
        raise refuse(
            task,
            "generate()",
            f"made data needing ~{need / 2**30:.1f} GiB as tensors, more than "
            f"toylens's limit of {MAX_DATA_BYTES / 2**30:.0f} GiB; make fewer or shorter examples",
        )


def check_example(task: Task, where: str, example: Example, vocabulary_size: int) -> None:
    if not isinstance(example, Example):
        raise refuse(task, where, f"is a {type(example).__name__}, not a tasks.base.Example")
    for field in ("tokens", "positions", "foils", "counterfactual"):
        value = getattr(example, field)
        bad = [v for v in value if not is_int(v)] if isinstance(value, (tuple, list)) else [value]
        if bad:
            raise refuse(
                task,
                where,
                f"has {bad[0]!r} in {field}, which must be a tuple of ints (token ids are indices into vocabulary())",
            )
    if not isinstance(example.group, str) or not_unicode(example.group):
        raise refuse(
            task, where, f"has group {example.group!a}; a group must be a str label of valid Unicode ('' for none)"
        )
    tokens = example.tokens
    if not example.positions:
        raise refuse(task, where, "has no scored positions")
    if len(set(example.positions)) != len(example.positions):
        # a repeated position would be scored, and counted in accuracy, twice
        raise refuse(
            task,
            where,
            f"scores a position twice (positions {tuple(example.positions)}); list each scored position once",
        )
    for position in example.positions:
        if not 0 <= position < len(tokens) - 1:
            raise refuse(
                task,
                where,
                f"has scored position {position} out of range: its answer "
                f"tokens[{position}+1] must exist in a sequence of length {len(tokens)}",
            )
    for position in example.positions:
        if not 0 <= tokens[position + 1] < vocabulary_size:
            raise refuse(
                task,
                where,
                f"has answer id {tokens[position + 1]} (tokens[{position}+1]) that is "
                f"not in the vocabulary (ids 0..{vocabulary_size - 1})",
            )
    if any(not 0 <= t < vocabulary_size for t in tokens):
        raise refuse(task, where, f"has a token id outside the vocabulary (0..{vocabulary_size - 1})")
    if example.foils and len(example.foils) != len(example.positions):
        raise refuse(task, where, "has a foil count different from its scored-position count")
    bad = [f for f in example.foils if f != NO_FOIL and not 0 <= f < vocabulary_size]
    if bad:
        raise refuse(
            task,
            where,
            f"has foil id {bad[0]} that is not in the vocabulary (ids 0..{vocabulary_size - 1}; NO_FOIL for none)",
        )
    if example.counterfactual and len(example.counterfactual) != len(tokens):
        raise refuse(
            task,
            where,
            f"has a counterfactual of length {len(example.counterfactual)}, "
            f"not {len(tokens)}; patching needs aligned positions",
        )
    bad = [t for t in example.counterfactual if not 0 <= t < vocabulary_size]
    if bad:
        raise refuse(
            task, where, f"has counterfactual token id {bad[0]} outside the vocabulary (ids 0..{vocabulary_size - 1})"
        )
    check_roles(task, where, example)


# A role name is printed inside report sentences and census labels: a word, never punctuation
# that the prose uses to separate clauses.
ROLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,39}")
ROLE_MEMBER = re.compile(r"(?P<set>[A-Za-z][A-Za-z0-9_]*)_(?P<index>[0-9]+)")  # probes.circuits.roles.MEMBER


def check_roles(task: Task, where: str, example: Example) -> None:
    roles = example.roles
    if not isinstance(roles, dict):
        raise refuse(
            task,
            where,
            f"has roles of type {type(roles).__name__}; roles must be a dict of "
            "role name -> position, e.g. {'binder_end': 7}",
        )
    for name, position in roles.items():
        if not (isinstance(name, str) and ROLE_NAME.fullmatch(name)):
            raise refuse(
                task,
                where,
                f"has role name {name!r}; a role name is a letter then letters, digits "
                "or '_' (at most 40), e.g. 'binder_end'",
            )
        if not is_int(position) or not 0 <= position < len(example.tokens) - 1:
            raise refuse(
                task,
                where,
                f"has role {name!r} at {position!r}; a role names an input position "
                f"0..{len(example.tokens) - 2} (one the model reads)",
            )
    check_role_sets(task, where, roles)


def check_role_sets(task: Task, where: str, roles: dict) -> None:
    """Roles NAME_0, NAME_1, ... form the role set NAME (e.g. every inside slot), measured as one
    region and its profile inside it: numbered from 0 without a gap, else a typo splits the set."""
    sets: dict[str, list[int]] = {}
    for name in roles:
        match = ROLE_MEMBER.fullmatch(name)
        if match:
            sets.setdefault(match["set"], []).append(int(match["index"]))
    for name, indices in sets.items():
        if len(indices) > 1 and sorted(indices) != list(range(len(indices))):
            raise refuse(
                task,
                where,
                f"names roles {name}_{sorted(indices)}; the members of a role set are numbered "
                f"{name}_0, {name}_1, ... without a gap",
            )


def check_role_names(task: Task, split: str, examples: list[Example]) -> None:
    """Roles are summarised over a split's examples: each must name the same ones."""
    first = set(examples[0].roles)
    for index, example in enumerate(examples):
        if set(example.roles) != first:
            raise refuse(
                task,
                f"{split} example {index}",
                f"names roles {sorted(example.roles)} while "
                f"{split} example 0 names {sorted(first)}; every example of a split names the same roles",
            )


def check_partners(task: Task, split: str, examples: list[Example]) -> None:
    """Patching needs a partner for every example of a split; a split with only some would silently
    have none, which is almost always a forgotten partner."""
    lacking = [index for index, example in enumerate(examples) if not example.counterfactual]
    if lacking and len(lacking) < len(examples):
        raise refuse(
            task,
            f"{split} example {lacking[0]}",
            f"has no counterfactual while "
            f"{len(examples) - len(lacking)} of the {len(examples)} examples of its split have one; "
            "give every example of a split a partner, or none",
        )


def is_int(value) -> TypeGuard[int]:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_deterministic(task: Task, seed: int, splits: dict[str, list[Example]]) -> None:
    again = generated(task, seed)
    for split in SPLITS:
        first, second = splits[split], again.get(split, []) if isinstance(again, dict) else []
        for index, example in enumerate(first):
            if index >= len(second) or second[index] != example:
                raise refuse(
                    task,
                    f"{split} example {index}",
                    f"differs between two calls of "
                    f"generate(seed={seed}); generation must be deterministic: draw all "
                    "randomness from a generator seeded with `seed`, e.g. random.Random(seed)",
                )
        if len(second) != len(first):
            raise refuse(
                task,
                f"split {split!r}",
                f"has {len(first)} then {len(second)} examples in two calls "
                f"of generate(seed={seed}); generation must be deterministic",
            )


def check_disjoint(task: Task, splits: dict[str, list[Example]]) -> None:
    seen: dict[tuple, str] = {}
    for split, examples in splits.items():
        for index, example in enumerate(examples):
            owner = seen.setdefault(tuple(example.tokens), split)
            if owner != split:
                raise refuse(
                    task,
                    f"{split} example {index}",
                    f"also occurs in split {owner!r}; "
                    "splits must not overlap (set disjoint_splits = False if they may)",
                )
