"""The ownership rule: toylens replaces or deletes only files it can prove it wrote.

Proof is a manifest, `.toylens.json`, in the folder holding the file (or in a folder above it),
listing the file's path relative to that folder. A name is added to the manifest before the file
is first written, and only when no file of that name exists yet, so a listed name was created by
toylens; a file toylens did not create is never listed, and writing over it is refused.
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path

from common.cli import UsageError

MANIFEST = ".toylens.json"
LOCK = ".toylens.lock"       # common.lock's; never a user's file


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
    return read_manifest(folder) or set()


def read_manifest(folder: Path) -> set[str] | None:
    """The names `folder`'s manifest lists (none if it has none); None when a file of the manifest's
    name is there but is not one toylens wrote (a user's file, a link): it must not be replaced."""
    path = Path(folder) / MANIFEST
    if not (path.exists() or path.is_symlink()):
        return set()
    try:
        data = None if path.is_symlink() else json.loads(path.read_text())
    except (ValueError, RecursionError, OSError):
        return None
    files = data.get("files") if isinstance(data, dict) and data.get("written_by") == "toylens" else None
    return {name for name in files if isinstance(name, str)} if isinstance(files, list) else None


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
    if read_manifest(path.parent) is None:
        raise UsageError(f"{path.parent / MANIFEST} is not an ownership manifest toylens wrote, and toylens "
                         "never replaces a user's files: move it away or choose another folder")
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


def check_replaceable(folder: Path, what: str, within: Path | None = None) -> None:
    """Refuse, before any work, when `folder` is a file or a link (or, with `within`, a folder
    between `within` and it is a link: the writes would land wherever it points), or holds
    something toylens did not write."""
    link = first_link(folder, within)
    if link is not None:
        raise UsageError(f"{what} {folder}: {link} is a symbolic link; toylens does not write through links: "
                         "remove it or choose another folder")
    if Path(folder).exists() and not Path(folder).is_dir():
        raise UsageError(f"{what} {folder} is a file, not a folder, and toylens never replaces a user's files: "
                         "move it away or choose another folder")
    foreign = foreign_files(folder) if Path(folder).exists() or Path(folder).is_symlink() else []
    if foreign:
        raise UsageError(f"{what} {folder} holds {foreign[0]}{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}"
                         f", which was not written by toylens (no {MANIFEST} lists it); toylens never replaces a "
                         "user's files: move them away or choose another folder")


def first_link(path: Path, within: Path | None = None) -> Path | None:
    """`path`, or else a folder between `within` (exclusive) and `path`, that is a symbolic link."""
    path = Path(path)
    depth = len(path.relative_to(within).parts) if within is not None else 1
    return next((p for p in [path, *path.parents][:depth] if p.is_symlink()), None)


def check_publishable(out: Path, what: str) -> None:
    """Refuse, before any work, to swap a new folder in for `out` unless `out` is absent, empty or a
    folder toylens published whole (every file listed in its own manifest): a runs folder, a run
    or a folder of other output is never swapped away."""
    out = Path(out)
    check_replaceable(out, what)
    listed = manifest_names(out)
    for root, _, files in os.walk(out):
        held = [Path(root) / name for name in files if name not in (MANIFEST, LOCK)
                and (Path(root) / name).relative_to(out).as_posix() not in listed]
        if held:
            raise UsageError(f"{what} {out} holds {held[0]}, which is not part of a folder toylens published "
                             "there (a run, or other output); toylens would swap it away: choose another folder")


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


def adopt_all(staged: Path) -> None:
    """List every file under a staging folder toylens made (and alone wrote into) in its manifest."""
    staged = Path(staged)
    names = {(Path(root) / name).relative_to(staged).as_posix()
             for root, _, files in os.walk(staged) for name in files if name != MANIFEST}
    write_manifest(staged, manifest_names(staged) | names)
