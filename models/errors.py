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


def run_cli(command, *args) -> None:
    """Run a CLI body, turning UsageError into exit 2 and Ctrl-C into a clean stop."""
    try:
        command(*args)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:
        print("\ninterrupted: finished runs are kept; rerun the same command to train the rest",
              file=sys.stderr)
        sys.exit(130)
