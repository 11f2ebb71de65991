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
import math
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


def strict(value):
    """`value` with every NaN and infinity as None (null): strict JSON readers (JavaScript, jq)
    refuse the bare NaN Python writes, and a measurement that does not exist is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: strict(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(item) for item in value]
    return value


def write_json(path: Path, payload) -> None:
    def write(temp):
        Path(temp).write_text(json.dumps(strict(payload), indent=2, sort_keys=True, allow_nan=False) + "\n")

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
    except ValueError as error:   # not UTF-8, not JSON, or an integer past Python's 4300-digit limit
        raise UsageError(f"{path} is not valid JSON ({getattr(error, 'msg', error)}); {fix}") from None
    except RecursionError:
        raise UsageError(f"{path} is nested too deeply to be a toylens file; {fix}") from None


def check_fields(data, types: dict, where: str, fix: str, nullable=()) -> dict:
    """`data` if it is a JSON object of known fields, each of exactly the type `types` gives it (int
    and float exclude true and false, float excludes NaN and infinity, list means a list of
    strings; a field in `nullable` may also be null); else a UsageError naming the field and `fix`."""
    if not isinstance(data, dict):
        raise UsageError(f"{where} must be a JSON object; {fix}")
    unknown = sorted(set(data) - set(types))
    if unknown:
        raise UsageError(f"{where} has unknown field(s) {unknown}; {fix}")
    for name, value in data.items():
        if not (value is None and name in nullable or of_type(value, types[name])):
            raise UsageError(f"{where}: {name} must be {TYPE_WORDS[types[name]]}, got {short(value)}; {fix}")
    return data


def short(value) -> str:
    """A stored value as an error message quotes it: its repr, cut at 60 characters."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


TYPE_WORDS = {str: "a string", int: "an integer", float: "a finite number", bool: "true or false",
              dict: "an object", list: "a list of strings"}


def of_type(value, kind: type) -> bool:
    if isinstance(value, bool) and kind is not bool:
        return False
    if kind is float:
        return isinstance(value, (int, float)) and math.isfinite(value)
    if kind is list:
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    return isinstance(value, kind)


def canonical_sha256(payload) -> str:
    """SHA-256 of a JSON value written one canonical way (sorted keys, no spaces, NaN as null, as
    write_json stores it)."""
    return hashlib.sha256(json.dumps(strict(payload), sort_keys=True, separators=(",", ":")).encode()).hexdigest()


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


def adopt_all(staged: Path) -> None:
    """List every file under a staging folder toylens made (and alone wrote into) in its manifest."""
    staged = Path(staged)
    names = {(Path(root) / name).relative_to(staged).as_posix()
             for root, _, files in os.walk(staged) for name in files if name != MANIFEST}
    write_manifest(staged, manifest_names(staged) | names)
