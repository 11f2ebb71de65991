"""Ctrl-C ends a command one way at every moment: the one `interrupted:` line and exit 130, never a
traceback, an exit 0 or a death by the signal. The first press stops the command; presses after it
(within milliseconds, while its cleanup runs: finally blocks, workers stopped, exit functions) are
ignored. A press Python would drop (raised in a __del__ or a weakref callback, where it can only
print a traceback and carry on) is delivered again, and a press after the command's last write, while
the process ends, still ends it with the line and 130 (end_process)."""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import NoReturn

INTERRUPTED = 130
_pressed: list[bool] = []  # not empty once Ctrl-C was pressed
_held: list[bool] = []  # one entry per open held_interrupts block: whether a Ctrl-C came during it
_ending: list[bool] = []  # not empty once end_process runs: presses are only recorded
_hooks: list = []  # the unraisable hook press_not_dropped replaced


def pressed() -> bool:
    return bool(_pressed)


def new_command() -> None:
    """A command starts with no press recorded: in-process callers (tests, notebooks) run several in
    one process, and a press that stopped an earlier one must not end the process after a later one."""
    _pressed.clear()


def interrupt_once(signum, frame) -> None:
    """The first Ctrl-C stops the command; the ones after it (pressed again while the first one's
    cleanup runs: workers stopped, temp files removed) are ignored, so the one line is printed.
    Inside held_interrupts the stop waits for the block's end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _pressed.append(True)
    if sys.unraisablehook is not press_not_dropped:
        _hooks.append(sys.unraisablehook)
        sys.unraisablehook = press_not_dropped
    if _held:
        _held[-1] = True
        return
    raise KeyboardInterrupt


def press_not_dropped(unraisable) -> None:
    """sys.unraisablehook once Ctrl-C was pressed. Its KeyboardInterrupt raised inside a __del__, a
    weakref or garbage-collector callback cannot stop the command: Python prints it as "Exception
    ignored in ..." with a traceback and carries on, and with further presses ignored the command
    ran to its end and exited 0. Not printed here: the press is delivered again, a moment later, to
    the code the command runs then."""
    main = threading.current_thread() is threading.main_thread()
    if not isinstance(unraisable.exc_value, KeyboardInterrupt) or not main:
        (_hooks[-1] if _hooks else sys.__unraisablehook__)(unraisable)
        return
    if _ending:  # the process is ending anyway, with the line (end_process)
        return
    for _ in range(3):
        try:
            signal.signal(signal.SIGINT, interrupt_once)
            deliver_again(signal.SIGINT)
            return
        except KeyboardInterrupt:  # delivered already, inside this hook: once more
            continue


def deliver_again(signum: signal.Signals) -> None:
    """The signal's Python handler run again in the main thread a moment from now, once the
    unraisable hook that calls this has returned (raised inside it, it would be dropped again)."""
    threading.Thread(target=signal_main, args=(signum,), daemon=True).start()


def signal_main(signum: signal.Signals) -> None:
    import _thread
    import time

    time.sleep(0.01)
    _thread.interrupt_main(signum)


@contextmanager
def held_interrupts():
    """A Ctrl-C during the block stops the command when the block ends, not inside it: for steps
    that must not be cut in two (a run's files written one after another, a fork server started
    whose process id is not yet recorded)."""
    _held.append(False)
    try:
        yield
    finally:
        came = _held.pop()
        if _held:
            _held[-1] = _held[-1] or came
    if came:
        raise KeyboardInterrupt


def interrupted(how: str) -> NoReturn:
    # Ignored from here on whatever imported code did to the handler after the first press: a second
    # press during the exit would otherwise end the process by SIGINT (status -2) after the line.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _pressed.append(True)
    print(f"\n{line(how)}", file=sys.stderr)
    sys.exit(INTERRUPTED)


def line(how: str = "") -> str:
    return f"interrupted: {how or 'stopped; every file written so far is complete'}"


def record_press(signum, frame) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _pressed.append(True)


def end_process(code: int) -> NoReturn:
    """The program's last step (common.cli.entry): its threads joined and exit functions run (temp
    folders, Ray, logging) with Ctrl-C recorded, not raised; then the process ends with `code`, or,
    if Ctrl-C was pressed and the command ended 0 (a press swallowed by code it ran, or pressed after
    its last write), with the line and 130 (a command stopped by it has said its line already). Ended here rather than in the interpreter's
    teardown, which puts SIGINT back to its default: a press after the last write killed the process
    by the signal, with no line (or printed an exit function's traceback). A press raised on the way
    in (before the handler below is set) is caught by the caller and comes back here."""
    import atexit
    import os

    _ending.append(True)
    signal.signal(signal.SIGINT, signal.SIG_IGN if _pressed else record_press)
    shutdown = getattr(threading, "_shutdown", None)  # private: the interpreter's own wait for threads
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    if _pressed and code == 0:
        print(f"\n{line()}", file=sys.stderr)
        code = INTERRUPTED
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader gone (`| head`) or a stream closed
            pass
    os._exit(code)
