"""Every call into plugin code is guarded: an exception, `sys.exit` or a result of the wrong type in
any member becomes one line naming the plugin and the member; plugins whose parameters cannot be
flags, that exit on import or claim another task's name, or generate oversized data are refused."""

from __future__ import annotations

import sys
import textwrap

import pytest

from common.cli import UsageError

from tests.refusals import cli, contents, one_line


class Huge:
    """A plugin that makes `count` examples of `length` tokens (one shared example, so the list is cheap)."""

    def __init__(self, count: int, length: int):
        from tasks.base import Example

        self.example = Example(tokens=tuple([0, 1] * (length // 2)), positions=(0,))
        self.count = count

    def splits(self):
        return {"train": [self.example] * self.count, "validation": [self.example], "heldout": [self.example]}


@pytest.mark.parametrize(
    "count, length, fragment",
    [
        (10_000_000, 4, "more than toylens's limit of 2000000"),
        (10, 60_000, "60000-token example"),
        (1_000_000, 4000, "GiB as tensors"),
    ],
)
def test_oversized_plugin_data_is_refused(count, length, fragment):
    from tests.test_validation import FakeTask
    from tasks.validate import validate_task_examples

    task = type("Big", (FakeTask,), {"splits": Huge(count, length).splits()})()
    with pytest.raises(UsageError, match=fragment):
        validate_task_examples(task, seed=0)


def plugin(**members):
    from tests.test_validation import FakeTask

    return type("Plugin", (FakeTask,), members)


def boom(*args, **kwargs):
    raise RuntimeError("boom")


@pytest.mark.parametrize(
    "member, call",
    [
        ("generate", lambda t: __import__("tasks.validate").validate.validate_task_examples(t, 0)),
        ("vocabulary", lambda t: t.vocabulary()),
        ("default_models", lambda t: __import__("tasks.validate").validate.validate_family(t)),
        ("default_training", lambda t: t.default_training()),
        ("expected_circuit", lambda t: t.expected_circuit("tiny", t.default_models()["tiny"])),
    ],
)
@pytest.mark.parametrize("failure", ["raises", "exits", "wrong type"])
def test_a_failing_plugin_member_is_one_line_naming_it(member, call, failure):
    def exits(*args, **kwargs):
        sys.exit(0)

    body = {
        "raises": boom,
        "exits": exits,
        "wrong type": lambda self, *a: ["not", "a", "dict"] if member != "vocabulary" else {"a": 1},
    }[failure]
    if failure == "wrong type" and member == "generate":
        body = lambda self, seed: [1, 2]  # noqa: E731
    task = plugin(**{member: body})()
    with pytest.raises(UsageError) as caught:
        call(task)
    message = str(caught.value)
    assert message.startswith("task plugin 'fake': ") and "\n" not in message
    assert member in message


def test_a_plugin_init_or_params_that_raises_is_one_line():
    from dataclasses import dataclass

    from tasks.registry import build_task

    @dataclass(frozen=True)
    class Params:
        size: int = 1

        def __post_init__(self):
            raise ValueError("bad size")

    with pytest.raises(UsageError, match="task plugin 'fake': Params raised ValueError: bad size"):
        build_task(plugin(Params=Params), {"size": 2})
    with pytest.raises(UsageError, match=r"task plugin 'fake': __init__\(\) raised RuntimeError: boom"):
        plugin(__init__=boom)()


def test_a_non_finite_float_parameter_is_refused_by_train_and_sweep(tmp_path):
    # nan reached config.json as bare NaN, and since nan != nan a rerun called its own run incompatible;
    # a sweep built its tasks without these checks and failed every run in the worker.
    from dataclasses import make_dataclass

    from tasks.registry import build_task
    from toylens.sweeps.plan import parse_grid, plan_sweep

    task_cls = plugin(Params=make_dataclass("Params", [("noise", float, 0.0)], frozen=True))
    with pytest.raises(UsageError, match="task 'fake' parameter noise must be a finite number, got nan"):
        build_task(task_cls, {"noise": float("nan")})
    with pytest.raises(UsageError, match="parameter noise must be a finite number, got inf"):
        plan_sweep(task_cls, {"noise": 0.0}, {}, None, [0], parse_grid(["noise=inf"], task_cls), tmp_path)
    assert not (tmp_path / "noise=inf").exists()


@pytest.mark.parametrize(
    "field, kind, fragment",
    [
        ("steps", "int", "already a train option"),
        ("models", "str", "already a train option"),
        ("sizes", "list", "must be int, float, str or bool"),
    ],
)
def test_plugin_params_that_cannot_be_flags_are_refused(field, kind, fragment):
    from dataclasses import field as dataclass_field, make_dataclass

    from common.cli import Parser
    from toylens.cli import add_train_arguments

    default = dataclass_field(default_factory=list) if kind == "list" else dataclass_field(default=kind == "int")
    params = make_dataclass("Params", [(field, kind, default)], frozen=True)
    with pytest.raises(UsageError, match=fragment):
        add_train_arguments(Parser(prog="x"), plugin(Params=params))


PLUGINS = {
    "exits on import": (
        "toylens-quitter",
        "quitter = quitter_plugin:Plugin",
        "import sys\nsys.exit(0)\n",
        "quitter",
        "failed to import: SystemExit",
    ),
    "claims winograd": (
        "toylens-copycat",
        "copycat = copycat_plugin:Plugin",
        "from tasks.winograd import WinogradTask\nclass Plugin(WinogradTask):\n    pass\n",
        "winograd",
        "two task plugins are named 'winograd'",
    ),
}


@pytest.mark.parametrize("case", PLUGINS)
def test_misbehaving_installed_plugins_are_refused_by_every_command(tmp_path, case):
    dist, entry, source, name, fragment = PLUGINS[case]
    module = entry.split("= ")[1].split(":")[0]
    info = tmp_path / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[toylens.tasks]\n{entry}\n")
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    env = {"PYTHONPATH": str(tmp_path)}
    one_line(cli("toylens", "list", env=env), fragment)
    one_line(cli("toylens", "train", name, "--out", str(tmp_path / "runs"), env=env), fragment)
    if name == "winograd":
        one_line(cli("tasks.winograd", "train", "--out", str(tmp_path / "runs"), env=env), fragment)
    assert not (tmp_path / "runs").exists()
    assert contents(tmp_path).keys() == {f"{module}.py", f"{info.name}/METADATA", f"{info.name}/entry_points.txt"} | {
        p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("__pycache__/*")
    }
