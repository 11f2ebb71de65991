"""The induction task: repeat lengths vary, held-out sequences are unseen, answers are the
repeat's next tokens, and every counterfactual answer differs."""

from __future__ import annotations

import pytest

from models import UsageError
from tasks.induction import InductionParams, InductionTask
from tasks.validate import validate_task_examples


@pytest.fixture(scope="module")
def task():
    return InductionTask(InductionParams(tokens=16, min_repeat=4, max_repeat=9, train=400, validation=40, heldout=80))


@pytest.fixture(scope="module")
def splits(task):
    return validate_task_examples(task, seed=3)  # contract checks: disjoint, deterministic, in range


def first_half(example):
    return example.tokens[1 : (len(example.tokens) - 1) // 2 + 1]


def test_sequences_are_bos_then_a_repeated_block(task, splits):
    for example in splits["train"][:50]:
        repeat = (len(example.tokens) - 1) // 2
        assert example.tokens[0] == task.vocabulary().index("<bos>")
        assert example.tokens[1 : repeat + 1] == example.tokens[repeat + 1 :]
        assert len(set(first_half(example))) == repeat  # distinct: one successor per token


def test_repeat_length_varies_within_bounds(splits):
    lengths = {(len(e.tokens) - 1) // 2 for e in splits["train"]}
    assert lengths == set(range(4, 10))


def test_scored_positions_start_at_the_second_repeated_token(splits):
    for example in splits["heldout"][:50]:
        repeat = (len(example.tokens) - 1) // 2
        assert example.positions == tuple(range(repeat + 1, 2 * repeat))
        assert example.answers == first_half(example)[1:]


def test_heldout_sequences_never_occur_in_training(splits):
    seen = {first_half(e) for e in splits["train"]}
    assert not seen & {first_half(e) for e in splits["heldout"] + splits["validation"]}


def test_counterfactual_shuffles_the_first_half_and_changes_every_answer(splits):
    for example in splits["heldout"]:
        repeat = (len(example.tokens) - 1) // 2
        corrupt = example.counterfactual
        assert corrupt[repeat + 1 :] == example.tokens[repeat + 1 :]  # the queries stay
        assert sorted(corrupt[1 : repeat + 1]) == sorted(first_half(example))  # same bag of tokens
        successor = dict(zip(corrupt[1:repeat], corrupt[2 : repeat + 1]))
        for position, answer in zip(example.positions, example.answers):
            assert successor.get(example.tokens[position]) != answer


def test_generation_depends_on_the_seed(task):
    assert task.generate(0)["train"][:5] != task.generate(1)["train"][:5]


@pytest.mark.parametrize(
    "params",
    [
        InductionParams(min_repeat=1),
        InductionParams(min_repeat=9, max_repeat=8),
        InductionParams(tokens=4, min_repeat=2, max_repeat=3),
        InductionParams(train=0),
    ],
)
def test_bad_parameters_are_refused_in_one_line(params):
    with pytest.raises(UsageError):
        InductionTask(params)


def test_registered_as_a_plugin():
    from tasks.registry import get_task_class

    assert get_task_class("induction") is InductionTask
