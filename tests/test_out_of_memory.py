"""Running out of memory ends a command in one line naming it and what to reduce, exit 2: a
MemoryError (Python's allocator, under `ulimit -v`) or an allocation torch could not make."""

from __future__ import annotations

import sys

import pytest
import torch

from common.cli import EXIT_USAGE, run_cli

FAILURES = [
    MemoryError(),
    torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
    RuntimeError(
        "[enforce fail at alloc_cpu.cpp:83] . DefaultCPUAllocator: can't allocate memory: you tried to allocate 8589934592 bytes. Error code 12 (Cannot allocate memory)"
    ),
    RuntimeError(
        "[enforce fail at CPUAllocator.cpp:68] . DefaultCPUAllocator: not enough memory: you tried to allocate 8589934592 bytes."
    ),
]


# Catches: an allocation failure left to end the command in a traceback (seen under `ulimit -v`).
@pytest.mark.parametrize("failure", FAILURES, ids=lambda error: type(error).__name__)
def test_running_out_of_memory_is_one_line(failure, capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["toylens", "leaderboard", "--jobs", "4"])

    def command():
        raise failure

    with pytest.raises(SystemExit) as stop:
        run_cli(command)
    assert stop.value.code == EXIT_USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "leaderboard" in lines[0] and "out of memory" in lines[0] and "--jobs" in lines[0]


# Catches: every RuntimeError read as an allocation failure (a real bug hidden behind advice on memory).
def test_other_runtime_errors_are_not_called_out_of_memory():
    def command():
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    with pytest.raises(RuntimeError, match="shapes"):
        run_cli(command)
