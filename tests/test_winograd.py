import pytest

from models import UsageError
from tasks.winograd import CROSSED_ADJECTIVES, CROSSER_ADJECTIVES, SCORED_POSITION, WinogradParams, WinogradTask


def noun_pairs(task, examples):
    vocabulary = task.vocabulary()
    return {(vocabulary[e.tokens[1]], vocabulary[e.tokens[6]]) for e in examples}


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_heldout_pairs_are_reversed_training_pairs_and_never_trained(seed):
    task = WinogradTask()
    splits = task.generate(seed)
    train, heldout = noun_pairs(task, splits["train"]), noun_pairs(task, splits["heldout"])
    validation = noun_pairs(task, splits["validation"])
    assert not heldout & train and not validation & train and not heldout & validation
    assert all((y, x) in train for x, y in heldout | validation)
    assert len(heldout) == 60  # half of the 120 unordered pairs of 16 nouns


def test_template_scored_position_answer_and_foil():
    task = WinogradTask()
    vocabulary = task.vocabulary()
    example = task.example("dog", "river", "tired")
    words = [vocabulary[t] for t in example.tokens]
    assert " ".join(words) == "the dog did not cross the river because it was too tired , so the dog waited ."
    assert SCORED_POSITION == 14 and words[SCORED_POSITION] == "the"
    assert vocabulary[example.answers[0]] == "dog" and vocabulary[example.foils[0]] == "river"
    assert example.group == "crosser"


def test_counterfactual_flips_the_adjective_role_and_the_answer():
    task = WinogradTask()
    for example in task.generate(0)["heldout"]:
        differs = [i for i, (a, b) in enumerate(zip(example.tokens, example.counterfactual)) if a != b]
        assert differs == [11, 15]
        assert example.counterfactual[15] == example.foils[0]


def test_roles_not_categories_decide_in_the_fixed_task():
    task = WinogradTask()
    vocabulary = task.vocabulary()
    for example in task.generate(0)["train"]:
        adjective = vocabulary[example.tokens[11]]
        slot = 1 if adjective in CROSSER_ADJECTIVES else 6
        assert example.answers[0] == example.tokens[slot]
    assert set(CROSSER_ADJECTIVES).isdisjoint(CROSSED_ADJECTIVES)


def test_leaky_variant_pairs_one_animal_with_one_place_and_category_decides():
    task = WinogradTask(WinogradParams(leaky=True))
    vocabulary = task.vocabulary()
    animals = set(task.nouns()[:8])
    for example in task.generate(0)["heldout"]:
        x, y, adjective = (vocabulary[example.tokens[i]] for i in (1, 6, 11))
        assert (x in animals) != (y in animals)
        animal = x if x in animals else y
        assert (vocabulary[example.answers[0]] == animal) == (adjective in CROSSER_ADJECTIVES)


def test_generation_is_deterministic_per_seed_and_differs_across_seeds():
    task = WinogradTask()
    assert task.generate(3) == task.generate(3)
    assert task.generate(3) != task.generate(4)


@pytest.mark.parametrize("params", [dict(nouns=3), dict(nouns=40), dict(heldout_fraction=0.95)])
def test_bad_parameters_are_refused(params):
    with pytest.raises(UsageError):
        WinogradTask(WinogradParams(**params))


def test_dataset_is_cached_by_fingerprint(small_winograd):
    from tasks.data import cache_root, fingerprint, task_dataset

    first = task_dataset(small_winograd, 0)
    cached = cache_root() / f"winograd-{fingerprint(small_winograd, 0)}"
    assert (cached / "dataset_dict.json").is_file()
    assert fingerprint(small_winograd, 0) != fingerprint(small_winograd, 1)
    # The second call reads the cache: generate() is not called again.
    calls = []
    original = type(small_winograd).generate
    type(small_winograd).generate = lambda self, seed: calls.append(seed) or original(self, seed)
    try:
        again = task_dataset(small_winograd, 0)
    finally:
        type(small_winograd).generate = original
    assert calls == [] and again["heldout"]["tokens"] == first["heldout"]["tokens"]
