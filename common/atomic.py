"""Files and folders written whole or not at all: written under a temp name, then renamed into
place, so a reader (or a run resumed after a kill) never sees half of one."""

from __future__ import annotations

import errno
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

from common.jsonfiles import json_text
from common.ownership import adopt_all, check_publishable, claim, foreign_files, remove_tree


def atomic_write(path: Path, write) -> None:
    """Call `write(temp_path)` and rename the result over `path`: readers never see half a file.
    Refuses (UsageError) to replace a file toylens did not write."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    claim(path)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        try:
            write(temp)
        except Exception as error:  # noqa: BLE001
            raise as_disk_full(error) from None
        os.chmod(temp, 0o666 & ~current_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def as_disk_full(error: Exception) -> Exception:
    """Writers other than Python's own (safetensors, matplotlib) report a full disk as their own
    error type; make it the OSError run_cli turns into one line."""
    if isinstance(error, OSError):
        return error
    text = str(error)
    for code, words in ((errno.ENOSPC, "No space left"), (errno.EFBIG, "File too large"),
                        (errno.EDQUOT, "quota")):
        if words in text:
            return OSError(code, f"{os.strerror(code)} while writing ({type(error).__name__})")
    return error


def current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask



def write_json(path: Path, payload) -> None:
    atomic_write(path, lambda temp: Path(temp).write_text(json_text(payload)))


def publish_folder(staged: Path, out: Path) -> None:
    """Swap a completely written folder `staged` in for `out` (a report): readers find the old
    folder, the new one, or (for the instant between two renames) none, never a mix."""
    staged, out = Path(staged), Path(out)
    check_publishable(out, "folder")
    adopt_all(staged)
    old = out.with_name(f".{out.name}.old{os.getpid()}")
    if out.exists():
        os.replace(out, old)
    os.replace(staged, out)
    for left in out.parent.glob(f".{out.name}.old*"):  # this swap's, or one a kill interrupted
        if not foreign_files(left):
            remove_tree(left)


@contextmanager
def staging(out: Path):
    """A new empty folder beside `out` to write a folder's contents into before publish_folder;
    removed if the work fails or is interrupted."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(dir=Path(out).parent, prefix=f".{Path(out).name}.new"))
    os.chmod(staged, 0o777 & ~current_umask())  # mkdtemp makes 0700; the published folder is a normal one
    try:
        yield staged
    except BaseException:
        if staged.exists():
            adopt_all(staged)
            remove_tree(staged)
        raise
