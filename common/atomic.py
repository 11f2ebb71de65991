"""Files and folders written whole or not at all: written in a toylens temp folder beside the
target (`.toylens-tmp.<pid>.<name>.XXXX`), then renamed into place, so a reader (or a run resumed
after a kill) never sees half of one. Whatever a writer makes on the way (safetensors writes a
`.tmpXXXXXX` of its own before renaming it to the name it was given) lands inside that folder, so
a kill at any moment leaves only a toylens temp, which the next write into that folder deletes."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from common.cli import UsageError
from common.jsonfiles import json_text
from common.ownership import (
    MANIFEST,
    TEMP,
    adopt_all,
    check_publishable,
    claim_check,
    clean_leftovers,
    record,
    remove_tree,
    version_of,
)


def atomic_write(path: Path, write, grows: bool = False) -> None:
    """Call `write(temp_path)` and rename the result over `path`: readers never see half a file.
    Refuses (UsageError) to replace a file toylens did not write. `grows`: toylens appends to the
    file afterwards (a log), so what it vouches for is the file's start."""
    path = Path(path)
    made(path.parent)
    claim_check(path)
    clean_leftovers(path.parent)
    written = 0
    try:
        with temp_folder(path.parent, path.name) as folder:
            temp = folder / path.name
            try:
                try:
                    write(temp)
                except Exception as error:  # noqa: BLE001
                    raise as_disk_full(error) from None
                os.chmod(temp, 0o666 & ~current_umask())  # safetensors makes 0600; give the usual permissions
                record(path, version_of(temp), grows)
                os.replace(temp, path)
            except OSError:
                written = tree_bytes(staged_root(path) or folder)  # measured before the temps go
                raise
    except OSError as error:
        raise write_failed(error, path.parent, path.name, written) from None


# The file system refused to store more (full, over quota, read-only, file too large): the
# command fails in one line naming the folder; the temp folder is gone and the target as it was.
DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG)


def write_failed(error: OSError, folder: Path, name: str | None = None, written: int = 0) -> Exception:
    """A UsageError for a write into `folder` (of file `name`, or of the folder itself) that the
    file system refused, naming the output folder (the one a staging folder will be published as)
    and the free space it needs: more than the `written` bytes it had written when refused (staged
    files and the refused one's start); any other OSError unchanged."""
    if error.errno not in DISK_ERRORS:
        return error
    root = staged_root(folder) or Path(folder)
    inside = (Path(folder) / (name or "")).relative_to(root).as_posix()
    needs = (
        "make it writable (or choose another --out)"
        if error.errno == errno.EROFS
        else f"it needs {f'more than {written:,} bytes' if written else 'more space'} free there: free some "
        "(or choose another --out)"
    )
    return UsageError(
        f"could not write {published_path(root)}: {os.strerror(error.errno)}"
        f"{f' while writing {inside}' if inside != '.' else ''}; {needs} and rerun; no partial or temp file was left"
    )


def made(folder: Path) -> None:
    """mkdir -p `folder`; a refusal of the file system is the command's one line."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise write_failed(error, folder) from None


def staged_root(path: Path) -> Path | None:
    """The outermost staging folder (`staging`'s) that is `path` or holds it, if any."""
    return next(
        (p for p in [*reversed(Path(path).parents), Path(path)] if p.name.startswith(TEMP) and ".new." in p.name), None
    )


def tree_bytes(folder: Path) -> int:
    return sum((Path(root) / name).lstat().st_size for root, _dirs, files in os.walk(folder) for name in files)


def published_path(path: Path) -> Path:
    """`path` with a staging folder (`.toylens-tmp.<pid>.<name>.new.XXXX`) named as the folder it
    will be published as."""
    parts = []
    for part in Path(path).parts:
        if part.startswith(TEMP) and ".new." in part:
            part = part[len(TEMP) :].split(".", 1)[-1].rsplit(".new.", 1)[0]
        parts.append(part)
    return Path(*parts)


@contextmanager
def temp_folder(parent: Path, name: str):
    """A new folder in `parent` named as toylens's temp for `name`, deleted afterwards."""
    folder = Path(tempfile.mkdtemp(dir=parent, prefix=f"{TEMP}{os.getpid()}.{name}."))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_disk_full(error: Exception) -> Exception:
    """Writers other than Python's own (safetensors, matplotlib) report a full disk as their own
    error type; make it the OSError run_cli turns into one line."""
    if isinstance(error, OSError):
        return error
    text = str(error)
    for code, words in ((errno.ENOSPC, "No space left"), (errno.EFBIG, "File too large"), (errno.EDQUOT, "quota")):
        if words in text:
            return OSError(code, f"{os.strerror(code)} while writing ({type(error).__name__})")
    return error


def current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def write_json(path: Path, payload) -> None:
    atomic_write(path, lambda temp: Path(temp).write_text(json_text(payload)))


def publish_folder(staged: Path, out: Path, subfolders: tuple[str, ...] = ()) -> None:
    """Swap a completely written folder `staged` in for `out` (a report): readers find the old
    folder, the new one, or (for the instant between two renames) none, never a mix."""
    staged, out = Path(staged), Path(out)
    check_publishable(out, "folder", subfolders)  # subfolders: ownership.vouched_within
    try:
        adopt_all(staged)
    except OSError as error:
        raise write_failed(error, staged, MANIFEST, tree_bytes(staged)) from None
    old = out.with_name(f"{TEMP}{os.getpid()}.{out.name}.old")
    if out.exists():
        os.replace(out, old)
    os.replace(staged, out)
    if old.exists():
        remove_tree(old)
    clean_leftovers(out.parent)  # a swap or a staging folder a kill interrupted


@contextmanager
def staging(out: Path):
    """A new empty toylens temp folder beside `out` to write a folder's contents into before
    publish_folder; removed if the work fails or is interrupted (or, after a kill, by the next
    write beside it)."""
    parent = Path(out).parent
    new = [folder for folder in [parent, *parent.parents] if not folder.exists()]  # deepest first
    made(parent)
    clean_leftovers(parent)
    staged = None
    try:
        staged = Path(tempfile.mkdtemp(dir=parent, prefix=f"{TEMP}{os.getpid()}.{Path(out).name}.new."))
        os.chmod(staged, 0o777 & ~current_umask())  # mkdtemp makes 0700; the published folder is a normal one
        yield staged
    except BaseException as error:
        if staged is not None:
            shutil.rmtree(staged, ignore_errors=True)
        for folder in new:  # made for this output: a failed one leaves the folders as they were
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        if isinstance(error, OSError):  # mkdtemp's, or a write's not yet named
            raise write_failed(error, out) from None
        raise
