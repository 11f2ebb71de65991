"""Files written whole or not at all, JSON written and read the one way, file checksums, and the
ownership rule: toylens replaces or deletes only files it can prove it wrote.

Proof is a manifest, `.toylens.json`, in the folder holding the file (or in a folder above it),
listing the file's path relative to that folder. A name is added to the manifest before the file
is first written, and only when no file of that name exists yet, so a listed name was created by
toylens; a file toylens did not create is never listed, and writing over it is refused.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path

from common.cli import UsageError

MANIFEST = ".toylens.json"
LOCK = ".toylens.lock"       # common.lock's; never a user's file
MAX_JSON_BYTES = 64 * 1024 * 1024   # no file toylens writes comes near this; refuse before reading
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


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
    def write(temp):
        Path(temp).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")

    atomic_write(path, write)


def read_json(path: Path, fix: str):
    """The JSON value in `path`; anything that is not (too big, not UTF-8, not JSON, nested too
    deep for the parser) is a UsageError naming `fix`."""
    path = Path(path)
    if path.stat().st_size > MAX_JSON_BYTES:
        raise UsageError(f"{path} is {path.stat().st_size} bytes, more than any toylens JSON file "
                         f"({MAX_JSON_BYTES}); {fix}")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise UsageError(f"{path} is not valid JSON ({getattr(error, 'msg', error)}); {fix}") from None
    except RecursionError:
        raise UsageError(f"{path} is nested too deeply to be a toylens file; {fix}") from None


def canonical_sha256(payload) -> str:
    """SHA-256 of a JSON value written one canonical way (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def path_name(value, what: str) -> str:
    """`value` if it can be one path component (letters, digits, . _ + -; no '..', no '/'), else a
    UsageError: names from files and plugins become folder and file names."""
    if not isinstance(value, str) or not NAME.fullmatch(value) or ".." in value:
        raise UsageError(f"{what} {value!r} cannot be a file name (use letters, digits, '.', '_', '+', "
                         "'-'; at most 100 characters, no '..' or '/')")
    return value


def nonempty_path(text: str) -> Path:
    """argparse type for folders: an empty string would silently mean the current folder."""
    if not text.strip():
        import argparse

        raise argparse.ArgumentTypeError("an empty path would mean the current folder; name a folder")
    return Path(text)


# --- ownership -------------------------------------------------------------------------------------

@contextmanager
def folder_locked(folder: Path):
    """Exclusive flock on a folder while its manifest is read and rewritten (parallel workers
    write figures into one folder)."""
    import fcntl

    handle = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield
    finally:
        os.close(handle)


def manifest_names(folder: Path) -> set[str]:
    path = Path(folder) / MANIFEST
    if not path.is_file() or path.is_symlink():
        return set()
    try:
        files = json.loads(path.read_text()).get("files", [])
    except (ValueError, AttributeError, RecursionError, UnicodeDecodeError):
        return set()
    return {name for name in files if isinstance(name, str)} if isinstance(files, list) else set()


def write_manifest(folder: Path, names: set[str]) -> None:
    temp = Path(folder) / f".{MANIFEST}.{os.getpid()}.tmp"   # "interrupted_write" recognises it
    temp.write_text(json.dumps({"written_by": "toylens", "files": sorted(names)}, indent=1) + "\n")
    os.replace(temp, Path(folder) / MANIFEST)


def owned(path: Path) -> bool:
    """Whether a manifest in `path`'s folder or above lists it (toylens created it)."""
    path = Path(os.path.abspath(path))
    for folder in path.parents:
        if path.relative_to(folder).as_posix() in manifest_names(folder):
            return True
    return False


def not_ours(path: Path) -> UsageError:
    return UsageError(f"{path} was not written by toylens (no {MANIFEST} lists it) and toylens never "
                      "replaces or deletes a file it did not write; move it away or choose another folder")


def claim(path: Path) -> None:
    """Record that toylens is about to write `path`; refuse if a file toylens did not write, or a
    symbolic link, is already there."""
    path = Path(path)
    claim_check(path)
    with folder_locked(path.parent):
        names = manifest_names(path.parent)
        if path.name not in names:
            write_manifest(path.parent, names | {path.name})


def claim_check(path: Path) -> None:
    """Refuse, before any work, when writing `path` would replace a file toylens did not write."""
    path = Path(path)
    if path.is_symlink() or path.parent.is_symlink():
        raise UsageError(f"{path if path.is_symlink() else path.parent} is a symbolic link; toylens does "
                         "not write through links: remove it or choose another folder")
    if path.name == MANIFEST:
        raise UsageError(f"{path} is toylens's ownership manifest; choose another file name")
    if path.exists() and not owned(path):
        raise not_ours(path)


def remove(path: Path) -> None:
    """Delete `path` if it exists and toylens wrote it; refuse otherwise."""
    path = Path(path)
    if not (path.exists() or path.is_symlink()):
        return
    if path.is_symlink() or not owned(path):
        raise not_ours(path)
    path.unlink()


def interrupted_write(path: Path) -> bool:
    """A temp file atomic_write (or write_manifest) left when killed mid-write: `.NAME.XXXX.tmp`
    beside a file NAME that toylens claimed before writing it."""
    name = Path(path).name
    if not (name.startswith(".") and name.endswith(".tmp")):
        return False
    target = name[1:-len(".tmp")].rsplit(".", 1)[0]
    return target == MANIFEST.lstrip(".") or owned(Path(path).with_name(target))


def foreign_files(folder: Path) -> list[Path]:
    """Files (and links) under `folder` that toylens cannot prove it wrote."""
    folder = Path(folder)
    if folder.is_symlink():
        return [folder]
    found = []
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            entry = Path(root) / name
            if entry.is_symlink() or (name in files and name not in (MANIFEST, LOCK) and not owned(entry)
                                      and not interrupted_write(entry)):
                found.append(entry)
        dirs[:] = [d for d in dirs if not (Path(root) / d).is_symlink()]
    return sorted(found)


def check_replaceable(folder: Path, what: str) -> None:
    """Refuse, before any work, when `folder` holds something toylens did not write."""
    if Path(folder).is_symlink():
        raise UsageError(f"{what} {folder} is a symbolic link; toylens does not write through links: "
                         "remove it or choose another folder")
    foreign = foreign_files(folder) if Path(folder).exists() or Path(folder).is_symlink() else []
    if foreign:
        raise UsageError(f"{what} {folder} holds {foreign[0]}{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}"
                         f", which was not written by toylens (no {MANIFEST} lists it); toylens never replaces a "
                         "user's files: move them away or choose another folder")


def remove_tree(folder: Path, also=lambda path: False) -> None:
    """Delete every file toylens wrote under `folder` (or `also` accepts), then the folders left
    empty; anything else stays (callers check first with check_replaceable)."""
    folder = Path(folder)
    for root, dirs, files in os.walk(folder, topdown=False):
        for name in files:
            path = Path(root) / name
            if name != MANIFEST and (owned(path) or interrupted_write(path) or also(path)):
                (Path(root) / name).unlink()
        if (Path(root) / MANIFEST).is_file() and set(os.listdir(root)) == {MANIFEST}:
            (Path(root) / MANIFEST).unlink()
        if not os.listdir(root):
            os.rmdir(root)


def publish_folder(staged: Path, out: Path) -> None:
    """Swap a completely written folder `staged` in for `out` (a report): readers find the old
    folder, the new one, or (for the instant between two renames) none, never a mix."""
    staged, out = Path(staged), Path(out)
    check_replaceable(out, "folder")
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


def adopt_all(staged: Path) -> None:
    """List every file under a staging folder toylens made (and alone wrote into) in its manifest."""
    staged = Path(staged)
    names = {(Path(root) / name).relative_to(staged).as_posix()
             for root, _, files in os.walk(staged) for name in files if name != MANIFEST}
    write_manifest(staged, manifest_names(staged) | names)
