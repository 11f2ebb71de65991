"""Bad input ends every toylens CLI the same way: one line on stderr naming the problem and the
fix, exit code 2, never a traceback."""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from common.interrupts import end_process, interrupt_once, interrupted, new_command, pressed

EXIT_USAGE = 2
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


class UsageError(Exception):
    """Bad input from the user: the message names the problem and the fix, on one line."""


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument on one line (argparse prints the usage block too)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"error: {message} (see {self.prog} --help)\n")


@dataclass(frozen=True)
class Bounded:
    """argparse type for every numeric flag: a number of `kind` (int or float) from `low` to `high`,
    so a huge or negative value is one line while the arguments are parsed, not a traceback, a
    crash or an hour of work later. `why` says what the top costs. `many`: a comma-separated list of
    such numbers (distinct, in the order given)."""

    kind: type
    low: float
    high: float
    why: str = ""
    many: bool = False

    def __call__(self, text: str):
        if not self.many:
            return self.one(text)
        values = [self.one(part.strip()) for part in str(text).split(",")]
        if len(set(values)) != len(values):
            raise argparse.ArgumentTypeError(f"{text!r} lists a value twice; list each once")
        return values

    def one(self, text: str):
        import math

        word = "an integer" if self.kind is int else "a number"
        try:
            value = self.kind(text)
        except (TypeError, ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{text!r} is not {word}") from None
        if not (math.isfinite(value) and self.low <= value <= self.high):
            raise argparse.ArgumentTypeError(
                f"{text} is out of range: use {word} from {self.low:g} to {self.high:g}"
                f"{f' ({self.why})' if self.why else ''}"
            )
        return value

    @property
    def __name__(self) -> str:  # argparse names a type in its own messages
        return self.kind.__name__


MAX_COUNT = 1_000_000  # any count of steps, pairs, sequences: beyond it a toy's command runs for hours
MAX_SEED = 2**32 - 1  # numpy's seeds are 32-bit; a run's seed is stored as such
positive_int = Bounded(int, 1, MAX_COUNT, "a count; more would run for hours")
seed_number = Bounded(int, 0, MAX_SEED, "a 32-bit seed")
jobs_number = Bounded(int, 1, 1024, "processes at a time")
threads_number = Bounded(int, 1, 256, "torch threads; more than the cores only slows it down")
width_number = Bounded(int, 1, 65_536, "a model size; memory grows with its square")


def path_name(value, what: str) -> str:
    """`value` if it can be one path component (letters, digits, . _ + -; no '..', no '/'), else a
    UsageError: names from files and plugins become folder and file names."""
    if not isinstance(value, str) or not NAME.fullmatch(value) or ".." in value:
        raise UsageError(
            f"{what} {value!r} cannot be a file name (use letters, digits, '.', '_', '+', "
            "'-'; at most 100 characters, no '..' or '/')"
        )
    return value


def folder_path(text: str) -> Path:
    """argparse type for folders: an empty string would silently mean the current folder, and the
    file-system root or the home folder would have every file under it walked."""
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path would mean the current folder; name a folder")
    try:
        check_not_too_broad(Path(text))
    except UsageError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return Path(text)


def out_path(text: str) -> Path:
    """argparse type for what a command writes (--out, --table, --cells): folder_path's rule, and the
    one rule for links (linked_part): refused while parsing, so before any work."""
    path = folder_path(text)
    link = linked_part(path)
    if link is not None:
        raise argparse.ArgumentTypeError(link_refusal(path, link))
    return path


def linked_part(path: Path) -> Path | None:
    """The symbolic link on `path`'s way, if any: the path itself, a parent it would be made in
    (`LINK/new`), or any folder between (`LINK/sub/new`), since toylens does not write through links.
    Links at the file system's top level (/bin -> usr/bin, macOS's /tmp) are the system's, not a
    user's folder, and are followed."""
    path = Path(os.path.abspath(path))
    return next((p for p in [path, *path.parents[:-2]] if p.is_symlink()), None)


def link_refusal(path: Path, link: Path) -> str:
    where = (
        f"{link} is a symbolic link"
        if Path(link) == Path(os.path.abspath(path))
        else f"{link} (on its way) is a symbolic link"
    )
    return f"{path}: {where}; toylens does not write through links: remove it or choose another folder"


def check_no_link(path: Path, what: str = "") -> None:
    """linked_part's rule as a UsageError, for paths a command derives (RUNS_DIR/report)."""
    link = linked_part(path)
    if link is not None:
        raise UsageError(f"{what}{' ' if what else ''}{link_refusal(path, link)}")


def check_not_too_broad(path: Path, what: str = "") -> None:
    """Refuse the file-system root, the home folder and the folders above it as a toylens folder:
    finding runs walks every file under it (seen: `--out /` walked into /proc)."""
    resolved, home = Path(path).resolve(), Path.home().resolve()
    if resolved == Path(resolved.anchor) or resolved == home or resolved in home.parents:
        kind = "the file-system root" if resolved == Path(resolved.anchor) else "your home folder or a folder above it"
        raise UsageError(
            f"{what}{' ' if what else ''}{path} is {kind}, and toylens would walk every file under it; "
            "name a folder of its own, e.g. runs/NAME"
        )


def device_name(text: str) -> str:
    """A torch device this machine has: "cpu", "cuda", "cuda:1", "mps"."""
    import torch

    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device; use cpu, cuda, cuda:N or mps") from None
    # torch accepts any index ("cpu:5"); this machine has one CPU device and one MPS device.
    present = {
        "cpu": (device.index or 0) == 0,
        "cuda": torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count(),
        "mps": torch.backends.mps.is_available() and (device.index or 0) == 0,
    }
    if not present.get(device.type, False):
        raise argparse.ArgumentTypeError(f"this machine has no {text} device; use cpu")
    return text


def say(line: str) -> None:
    """One line on stderr, on a line of its own: a progress bar still drawn (a loop left by the
    error) is cleared first and redrawn below it, instead of the line being glued onto the bar.
    Printable: a message may quote a plugin's words."""
    from tqdm import tqdm

    tqdm.write(printable(line), file=sys.stderr)


def printable(text: str) -> str:
    """`text` as a terminal shows it, not as it acts on it: every character that is not printable
    (control characters, whose escape sequences can retitle the terminal or rewrite the line; line
    breaks; bidi and zero-width controls) written as its escape (\\x1b, \\n, \\u202e). Strings
    from plugins (task, group, role and token names, messages) pass here before a terminal."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def run_cli(command, *args) -> None:
    """Run a CLI body, turning UsageError into exit 2 and Ctrl-C into a clean stop."""
    import signal
    import threading

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, interrupt_once)
    try:
        body(command, *args)
    finally:
        # After a Ctrl-C, further ones stay ignored until the process has exited.
        if previous is not None and signal.getsignal(signal.SIGINT) is interrupt_once:
            signal.signal(signal.SIGINT, previous)


def entry(main, program: bool = False) -> None:
    """Run an entry point's `main` with Ctrl-C handled from its first moment: pressed while the
    command's modules import (torch and TransformerLens take the first second or so), before
    run_cli takes over, it is the same one line and exit 130, not a KeyboardInterrupt traceback.
    `program`: this call is the process's program (its `__main__`, the console script), so it ends
    the process itself (common.interrupts.end_process), and a press at any moment up to the exit is
    the one line and 130; in-process callers (tests) get main's SystemExit unless Ctrl-C was pressed."""
    import signal
    import traceback

    new_command()
    signal.signal(signal.SIGINT, interrupt_once)
    code = 1
    try:
        body(main)
        code = 0
    except SystemExit as stop:
        if not (program or pressed()):
            raise
        code = exit_code(stop.code)
    except KeyboardInterrupt:  # pressed after the command's own handling: end_process says the line
        code = 0
    except BaseException:
        if not program:
            raise
        traceback.print_exc()
    while program or pressed():
        try:
            end_process(code)
        except KeyboardInterrupt:  # pressed on the way in, before its handler was set: recorded
            continue


def exit_code(code) -> int:
    """The status `sys.exit(code)` ends a process with (a message is printed, status 1)."""
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)
    return 1


def body(command, *args) -> None:
    try:
        # numpy first, from Python: torch's C code imports it otherwise and clears any error raised
        # in that import, so a Ctrl-C pressed then was lost and the command ran on (tests/test_early_interrupts.py).
        import numpy  # noqa: F401

        command(*args)
    except UsageError as error:
        say(f"error: {error}")
        sys.exit(EXIT_USAGE)
    except MemoryError:
        out_of_memory()
    except KeyboardInterrupt as interrupt:
        # Training raises KeyboardInterrupt(how to resume); elsewhere every file written is complete.
        interrupted(str(interrupt))
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): not an error of the user's input.
        sys.stderr.close()
        sys.exit(0)
    except OSError as error:
        # The file system refused (permissions, disk full, a file where a folder should be).
        say(f"error: {error}; check the path and its permissions or free space")
        sys.exit(EXIT_USAGE)
    except Exception as error:
        if allocation_failed(error):
            out_of_memory()
        if not pressed():
            raise
        # Imported code swallowed the KeyboardInterrupt (seen in numpy's lazy submodule import,
        # whose next use then recursed without end): what fails after a press is the press's.
        interrupted("")


# torch's allocators say so in a RuntimeError ("DefaultCPUAllocator: can't allocate memory",
# "not enough memory: you tried to allocate ...", "CUDA out of memory"); newer versions raise
# torch.OutOfMemoryError, a RuntimeError, for the GPU.
ALLOCATION_FAILED = re.compile(r"can't allocate memory|not enough memory|out of memory|could not allocate", re.I)


def allocation_failed(error: BaseException) -> bool:
    torch = sys.modules.get("torch")  # never imported here: an error before torch is not torch's
    oom = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if oom is not None and isinstance(error, oom):
        return True
    return isinstance(error, RuntimeError) and bool(ALLOCATION_FAILED.search(str(error)))


def out_of_memory() -> None:
    """The one line for a command that ran out of memory (a MemoryError, under `ulimit -v` say, or
    an allocation torch could not make): what to reduce, not a traceback."""
    say(
        f"error: {command_name()} ran out of memory; run fewer jobs at a time (--jobs), use smaller "
        "sizes (--pairs, --batch-size, --sizes, a smaller model) or free memory, then run it again"
    )
    sys.exit(EXIT_USAGE)


def command_name() -> str:
    """The command as the user typed it: "toylens leaderboard", "python -m tasks.winograd train"."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None:
        name = spec.name.removesuffix(".__main__")
        prog = name if name == "toylens" else f"python -m {name}"
    else:
        prog = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "the command"
    words = [word for word in sys.argv[1:2] if not word.startswith("-")]
    return " ".join([prog, *words])
