"""Bad input ends every toylens CLI the same way: one line on stderr naming the problem and the
fix, exit code 2, never a traceback."""

from __future__ import annotations

import argparse
import sys

EXIT_USAGE = 2


class UsageError(Exception):
    """Bad input from the user: the message names the problem and the fix, on one line."""


class Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument on one line (argparse prints the usage block too)."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"error: {message} (see {self.prog} --help)\n")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} must be a positive integer")
    return value


def device_name(text: str) -> str:
    """A torch device this machine has: "cpu", "cuda", "cuda:1", "mps"."""
    import torch

    try:
        device = torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a device; use cpu, cuda, cuda:N or mps") from None
    # torch accepts any index ("cpu:5"); this machine has one CPU device and one MPS device.
    present = {"cpu": (device.index or 0) == 0,
               "cuda": torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count(),
               "mps": torch.backends.mps.is_available() and (device.index or 0) == 0}
    if not present.get(device.type, False):
        raise argparse.ArgumentTypeError(f"this machine has no {text} device; use cpu")
    return text


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


def interrupt_once(signum, frame) -> None:
    """The first Ctrl-C stops the command; the ones after it (pressed again while the first one's
    cleanup runs: workers stopped, temp files removed) are ignored, so the one line is printed."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def body(command, *args) -> None:
    try:
        command(*args)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt as interrupt:
        # Training raises KeyboardInterrupt(how to resume); elsewhere every file written is complete.
        print(f"\ninterrupted: {str(interrupt) or 'stopped; every file written so far is complete'}",
              file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): not an error of the user's input.
        sys.stderr.close()
        sys.exit(0)
    except OSError as error:
        # The file system refused (permissions, disk full, a file where a folder should be).
        print(f"error: {error}; check the path and its permissions or free space", file=sys.stderr)
        sys.exit(EXIT_USAGE)
