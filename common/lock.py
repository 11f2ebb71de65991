"""One writer per folder: a lock file holding the writer's process id.

The lock is an flock on `.toylens.lock`, so the kernel releases it when the holder dies (SIGKILL
included): a stale lock never blocks, the next writer simply takes it. The pid written into the
file names the holder when a second writer is refused.
"""

from __future__ import annotations

import os
import re
import socket
from contextlib import contextmanager
from pathlib import Path

from common.cli import UsageError
from common.ownership import LOCK


HOLDER = re.compile(rb"(process \d+ on [^\n]*\n)?")
HELD: set[str] = set()   # folders this process holds: a nested lock of the same folder is a no-op


@contextmanager
def folder_lock(folder: Path, what: str):
    """Hold the lock of `folder` (created if needed) for the duration; refuse if another live
    process holds it."""
    import fcntl

    folder = Path(folder)
    key = os.path.realpath(folder)
    if key in HELD:
        yield
        return
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{what} {folder} is a file, not a folder; choose a folder")
    if folder.is_symlink():
        raise UsageError(f"{what} {folder} is a symbolic link; toylens does not write through links: "
                         "point at the folder itself")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK
    if path.is_symlink():
        raise UsageError(f"{path} is a symbolic link; remove it (toylens does not write through links)")
    handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(handle, 200, 0).decode(errors="replace").strip() or "another process"
            raise UsageError(f"{what} {folder} is in use by {holder}; wait for it to finish (or stop it), "
                             "then run this again") from None
        if not written_by_a_lock(os.pread(handle, 4096, 0)):
            raise UsageError(f"{path} was not written by toylens (it holds something else); move it away, "
                             "then run this again")
        os.ftruncate(handle, 0)
        os.pwrite(handle, f"process {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        HELD.add(key)
        try:
            yield
        finally:
            HELD.discard(key)
    finally:
        os.close(handle)


def written_by_a_lock(content: bytes) -> bool:
    """Empty (just created) or the line a holder writes: anything else is a user's file."""
    return HOLDER.fullmatch(content) is not None
