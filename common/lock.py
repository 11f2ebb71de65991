"""One writer per folder tree: a lock file holding the writer's process id.

The lock is an flock on `.toylens.lock`, so the kernel releases it when the holder dies (SIGKILL
included): a stale lock never blocks, the next writer simply takes it. The pid written into the
file names the holder when a second writer is refused.

A folder's lock also covers the folders below it: a sweep holds its root, and a training into one
of its grid points (or any folder under it) reaches the root's lock file on its way up and is
refused; a writer of a root whose subfolder is held (a training started first) finds that lock on
its way down and is refused. Both ways go REACH folders far, as far as a run lies from its sweep's
root, and only through toylens's own folders (someone else's folder in between, as in /tmp/mine/...
below a writer of /tmp, means the two never share a run). The way up is checked before a writer takes its own lock and the way down after, so of two
writers started at once into nested folders at most one proceeds (exactly one when they lock the
same folder, as a sweep does each of its grid points).
"""

from __future__ import annotations

import os
import re
import socket
from contextlib import ExitStack, contextmanager
from pathlib import Path

from common.atomic import DISK_ERRORS, made, write_failed
from common.cli import UsageError, check_no_link
from common.interrupts import held_interrupts
from common.ownership import LOCK, MANIFEST


HOLDER = re.compile(rb"(process \d+ on [^\n]*\n)?")
# A run lies at most this many folders below the folder a writer locks (a sweep's root: point,
# model, seed), so two locks further apart never cover one run and neither refuses the other.
REACH = 3
HELD: set[str] = set()  # folders this process holds: a nested lock of the same folder is a no-op


@contextmanager
def folder_lock(folder: Path, what: str):
    """Hold the lock of `folder` (created if needed) for the duration; refuse if another live
    process holds it, a folder above it, or a folder below it."""
    import fcntl

    folder = Path(folder)
    key = os.path.realpath(folder)
    if key in HELD:
        yield
        return
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{what} {folder} is a file, not a folder; choose a folder")
    check_no_link(folder, what)
    check_free(above(Path(key)), what, folder, fcntl.LOCK_SH)
    made(folder)
    path = folder / LOCK
    if path.is_symlink():
        raise UsageError(f"{path} is a symbolic link; remove it (toylens does not write through links)")
    if path.exists() and not path.is_file():
        raise UsageError(
            f"{path} is not a regular file (a folder, a FIFO or a device), so not toylens's lock; "
            "move it away or choose another folder"
        )
    made_here = not path.exists()
    try:
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:  # a read-only or full file system: the command's one line
        raise write_failed(error, folder, LOCK) from None
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise in_use(what, folder, handle) from None
        if not written_by_a_lock(os.pread(handle, 4096, 0)):
            raise UsageError(
                f"{path} was not written by toylens (it holds something else); move it away, then run this again"
            )
        os.ftruncate(handle, 0)
        try:
            os.pwrite(handle, f"process {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        except OSError as error:
            # A full disk takes the empty lock file but not the holder's note: the flock still holds,
            # and the command's own writes fail on that disk in its one line, naming its output.
            if error.errno not in DISK_ERRORS:
                raise
        HELD.add(key)
        try:
            check_free(below(Path(key)), what, folder, fcntl.LOCK_EX)
            yield
        finally:
            HELD.discard(key)
    finally:
        # A Ctrl-C pressed now (the command's work done) stops it once the lock is released, not
        # half-way with a lock file left in a user's folder.
        with held_interrupts():
            if made_here and not (folder / MANIFEST).is_file():
                # A folder toylens owns nothing in (a user's, or one a refused command made): the lock
                # it made there goes, whatever the outcome; removed while still held.
                path.unlink(missing_ok=True)
            os.close(handle)


def above(folder: Path) -> list[Path]:
    """Lock files of the folders above `folder` (a real path) that this process does not hold itself,
    nearest first."""
    return [
        parent / LOCK
        for parent in folder.parents[:REACH]
        if (parent / LOCK).is_file() and str(parent) not in HELD and linked(parent, folder)
    ]


def below(folder: Path) -> list[Path]:
    """Lock files of the folders below `folder` (at most REACH deep) that this process does not hold itself."""
    found = []
    for root, dirs, files in os.walk(folder):
        deep = len(Path(root).relative_to(folder).parts) >= REACH
        dirs[:] = [] if deep else [d for d in dirs if not os.path.islink(os.path.join(root, d))]
        if root != str(folder) and LOCK in files and os.path.realpath(root) not in HELD and linked(folder, Path(root)):
            found.append(Path(root) / LOCK)
    return found


def linked(upper: Path, lower: Path) -> bool:
    """Whether the folders strictly between `upper` and `lower` are toylens's (each has a manifest)
    or not made yet: then `lower` can hold runs of a writer of `upper`. A folder of someone else's
    in between (a writer of /tmp, a test in /tmp/pytest-of-me/...) means the two never share a run."""
    between = list(lower.relative_to(upper).parents)[:-1]  # upper/a, upper/a/b, ... (not upper, not lower)
    return all(not (upper / part).is_dir() or (upper / part / MANIFEST).is_file() for part in between)


def check_free(paths: list[Path], what: str, folder: Path, mode: int) -> None:
    """Refuse when another process holds one of these lock files (tried, then let go at once: a
    later writer of that folder finds this process's own lock on its way down or up)."""
    import fcntl

    for path in paths:
        try:
            handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO of that name would block the open
        except OSError:
            continue  # gone since it was listed: nobody holds it
        try:
            try:
                fcntl.flock(handle, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                raise in_use(what, folder, handle, path.parent) from None
            fcntl.flock(handle, fcntl.LOCK_UN)
        finally:
            os.close(handle)


def in_use(what: str, folder: Path, handle: int, held: Path | None = None) -> UsageError:
    """`held`: the folder above or below `folder` whose lock is taken, when not `folder` itself."""
    holder = os.pread(handle, 200, 0).decode(errors="replace").strip() or "another process"
    where = "" if held is None else f" (it writes {held}, which holds {folder} or lies within it)"
    return UsageError(
        f"{what} {folder} is in use by {holder}{where}; wait for it to finish (or stop it), then run this again"
    )


@contextmanager
def folder_locks(folders: list[Path], what: str):
    """Hold the locks of several folders (a sweep's root, then its grid points) for the duration."""
    with ExitStack() as stack:
        for folder in folders:
            stack.enter_context(folder_lock(folder, what))
        yield


def written_by_a_lock(content: bytes) -> bool:
    """Empty (just created) or the line a holder writes: anything else is a user's file."""
    return HOLDER.fullmatch(content) is not None
