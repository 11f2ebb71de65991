"""Data validity as properties: for any task parameters and seed, generation is deterministic, the
held-out split is built the way the task promises, and counterfactuals differ exactly where the
answer should change."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from models import UsageError
from tasks.base import SPLITS
from tasks.validate import validate_task_examples
from tasks.winograd import CROSSED_ADJECTIVES, CROSSER_ADJECTIVES, TEMPLATE, WinogradParams, WinogradTask

FEW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOTS = TEMPLATE.split()
X, Y, ADJECTIVE, REFERENT = (SLOTS.index(slot) for slot in ("{x}", "{y}", "{adj}", "{ref}"))
seeds = st.integers(min_value=0, max_value=2**32 - 1)


@st.composite
def winograd_tasks(draw) -> WinogradTask:
    heldout = draw(st.floats(min_value=0.05, max_value=0.8))
    validation = draw(st.floats(min_value=0.05, max_value=0.9 - heldout))
    params = WinogradParams(
        nouns=2 * draw(st.integers(min_value=2, max_value=8)),
        heldout_fraction=heldout,
        validation_fraction=validation,
        leaky=draw(st.booleans()),
    )
    try:
        return WinogradTask(params)
    except UsageError:
        assume(False)  # a split would be empty: the task refuses such parameters up front


def ordered_pairs(task: WinogradTask, examples) -> set[tuple[str, str]]:
    vocabulary = task.vocabulary()
    return {(vocabulary[e.tokens[X]], vocabulary[e.tokens[Y]]) for e in examples}


@FEW
@given(winograd_tasks(), seeds)
def test_winograd_generation_is_deterministic_and_valid(task, seed):
    splits = validate_task_examples(task, seed)  # contract, determinism, no sequence in two splits
    again = WinogradTask(task.params).generate(seed)
    assert splits == again


@FEW
@given(winograd_tasks(), seeds)
def test_winograd_heldout_pairs_are_unseen_and_their_reverse_is_trained(task, seed):
    splits = task.generate(seed)
    train = ordered_pairs(task, splits["train"])
    for split in ("heldout", "validation"):
        pairs = ordered_pairs(task, splits[split])
        assert pairs, split
        assert not pairs & train, f"{split} pair also in train"
        assert all((y, x) in train for x, y in pairs), f"a {split} pair's reverse is not in train"
    assert not ordered_pairs(task, splits["heldout"]) & ordered_pairs(task, splits["validation"])


@FEW
@given(winograd_tasks(), seeds)
def test_winograd_counterfactual_changes_exactly_the_adjective_and_the_answer(task, seed):
    vocabulary = task.vocabulary()
    roles = {vocabulary.index(a): 0 for a in CROSSER_ADJECTIVES} | {vocabulary.index(a): 1 for a in CROSSED_ADJECTIVES}
    for examples in task.generate(seed).values():
        for example in examples:
            clean, corrupt = example.tokens, example.counterfactual
            changed = {i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b}
            assert len(clean) == len(corrupt) and changed == {ADJECTIVE, REFERENT}
            assert roles[clean[ADJECTIVE]] != roles[corrupt[ADJECTIVE]]
            assert corrupt[REFERENT] == example.foils[0]  # the answer flips to the other noun
            assert {clean[REFERENT], corrupt[REFERENT]} == {clean[X], clean[Y]}
            assert example.answers == (clean[REFERENT],)


def induction_class():
    from tasks.registry import task_classes

    cls = task_classes().get("induction")
    if cls is None:
        pytest.skip("induction task not installed")
    return cls


@st.composite
def induction_tasks(draw):
    cls = induction_class()
    low = draw(st.integers(min_value=2, max_value=8))
    params = cls.Params(
        tokens=draw(st.integers(min_value=max(4, low), max_value=30)),
        min_repeat=low,
        max_repeat=draw(st.integers(min_value=low, max_value=10)),
        train=draw(st.integers(min_value=1, max_value=60)),
        validation=draw(st.integers(min_value=1, max_value=10)),
        heldout=draw(st.integers(min_value=1, max_value=10)),
    )
    try:
        return cls(params)
    except UsageError:
        assume(False)  # too few distinct sequences for these sizes: the task refuses, rightly


@FEW
@given(induction_tasks(), seeds)
def test_induction_generation_is_deterministic_and_splits_are_disjoint(task, seed):
    splits = validate_task_examples(task, seed)
    assert splits == type(task)(task.params).generate(seed)
    seen = [{e.tokens for e in splits[name]} for name in SPLITS]
    assert sum(map(len, seen)) == len(set().union(*seen))


@FEW
@given(induction_tasks(), seeds)
def test_induction_counterfactual_changes_every_induction_answer(task, seed):
    for examples in task.generate(seed).values():
        for example in examples:
            repeat = (len(example.tokens) - 1) // 2
            clean, corrupt = example.tokens, example.counterfactual
            assert corrupt[repeat + 1 :] == clean[repeat + 1 :]  # the repeat itself is kept
            assert sorted(corrupt[1 : repeat + 1]) == sorted(clean[1 : repeat + 1])
            successor = {a: b for a, b in zip(corrupt[1:repeat], corrupt[2 : repeat + 1])}
            for position, answer in zip(example.positions, example.answers):
                assert clean[position + 1 - repeat] == answer  # answer = successor in the first copy
                assert successor.get(clean[position]) != answer  # ...which the counterfactual moves
