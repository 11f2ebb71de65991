"""A malformed plugin is refused with one line naming the plugin, the example and the rule it broke."""

from __future__ import annotations

import random
import sys
import textwrap

import pytest

from models import ModelSpec, UsageError
from tasks.base import Example, Task
from tasks.registry import task_classes
from tasks.validate import validate_task_examples

VOCABULARY = ["a", "b", "c", "d"]


def good(offset: int = 0) -> Example:
    """A well-formed example: `a b c` scored at position 1 (answer c), foil d, partner `a b d`."""
    return Example(
        tokens=(0, 1, 2 + offset % 2), positions=(1,), foils=(3 - offset % 2,), counterfactual=(0, 1, 3 - offset % 2)
    )


class FakeTask(Task):
    """A task whose splits are whatever the test puts in `splits`."""

    name = "fake"
    splits: dict = {}

    def vocabulary(self):
        return VOCABULARY

    def generate(self, seed):
        return {split: list(examples) for split, examples in self.splits.items()}

    def default_models(self):
        return {"tiny": ModelSpec(d_model=8, n_heads=1)}


def fake(train: list[Example], disjoint: bool = False) -> Task:
    cls = type(
        "Fake",
        (FakeTask,),
        {"splits": {"train": train, "validation": [good()], "heldout": [good(1)]}, "disjoint_splits": disjoint},
    )
    return cls()


def refusal(task: Task) -> str:
    with pytest.raises(UsageError) as caught:
        validate_task_examples(task, seed=0)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("task plugin 'fake': ")
    return message


def test_a_well_formed_task_passes():
    assert validate_task_examples(fake([good(), good(1), good()]), seed=0)["train"][1] == good(1)


def test_scored_position_out_of_range():
    bad = Example(tokens=(0, 1, 2), positions=(2,))
    message = refusal(fake([good(), bad]))
    assert "train example 1 has scored position 2 out of range" in message
    assert "tokens[2+1] must exist in a sequence of length 3" in message


def test_answer_not_in_vocabulary():
    bad = Example(tokens=(0, 1, 7), positions=(1,))
    assert "train example 0 has answer id 7 (tokens[1+1]) that is not in the vocabulary (ids 0..3)" in refusal(
        fake([bad])
    )


def test_token_strings_instead_of_ids():
    bad = Example(tokens=("a", "b", "c"), positions=(1,))
    assert "train example 0 has 'a' in tokens, which must be a tuple of ints" in refusal(fake([bad]))


def test_counterfactual_of_a_different_length():
    bad = Example(tokens=(0, 1, 2), positions=(1,), counterfactual=(0, 1, 3, 3))
    message = refusal(fake([good(), good(1), bad]))
    assert "train example 2 has a counterfactual of length 4, not 3; patching needs aligned positions" in message


def test_overlapping_splits_when_they_must_be_disjoint():
    message = refusal(fake([good(1), good(0)], disjoint=True))
    assert "validation example 0 also occurs in split 'train'; splits must not overlap" in message


def test_overlapping_splits_allowed_when_declared():
    assert validate_task_examples(fake([good(1), good(0)], disjoint=False), seed=0)


def test_non_deterministic_generation():
    class Unseeded(FakeTask):
        name = "fake"

        def generate(self, seed):
            rng = random.Random()  # the bug: not seeded with `seed`
            return {
                split: [good(rng.randrange(1000)) for _ in range(40)] for split in ("train", "validation", "heldout")
            }

    message = refusal(Unseeded())
    assert "differs between two calls of generate(seed=0); generation must be deterministic" in message
    assert " example " in message


def test_missing_split():
    task = fake([good()])
    task.splits = {"train": [good()], "heldout": [good(1)]}
    assert "generate() must return a dict with exactly the splits ['train', 'validation', 'heldout']" in refusal(task)


PLUGIN_SOURCE = textwrap.dedent('''
    from tasks.base import Task

    class Plugin(Task):
        """A fake plugin that claims the name winograd."""
        name = "winograd"
        def vocabulary(self): return ["a"]
        def generate(self, seed): return {}
        def default_models(self): return {}

    def make():
        pass
''')


def install_fake_plugin(root, monkeypatch, dist: str, entry: str) -> None:
    """A minimal installed distribution on sys.path: a dist-info folder naming one entry point."""
    info = root / f"{dist.replace('-', '_')}-0.1.dist-info"  # the folder name is parsed for the name
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[toylens.tasks]\n{entry}\n")
    (root / "fake_plugin.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.delitem(sys.modules, "fake_plugin", raising=False)


def test_two_plugins_with_one_name(tmp_path, monkeypatch):
    install_fake_plugin(tmp_path, monkeypatch, "toylens-copycat", "winograd = fake_plugin:Plugin")
    with pytest.raises(UsageError) as caught:
        task_classes()
    message = str(caught.value)
    assert message.startswith("two task plugins are named 'winograd': ")
    assert "from package toylens-copycat" in message and "WinogradTask from package toylens;" in message
    assert message.endswith("uninstall one or rename its task")


def test_a_plugin_that_is_not_a_task(tmp_path, monkeypatch):
    install_fake_plugin(tmp_path, monkeypatch, "toylens-oops", "oops = fake_plugin:make")
    with pytest.raises(
        UsageError,
        match=r"^task plugin 'oops' \(fake_plugin:make from package toylens-oops\) "
        r"is not a subclass of tasks.base.Task",
    ):
        task_classes()


def test_a_plugin_that_fails_to_import(tmp_path, monkeypatch):
    install_fake_plugin(tmp_path, monkeypatch, "toylens-broken", "broken = fake_plugin_missing:Plugin")
    with pytest.raises(
        UsageError,
        match=r"^task plugin 'broken' \(fake_plugin_missing:Plugin from package "
        r"toylens-broken\) failed to import: ModuleNotFoundError",
    ):
        task_classes()


@pytest.mark.parametrize(
    "family, fragments",
    [
        (
            {"tiny": ModelSpec(d_model=8, n_heads=1), "odd": ModelSpec(d_model=32, n_heads=3)},
            ("task plugin 'fake'", "default model 'odd'", "n_heads=3 does not divide d_model=32"),
        ),
        ([ModelSpec()], ("task plugin 'fake'", "default_models()", "got list")),
        ({"bad": "block-1"}, ("task plugin 'fake'", "default model 'bad'", "not a ModelSpec")),
        # A model named report had its trained runs replaced when `--report` published runs/<task>/report.
        ({"report": ModelSpec(d_model=8, n_heads=1)}, ("task plugin 'fake'", "model name 'report' is taken", "rename")),
    ],
)
def test_a_bad_default_family_is_refused_before_training(family, fragments):
    from tasks.validate import validate_family

    class BadFamily(FakeTask):
        def default_models(self):
            return family

    with pytest.raises(UsageError) as refused:
        validate_family(BadFamily())
    for fragment in fragments:
        assert fragment in str(refused.value)


def test_a_slow_generate_says_what_toylens_is_waiting_for(monkeypatch, capsys):
    import time

    import tasks.validate as validate

    class Slow(FakeTask):
        splits = {"train": [good(0)], "validation": [good(1)], "heldout": [good(2)]}

        def generate(self, seed):
            time.sleep(0.3)
            return super().generate(seed)

    monkeypatch.setattr(validate, "SLOW_GENERATE_SECONDS", 0.1)
    validate.generated(Slow(), 3)
    assert "waiting for task plugin 'fake': generate(seed=3) has run" in capsys.readouterr().err


def test_a_plugin_hidden_by_a_folder_of_its_name_is_named_as_such(tmp_path, monkeypatch):
    """Run from the folder holding the plugin's project folder `shadowed_plugin/`, Python imports
    that folder (a namespace package) instead of the installed module."""
    (tmp_path / "site").mkdir()
    install_fake_plugin(tmp_path / "site", monkeypatch, "toylens-shadowed", "shadowed = shadowed_plugin:Plugin")
    (tmp_path / "cwd" / "shadowed_plugin").mkdir(parents=True)
    monkeypatch.syspath_prepend(str(tmp_path / "cwd"))
    monkeypatch.delitem(sys.modules, "shadowed_plugin", raising=False)
    with pytest.raises(
        UsageError,
        match=r"^task plugin 'shadowed': module 'shadowed_plugin' was found as the "
        r"folder .*shadowed_plugin .*run from another folder$",
    ):
        task_classes()


# ---- mistakes a plugin author makes (found by writing unseen plugins against the guide) ---------


def test_a_group_that_is_not_a_string_is_one_line():
    bad = Example(tokens=(0, 1, 2), positions=(1,), group=3, counterfactual=(0, 1, 3))
    assert "train example 1 has group 3; a group must be a str label" in refusal(fake([good(), bad]))


def test_a_position_scored_twice():
    bad = Example(tokens=(0, 1, 2, 3), positions=(1, 1), counterfactual=(0, 1, 3, 3))
    assert "train example 0 scores a position twice (positions (1, 1))" in refusal(fake([bad]))


def test_a_split_where_only_some_examples_have_a_partner():
    # Before: the split silently had no counterfactuals and the report said the task declares none.
    lacking = Example(tokens=(0, 1, 3), positions=(1,))
    assert "train example 1 has no counterfactual while 2 of the 3 examples of its split have one" in refusal(
        fake([good(), lacking, good(1)])
    )


@pytest.mark.parametrize(
    "example, fragment",
    [
        (
            Example(tokens=(0, 1, 2), positions=(1,), foils=(9,)),
            "has foil id 9 that is not in the vocabulary (ids 0..3",
        ),
        (
            Example(tokens=(0, 1, 2), positions=(1,), counterfactual=(0, 1, 8)),
            "has counterfactual token id 8 outside the vocabulary (ids 0..3)",
        ),
    ],
)
def test_an_id_outside_the_vocabulary_is_named(example, fragment):
    assert fragment in refusal(fake([example]))


def test_a_vocabulary_listing_a_token_twice():
    class Repeats(FakeTask):
        def vocabulary(self):
            return ["a", "b", "a", "c"]

    with pytest.raises(UsageError, match=r"^task plugin 'fake': vocabulary\(\) lists 'a' twice"):
        Repeats().vocabulary()


@pytest.mark.parametrize(
    "declared, fragment",
    [
        (lambda graph: ["L0H0"], "got list"),
        (lambda graph: frozenset({"L0H0"}), "'L0H0' is not one of them"),
        (lambda graph: frozenset(graph.edges), "got all of them"),
        (lambda graph: frozenset(), "got none of them"),
    ],
)
def test_an_expected_circuit_that_is_not_edges_of_the_graph_is_refused(declared, fragment):
    from models.graph import graph_of
    from tasks.validate import validate_family

    spec = ModelSpec(d_model=8, n_heads=1, mlp=False)

    class Declares(FakeTask):
        def expected_circuit(self, model_name, spec):
            return declared(graph_of(spec))

    with pytest.raises(UsageError) as refused:
        Declares().expected_circuit("tiny", spec)
    message = str(refused.value)
    assert message.startswith("task plugin 'fake': expected_circuit('tiny', spec) must return None or a frozenset")
    assert fragment in message and "\n" not in message
    with pytest.raises(UsageError, match="expected_circuit"):  # before anything trains
        validate_family(Declares())
    some = frozenset(list(graph_of(spec).edges)[:2])
    assert (
        type("Fine", (FakeTask,), {"expected_circuit": lambda self, n, s: some})().expected_circuit("tiny", spec)
        == some
    )


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("Params = object", "Params must be a frozen dataclass (the class, not an instance), got <class 'object'>"),
        ("Params = NoParams()", "Params must be a frozen dataclass (the class, not an instance), got NoParams()"),
        ("name = None", "has no task name; give the class `name = 'shapeless'`"),
    ],
)
def test_a_plugin_class_of_the_wrong_shape_is_one_line(tmp_path, monkeypatch, body, fragment):
    # Before: tracebacks from dataclasses.fields, Task.__init__ or `task.name` in every command.
    from importlib.metadata import EntryPoint

    (tmp_path / "shapeless_plugin.py").write_text(
        textwrap.dedent(f"""
        from tasks.base import NoParams
        from tests.test_validation import FakeTask

        class Plugin(FakeTask):
            {body}
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "shapeless_plugin", raising=False)
    with pytest.raises(UsageError) as refused:
        task_classes([EntryPoint("shapeless", "shapeless_plugin:Plugin", "toylens.tasks")])
    assert str(refused.value).startswith("task plugin 'shapeless' (shapeless_plugin:Plugin from package ")
    assert fragment in str(refused.value)
