"""The ownership rule: toylens replaces or deletes only files it can prove it wrote.

Proof is a manifest, `.toylens.json`, in the folder holding the file (or in a folder above it),
listing the file's path relative to that folder with the SHA-256 and size of what toylens wrote
there. The content is recorded before the file is renamed into place, so a kill at any moment
leaves a file the manifest vouches for; a file of a listed name whose content differs (a user
deleted toylens's file and saved their own under its name, or edited it) is the user's, and
writing over it is refused.

Names beginning `.toylens` are toylens's own: the manifest, the lock, and the temp files and
folders every writer works in (`.toylens-tmp.<pid>.<name>`) before renaming the result into place.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from common.cli import UsageError, check_no_link, linked_part
from common.store import json_or_none

MANIFEST = ".toylens.json"
LOCK = ".toylens.lock"  # common.lock's; never a user's file
TEMP = ".toylens-tmp."  # + "<pid>.<name>": a file or folder being written by process <pid>


@dataclass(frozen=True)
class Version:
    """What toylens wrote under a name: `size` bytes with this SHA-256."""

    sha256: str
    size: int


@dataclass(frozen=True)
class Written:
    """A manifest's entry for one name. `versions` is None for a name a toylens that recorded no
    checksums listed (vouched for by name alone); `grows` for a file toylens appends to after
    writing it whole (the training log): its versions are the start of the file."""

    versions: tuple[Version, ...] | None = ()
    grows: bool = False

    def vouches_for(self, path: Path) -> bool:
        if self.versions is None:
            return True
        size = path.stat().st_size
        return any(
            (size >= v.size if self.grows else size == v.size) and sha256_prefix(path, v.size) == v.sha256
            for v in self.versions
        )


def sha256_prefix(path: Path, size: int) -> str:
    """SHA-256 of the first `size` bytes of `path`."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while size > 0:
            chunk = handle.read(min(size, 1 << 20))
            if not chunk:
                break
            digest.update(chunk)
            size -= len(chunk)
    return digest.hexdigest()


def version_of(path: Path) -> Version:
    size = Path(path).stat().st_size
    return Version(sha256_prefix(path, size), size)


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


def manifest_entries(folder: Path) -> dict[str, Written]:
    return read_manifest(folder) or {}


def read_manifest(folder: Path) -> dict[str, Written] | None:
    """The entries of `folder`'s manifest (none if it has none); None when a file of the manifest's
    name is there but is not one toylens wrote (a user's file, a link): it must not be replaced."""
    path = Path(folder) / MANIFEST
    if not (path.exists() or path.is_symlink()):
        return {}
    data = json_or_none(path)
    files = data.get("files") if isinstance(data, dict) and data.get("written_by") == "toylens" else None
    if isinstance(files, list):  # written by a toylens that recorded names only
        return {name: Written(None) for name in files if isinstance(name, str)}
    if not isinstance(files, dict):
        return None
    try:
        return {
            name: Written(
                None
                if entry["versions"] is None
                else tuple(
                    Version(v["sha256"], v["bytes"])
                    for v in entry["versions"]
                    if isinstance(v["sha256"], str) and type(v["bytes"]) is int
                ),
                entry.get("grows") is True,
            )
            for name, entry in files.items()
        }
    except (TypeError, KeyError, AttributeError):
        return None


def write_manifest(folder: Path, entries: dict[str, Written]) -> None:
    files = {
        name: {
            "versions": None
            if entry.versions is None
            else [{"sha256": v.sha256, "bytes": v.size} for v in entry.versions],
            **({"grows": True} if entry.grows else {}),
        }
        for name, entry in sorted(entries.items())
    }
    temp = Path(folder) / f"{TEMP}{os.getpid()}{MANIFEST}"
    try:
        temp.write_text(json.dumps({"written_by": "toylens", "files": files}, indent=1) + "\n")
        os.replace(temp, Path(folder) / MANIFEST)
    except BaseException:  # a full disk (or a kill's KeyboardInterrupt): no half manifest stays
        temp.unlink(missing_ok=True)
        raise


def owned(path: Path) -> bool:
    """Whether a manifest in `path`'s folder or above vouches for its content (toylens wrote it)."""
    path = Path(os.path.abspath(path))
    for folder in path.parents:
        entry = manifest_entries(folder).get(path.relative_to(folder).as_posix())
        if entry is not None and entry.vouches_for(path):
            return True
    return False


def not_ours(path: Path) -> UsageError:
    return UsageError(
        f"{path} was not written by toylens (no {MANIFEST} vouches for its content) and toylens "
        "never replaces or deletes a file it did not write; move it away or choose another folder"
    )


def record(path: Path, written: Version, grows: bool = False) -> None:
    """Record, before `written` is renamed into place at `path`, that toylens wrote it; the
    version of the file there now is kept too, so a kill before the rename leaves it vouched
    for. Callers check first (claim_check) that no file toylens did not write is there."""
    path = Path(path)
    with folder_locked(path.parent):
        entries = manifest_entries(path.parent)
        before = entries.get(path.name, Written())
        kept = tuple(
            v
            for v in before.versions or ()
            if v != written and path.exists() and Written((v,), before.grows).vouches_for(path)
        )
        # The same content written again (a resumed sweep's sweep.json) is one version, so the
        # manifest reads as if it had been written once.
        entries[path.name] = Written((*kept, written), grows)
        write_manifest(path.parent, entries)


def claim_check(path: Path) -> None:
    """Refuse, before any work, when writing `path` would replace a file toylens did not write."""
    path = Path(path)
    check_no_link(path)
    if path.name.startswith(".toylens"):
        raise UsageError(f"{path}: names beginning '.toylens' are toylens's own files; choose another file name")
    if read_manifest(path.parent) is None:
        raise UsageError(
            f"{path.parent / MANIFEST} is not an ownership manifest toylens wrote, and toylens "
            "never replaces a user's files: move it away or choose another folder"
        )
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


def is_temp(path: Path) -> bool:
    """A temp file or folder of toylens's (being written, or left by a killed writer)."""
    return Path(path).name.startswith(TEMP) and not Path(path).is_symlink()


def writer_alive(path: Path) -> bool:
    """Whether the process that made temp `path` (its pid is in the name) still runs."""
    pid = Path(path).name[len(TEMP) :].split(".", 1)[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def clean_leftovers(folder: Path) -> None:
    """Delete the temp files and folders in `folder` whose writer is gone (a kill interrupted it):
    toylens made them, and nothing else will."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for entry in folder.iterdir():
        if is_temp(entry) and not writer_alive(entry):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def foreign_files(folder: Path) -> list[Path]:
    """Files (and links) under `folder` that toylens cannot prove it wrote."""
    folder = Path(folder)
    if folder.is_symlink():
        return [folder]
    found = []
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            entry = Path(root) / name
            if entry.is_symlink() or (
                name in files and name not in (MANIFEST, LOCK) and not owned(entry) and not is_temp(entry)
            ):
                found.append(entry)
        dirs[:] = [d for d in dirs if not ((Path(root) / d).is_symlink() or is_temp(Path(root) / d))]
    return sorted(found)


def check_replaceable(folder: Path, what: str, within: Path | None = None) -> None:
    """Refuse, before any work, when `folder` is a file or a link (or, with `within`, a folder
    between `within` and it is a link: the writes would land wherever it points), or holds
    something toylens did not write."""
    link = first_link(folder, within) if within is not None else linked_part(folder)
    if link is not None:
        raise UsageError(
            f"{what} {folder}: {link} is a symbolic link; toylens does not write through links: "
            "remove it or choose another folder"
        )
    if Path(folder).exists() and not Path(folder).is_dir():
        raise UsageError(
            f"{what} {folder} is a file, not a folder, and toylens never replaces a user's files: "
            "move it away or choose another folder"
        )
    foreign = foreign_files(folder) if Path(folder).exists() or Path(folder).is_symlink() else []
    if foreign:
        raise UsageError(
            f"{what} {folder} holds {foreign[0]}{f' and {len(foreign) - 1} more' if len(foreign) > 1 else ''}"
            f", which was not written by toylens (no {MANIFEST} vouches for it); toylens never replaces a "
            "user's files: move them away or choose another folder"
        )


def first_link(path: Path, within: Path | None = None) -> Path | None:
    """`path`, or else a folder between `within` (exclusive) and `path`, that is a symbolic link."""
    path = Path(path)
    depth = len(path.relative_to(within).parts) if within is not None else 1
    return next((p for p in [path, *path.parents][:depth] if p.is_symlink()), None)


def check_publishable(out: Path, what: str, subfolders: tuple[str, ...] = ()) -> None:
    """Refuse, before any work, to swap a new folder in for `out` unless `out` is absent, empty or a
    folder toylens published whole (every file listed in its own manifest): a runs folder, a run
    or a folder of other output is never swapped away. `subfolders`: see vouched_within."""
    out = Path(out)
    check_replaceable(out, what)
    for root, dirs, files in os.walk(out):
        dirs[:] = [d for d in dirs if not is_temp(Path(root) / d)]
        held = [
            path
            for path in (Path(root) / name for name in files if name not in (MANIFEST, LOCK))
            if not is_temp(path) and not vouched_within(out, path, subfolders)
        ]
        if held:
            raise UsageError(
                f"{what} {out} holds {held[0]}, which is not part of a folder toylens published "
                "there (a run, or other output); toylens would swap it away: choose another folder"
            )


def vouched_within(out: Path, path: Path, subfolders: tuple[str, ...] = ()) -> bool:
    """Whether `out`'s own manifest vouches for `path` (a folder toylens published whole), or, for a
    file directly in one of `subfolders`, that subfolder's manifest (the layout of a folder toylens
    wrote file by file before it published whole: `edges`' figures/)."""
    out, path = Path(out), Path(path)
    folders = [out, *(out / name for name in subfolders if path.parent == out / name)]
    return any(
        manifest_entries(folder).get(path.relative_to(folder).as_posix(), Written()).vouches_for(path)
        for folder in folders
    )


def remove_tree(folder: Path, also=lambda path: False) -> None:
    """Delete every file toylens wrote under `folder` (or `also` accepts), then the folders left
    empty; anything else stays (callers check first with check_replaceable)."""
    folder = Path(folder)
    for root, _dirs, files in os.walk(folder, topdown=False):
        clean_leftovers(Path(root))
        for name in files:
            path = Path(root) / name
            if name != MANIFEST and path.exists() and (owned(path) or also(path)):
                path.unlink()
        if (Path(root) / MANIFEST).is_file() and set(os.listdir(root)) == {MANIFEST}:
            (Path(root) / MANIFEST).unlink()
        if not os.listdir(root):
            os.rmdir(root)


def adopt_all(staged: Path) -> None:
    """Record every file under a staging folder toylens made (and alone wrote into) in its manifest."""
    staged = Path(staged)
    found = {}
    for root, dirs, files in os.walk(staged):
        dirs[:] = [d for d in dirs if not is_temp(Path(root) / d)]
        for path in (Path(root) / name for name in files if name not in (MANIFEST, LOCK)):
            if not is_temp(path):
                found[path.relative_to(staged).as_posix()] = Written((version_of(path),))
    write_manifest(staged, {**manifest_entries(staged), **found})
