"""Issue 15, items 8-13: malformed files, absurd sizes, a full disk, non-finite weights, Ctrl-C with
worker processes, and plugins that misbehave. Each ends with exit 2 (130 for Ctrl-C) and one line."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from common.cli import UsageError
from tests.test_adversarial import RUN, TRAIN, cli, contents, copy_runs, edit_json, one_line


def in_process(main, argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    captured = capsys.readouterr()
    return stopped.value.code, captured.out, captured.err


# --- 8. one schema check per file ----------------------------------------------------------------------

def deep(path: Path) -> None:
    path.write_text("[" * 200_000 + "]" * 200_000)


def metrics_edit(change):
    return lambda out: edit_json(out / RUN / "metrics.json", change)


MALFORMED = {
    "config nested 200,000 deep": (lambda out: deep(out / RUN / "config.json"), "nested too deeply"),
    "metrics nested 200,000 deep": (lambda out: deep(out / RUN / "metrics.json"), "nested too deeply"),
    "task a string": (lambda out: edit_json(out / RUN / "config.json", lambda c: c.update(task="winograd"), True),
                      "task must be"),
    "task null": (lambda out: edit_json(out / RUN / "config.json", lambda c: c.update(task=None), True),
                  "task must be"),
    "seed 'abc'": (lambda out: edit_json(out / RUN / "config.json", lambda c: c.update(seed="abc"), True),
                   "seed must be"),
    "seed 1e30": (lambda out: edit_json(out / RUN / "config.json", lambda c: c.update(seed=1e30), True),
                  "seed must be"),
    "data_seed 'x'": (lambda out: edit_json(out / RUN / "config.json", lambda c: c.update(data_seed="x"), True),
                      "data_seed must be"),
    "model_name a dict": (lambda out: edit_json(out / RUN / "config.json", lambda c: c.update(model_name={}), True),
                          "model_name"),
    "metrics steps 'abc'": (metrics_edit(lambda m: m.update(steps="abc")), "steps must be an integer"),
    "metrics without held-out": (metrics_edit(lambda m: m["accuracy"].pop("heldout")), "accuracy must map"),
    # Also seen: probes.accuracy printed a held-out accuracy edited into metrics.json.
    "metrics accuracy edited": (metrics_edit(lambda m: m["evaluation"]["splits"]["heldout"]["accuracy"].update(
        value=0.123)), "was changed after toylens wrote it"),
}


@pytest.mark.parametrize("damage", MALFORMED)
def test_malformed_files_are_refused_with_one_line(tiny_runs, tmp_path, capsys, damage):
    from toylens.accuracy import main

    apply, fragment = MALFORMED[damage]
    out = copy_runs(tiny_runs, tmp_path)
    apply(out)
    one_line(in_process(main, [str(out)], capsys), fragment)


def test_a_malformed_config_is_refused_by_the_cli_too(tiny_runs, tmp_path):
    out = copy_runs(tiny_runs, tmp_path)
    deep(out / RUN / "config.json")
    one_line(cli("probes.circuit", "report", str(out), "--jobs", "1"), "nested too deeply")


# --- 9. absurd sizes are refused before anything is allocated ------------------------------------------

INDUCTION = ("tasks", "train", "induction", "--no-progress", "--seeds", "1", "--models", "attn-only-1x4")


@pytest.mark.parametrize("argv, fragment", [
    (("--tokens", "100000", "--max-repeat", "100000"), "max_repeat <= 256"),
    (("--train", "1000000000"), "train must be a number of sequences from 1 to 1000000"),
    (("--min-repeat", "5000", "--max-repeat", "5000", "--train", "100"), "max_repeat <= 256"),
])
def test_absurd_task_parameters_are_refused_at_once(tmp_path, argv, fragment):
    started = time.monotonic()
    one_line(cli(*INDUCTION, *argv, "--out", str(tmp_path / "runs")), fragment)
    assert time.monotonic() - started < 60 and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("field, value, fragment", [
    ("n_ctx", 10**9, "n_ctx must be an integer from 1 to 65536"),
    ("d_model", 2**20, "d_model must be an integer from 1 to 16384"),
    ("n_layers", 10**5, "n_layers must be an integer from 1 to 256"),
    ("n_ctx", 65536, "more than toylens's limit of 16 GiB"),
    ("d_model", 8192, "do not belong together"),   # fits in memory, but not the weights on disk
])
def test_absurd_model_sizes_in_a_config_are_refused_before_allocating(tiny_runs, tmp_path, capsys, field, value,
                                                                      fragment):
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    edit_json(out / RUN / "config.json", lambda c: c["spec"].update({field: value, "n_heads": 1}), sign=True)
    started = time.monotonic()
    one_line(in_process(main, [str(out)], capsys), fragment)
    assert time.monotonic() - started < 30


def test_a_model_too_big_to_train_is_refused_with_its_estimate():
    from models import ModelSpec

    with pytest.raises(UsageError, match=r"would need ~[0-9.]+ GiB at batch 64, more than toylens's limit of 16 GiB"):
        ModelSpec(n_layers=2, d_model=64, n_heads=4, n_ctx=4096, d_vocab=100).check_memory(64)


class Huge:
    """A plugin that makes `count` examples of `length` tokens (one shared example, so the list is cheap)."""

    def __init__(self, count: int, length: int):
        from tasks.base import Example

        self.example = Example(tokens=tuple([0, 1] * (length // 2)), positions=(0,))
        self.count = count

    def splits(self):
        return {"train": [self.example] * self.count, "validation": [self.example], "heldout": [self.example]}


@pytest.mark.parametrize("count, length, fragment", [(10_000_000, 4, "more than toylens's limit of 2000000"),
                                                     (10, 60_000, "60000-token example"),
                                                     (1_000_000, 4000, "GiB as tensors")])
def test_oversized_plugin_data_is_refused(count, length, fragment):
    from tests.test_validation import FakeTask
    from tasks.validate import validate_task_examples

    task = type("Big", (FakeTask,), {"splits": Huge(count, length).splits()})()
    with pytest.raises(UsageError, match=fragment):
        validate_task_examples(task, seed=0)


# --- 10. a full disk ------------------------------------------------------------------------------------

def test_a_full_disk_is_one_line(tmp_path):
    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.RLIM_INFINITY))

    out = tmp_path / "runs"
    one_line(cli(*TRAIN, "--out", str(out), env={"TOYLENS_CACHE": str(tmp_path / "cache")},
                 preexec_fn=small_files), "File too large")
    assert not list(out.rglob("*.tmp"))


# --- 11. non-finite weights and outputs ---------------------------------------------------------------

@pytest.mark.parametrize("value, fragment", [(float("nan"), "NaN or infinite value"),
                                             (float("inf"), "NaN or infinite value"),
                                             (3e38, "logits are NaN or infinite")])
def test_non_finite_weights_or_outputs_are_said(tiny_runs, tmp_path, capsys, value, fragment):
    import torch
    from safetensors.torch import load_file, save_file

    from common.jsonfiles import sha256_file
    from toylens.accuracy import main

    out = copy_runs(tiny_runs, tmp_path)
    before = contents(out)
    weights = out / RUN / "model.safetensors"
    state = load_file(str(weights))
    state = {k: torch.full_like(v, value) if v.is_floating_point() else v for k, v in state.items()}
    save_file(state, str(weights))
    edit_json(out / RUN / "config.json", lambda c: c.update(weights_sha256=sha256_file(weights)))
    one_line(in_process(main, [str(out)], capsys), fragment)
    assert contents(out).get("summary.json") == before.get("summary.json")   # no summary of NaN accuracies


# --- 12. Ctrl-C with worker processes -----------------------------------------------------------------

@pytest.mark.parametrize("command", ["train", "report"])
def test_ctrl_c_with_two_jobs_is_one_line(tiny_runs, tmp_path, command):
    if command == "train":
        argv = ("tasks.winograd", "train", "--models", "attn-only-2x1", "--seeds", "2", "--jobs", "2",
                "--steps", "100000", "--nouns", "6", "--no-progress", "--out", str(tmp_path / "runs"))
        ready = lambda: len(list((tmp_path / "runs").rglob("log.jsonl"))) >= 1   # noqa: E731
    else:
        out = copy_runs(tiny_runs, tmp_path)
        argv = ("probes.circuit", "report", str(out), "--jobs", "2")
        ready = lambda: any(p.name.startswith(".toylens-tmp.") and ".report.new" in p.name for p in out.iterdir())   # noqa: E731
    process = subprocess.Popen([sys.executable, "-m", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               text=True, start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 240
    while not ready():
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.1)
    time.sleep(1.0)   # workers started: one may be idle, waiting for a job
    os.killpg(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    lines = [line for line in stderr.splitlines() if line.strip() and "%|" not in line]   # not the progress bar
    assert process.returncode == 130, stderr
    assert len(lines) == 1 and lines[0].startswith("interrupted: ") and "Traceback" not in stderr, stderr


# --- 13. every call into plugin code ------------------------------------------------------------------

def plugin(**members):
    from tests.test_validation import FakeTask

    return type("Plugin", (FakeTask,), members)


def boom(*args, **kwargs):
    raise RuntimeError("boom")


@pytest.mark.parametrize("member, call", [
    ("generate", lambda t: __import__("tasks.validate").validate.validate_task_examples(t, 0)),
    ("vocabulary", lambda t: t.vocabulary()),
    ("default_models", lambda t: __import__("tasks.validate").validate.validate_family(t)),
    ("default_training", lambda t: t.default_training()),
    ("expected_circuit", lambda t: t.expected_circuit("tiny", t.default_models()["tiny"])),
])
@pytest.mark.parametrize("failure", ["raises", "exits", "wrong type"])
def test_a_failing_plugin_member_is_one_line_naming_it(member, call, failure):
    def exits(*args, **kwargs):
        sys.exit(0)

    body = {"raises": boom, "exits": exits, "wrong type": lambda self, *a: ["not", "a", "dict"] if member !=
            "vocabulary" else {"a": 1}}[failure]
    if failure == "wrong type" and member == "generate":
        body = lambda self, seed: [1, 2]   # noqa: E731
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
    from toylens.sweep import parse_grid, plan_sweep

    task_cls = plugin(Params=make_dataclass("Params", [("noise", float, 0.0)], frozen=True))
    with pytest.raises(UsageError, match="task 'fake' parameter noise must be a finite number, got nan"):
        build_task(task_cls, {"noise": float("nan")})
    with pytest.raises(UsageError, match="parameter noise must be a finite number, got inf"):
        plan_sweep(task_cls, {"noise": 0.0}, {}, None, [0], parse_grid(["noise=inf"], task_cls), tmp_path)
    assert not (tmp_path / "noise=inf").exists()


@pytest.mark.parametrize("field, kind, fragment", [("steps", "int", "already a train option"),
                                                   ("models", "str", "already a train option"),
                                                   ("sizes", "list", "must be int, float, str or bool")])
def test_plugin_params_that_cannot_be_flags_are_refused(field, kind, fragment):
    from dataclasses import field as dataclass_field, make_dataclass

    from common.cli import Parser
    from toylens.cli import add_train_arguments

    default = dataclass_field(default_factory=list) if kind == "list" else dataclass_field(default=kind == "int")
    params = make_dataclass("Params", [(field, kind, default)], frozen=True)
    with pytest.raises(UsageError, match=fragment):
        add_train_arguments(Parser(prog="x"), plugin(Params=params))


PLUGINS = {
    "exits on import": ("toylens-quitter", "quitter = quitter_plugin:Plugin",
                        "import sys\nsys.exit(0)\n", "quitter", "failed to import: SystemExit"),
    "claims winograd": ("toylens-copycat", "copycat = copycat_plugin:Plugin",
                        "from tasks.winograd import WinogradTask\nclass Plugin(WinogradTask):\n    pass\n",
                        "winograd", "two task plugins are named 'winograd'"),
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
    one_line(cli("tasks", "list", env=env), fragment)
    one_line(cli("tasks", "train", name, "--out", str(tmp_path / "runs"), env=env), fragment)
    if name == "winograd":
        one_line(cli("tasks.winograd", "train", "--out", str(tmp_path / "runs"), env=env), fragment)
    assert not (tmp_path / "runs").exists()
    assert contents(tmp_path).keys() == {f"{module}.py", f"{info.name}/METADATA", f"{info.name}/entry_points.txt"} \
        | {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("__pycache__/*")}
