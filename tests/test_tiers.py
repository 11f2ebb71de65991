"""The test tiers and the isolated marker (tests/conftest.py, tests/isolation.py): a test that kills
its own process, hangs, or signals its process group fails as that one test and pytest goes on; the
slow list names only tests that exist."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.conftest import listed, slow_list

ROOT = Path(__file__).resolve().parents[1]

VICTIMS = """
import os, signal, time
import pytest

@pytest.mark.isolated
def test_killed():
    os.kill(os.getpid(), signal.SIGKILL)

@pytest.mark.isolated
def test_signals_its_group():
    os.killpg(0, signal.SIGTERM)  # its own session's group: never pytest's

@pytest.mark.isolated(limit=2)
def test_hangs():
    time.sleep(600)

@pytest.mark.isolated
def test_fails():
    assert 1 + 1 == 3, "arithmetic"

@pytest.mark.isolated
def test_skips():
    pytest.skip("no Ray here")

@pytest.mark.isolated
def test_passes_with_fixtures(tmp_path, monkeypatch):
    monkeypatch.setenv("ONLY_IN_THE_CHILD", "1")
    (tmp_path / "made").write_text("by the child")
    assert (tmp_path / "made").read_text() == "by the child"

def test_after_them_all():
    assert "ONLY_IN_THE_CHILD" not in os.environ
"""


def test_isolated_tests_that_die_hang_or_signal_fail_alone_and_pytest_goes_on(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(test_victims=VICTIMS)
    result = pytester.runpytest_subprocess("-p", "tests.isolation", "-p", "no:cacheprovider", "-rA")
    result.assert_outcomes(passed=2, failed=4, skipped=1)
    out = result.stdout.str()
    sections = dict(re.findall(r"_{3,} (test_\w+) _{3,}\n(.*?)\n", out))  # each failure's first line
    assert "killed by signal 9: SIGKILL" in sections["test_killed"], out
    assert "killed by signal 15: SIGTERM" in sections["test_signals_its_group"], out
    assert sections["test_hangs"] == "isolated test hung: its child ran past 2 s and was killed", out
    assert "AssertionError: arithmetic" in out and "no Ray here" in out


def test_the_slow_list_names_tests_that_exist():
    """A renamed or removed test left in tests/slow_tests.txt would silently move nothing."""
    ids = slow_list()
    assert ids, "the slow list is empty"
    for entry in ids:
        path, _, name = entry.partition("::")
        assert (ROOT / path).is_file(), entry
        function = name.split("[")[0]
        assert not function or f"def {function}(" in (ROOT / path).read_text(), entry


def test_a_listed_id_covers_its_parameters_and_nothing_else(tmp_path):
    listing = tmp_path / "slow.txt"
    listing.write_text("# measured\ntests/test_a.py::test_b  # 12 s: trains\ntests/test_c.py\n")
    ids = slow_list(listing)
    assert ids == ["tests/test_a.py::test_b", "tests/test_c.py"]
    assert listed("tests/test_a.py::test_b[ray-2]", ids) and listed("tests/test_c.py::test_d", ids)
    assert not listed("tests/test_a.py::test_bb", ids) and not listed("tests/test_cc.py::test_d", ids)


@pytest.mark.parametrize("name", ["slow", "isolated"])
def test_the_markers_are_registered(pytestconfig, name):
    assert any(line.startswith(f"{name}:") or line.startswith(f"{name}(") for line in pytestconfig.getini("markers"))
