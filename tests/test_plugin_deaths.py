"""A task plugin that ends its own process (os._exit, SIGKILL of itself) while its runs train is one
line naming the plugin and exit 2, at any --jobs; one whose vocabulary changes between calls is
refused before anything trains."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from common.cli import UsageError
from tests.conftest import TINY_SPECS

DEATHS = {"os._exit": "os._exit(0)", "SIGKILL": "os.kill(os.getpid(), signal.SIGKILL)"}

PLUGIN = '''
import os
import signal

from tasks.winograd import WinogradTask


class Dying(WinogradTask):
    """Winograd whose data generation ends its own process."""

    name = "dying"

    def generate(self, seed):
        {death}
'''


def dying_task(tmp_path: Path, monkeypatch, death: str):
    """The plugin's class, from a module of its own on sys.path (as an installed plugin's is, so the
    spawned workers import it too)."""
    import importlib

    module = f"dying_plugin_{death.replace('.', '_').lower()}"
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(PLUGIN.format(death=DEATHS[death])))
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(module).Dying, module


def run_cli_in_child(body) -> tuple[int, str]:
    """(exit code, stderr) of `run_cli(body)` in a forked child: a plugin that kills its process must
    not take the test session with it, and the fork needs no start-up."""
    from common.cli import run_cli

    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        os.dup2(write, 2)
        sys.stderr = open(write, "w")  # pytest's capture replaced sys.stderr
        code = 0
        try:
            run_cli(body)
        except SystemExit as stop:
            code = stop.code
        finally:
            sys.stderr.flush()
            os._exit(code if isinstance(code, int) else 1)
    os.close(write)
    with os.fdopen(read) as stream:
        stderr = stream.read()
    _, status = os.waitpid(child, 0)
    return (os.waitstatus_to_exitcode(status), stderr)


@pytest.mark.isolated
@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("death", DEATHS)
def test_a_plugin_that_kills_its_process_is_one_line_naming_it(tmp_path, monkeypatch, small_winograd, death, jobs):
    # Seen: under --jobs 2 a BrokenProcessPool traceback; under --jobs 1 exit 0 with nothing printed,
    # or 137 with no line.
    from tasks.settings import TrainSettings
    from toylens.family import RunPlan, train_family

    task_cls, module = dying_task(tmp_path, monkeypatch, death)
    settings = TrainSettings(max_steps=5, batch_size=16, eval_every=5)
    out = tmp_path / "runs"
    plans = [
        RunPlan(task_cls(small_winograd.params), name, spec, 0, settings, out / name / "seed0")
        for name, spec in TINY_SPECS.items()
    ]
    code, stderr = run_cli_in_child(lambda: train_family(plans, progress=False, jobs=jobs))
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, stderr
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    assert lines[0].startswith("error: task plugin 'dying'") and module in lines[0], lines[0]
    assert ("exit code 0" if death == "os._exit" else "killed by signal 9") in lines[0], lines[0]


def test_a_plugin_whose_vocabulary_changes_between_calls_is_refused(small_winograd, tmp_path):
    from tasks.settings import TrainSettings
    from tasks.winograd import WinogradTask
    from toylens.family import plan_family

    class Shifting(WinogradTask):
        name = "shifting"
        calls = 0

        def vocabulary(self):  # a new order on every call, as a set turned into a list can give
            tokens = super().vocabulary()
            Shifting.calls += 1
            return tokens[Shifting.calls % len(tokens) :] + tokens[: Shifting.calls % len(tokens)]

    with pytest.raises(UsageError, match="task plugin 'shifting': vocabulary\\(\\) returned a different list"):
        plan_family(Shifting(small_winograd.params), None, [0], TrainSettings(max_steps=5), tmp_path / "runs")
    assert not (tmp_path / "runs").exists()
