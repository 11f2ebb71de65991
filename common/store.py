"""The one module that reads stored files: strict JSON (every config, metrics, circuit and report
file), JSON read leniently where a damaged file is rewritten (the ownership manifest), and
safetensors (weights, snapshots, fixtures); nothing is unpickled. Every file toylens reads is untrusted
until it passes these; writing stays with `common.atomic` and `common.jsonfiles`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from common.cli import UsageError
from common.jsonfiles import strict

MAX_JSON_BYTES = 64 * 1024 * 1024  # no file toylens writes comes near this; refuse before reading


def read_json(path: Path, fix: str):
    """The JSON value in `path`; anything that is not (not a regular file, too big, not UTF-8, not
    JSON, a key twice, nested too deep for the parser) is a UsageError naming `fix`."""
    path = Path(path)
    if not path.is_file():  # a FIFO or device would block the read forever (or fill memory: /dev/zero)
        raise UsageError(f"{path} is not a regular file (a folder, a FIFO, a device or a dangling link); {fix}")
    if path.stat().st_size > MAX_JSON_BYTES:
        raise UsageError(
            f"{path} is {path.stat().st_size} bytes, more than any toylens JSON file ({MAX_JSON_BYTES}); {fix}"
        )
    try:
        return parse_json(path, unique_keys)
    except ValueError as error:  # not UTF-8, not JSON, a key twice, or an integer past Python's 4300-digit limit
        raise UsageError(f"{path} is not valid JSON ({getattr(error, 'msg', error)}); {fix}") from None
    except RecursionError:
        raise UsageError(f"{path} is nested too deeply to be a toylens file; {fix}") from None


def parse_json(path: Path, pairs: Callable[[list], dict] | None = None):
    """The JSON value in `path`, for readers that word their own refusal: OSError, ValueError (not
    UTF-8, not JSON, or whatever `pairs` refuses) and RecursionError reach the caller."""
    return json.loads(Path(path).read_text(), object_pairs_hook=pairs)


def json_or_none(path: Path):
    """The JSON value in `path`, or None where there is none to trust (a link, not a regular file,
    not JSON): for a file toylens rewrites when it is damaged rather than refusing it."""
    try:
        return None if path.is_symlink() or not path.is_file() else parse_json(path)
    except (ValueError, RecursionError, OSError):
        return None


def as_read_back(payload):
    """`payload` as a JSON file holding it is read back (a dict's int keys as strings, tuples as
    lists, NaN as null), without the file."""
    return json.loads(json.dumps(strict(payload)))


def unique_keys(pairs: list) -> dict:
    """A JSON object whose keys are distinct: with a key twice, Python keeps the last value and other
    readers (jq, JavaScript engines) may keep another, so the file says two things."""
    keys = [key for key, _ in pairs]
    if len(set(keys)) < len(keys):
        raise ValueError(f"key {next(k for k in keys if keys.count(k) > 1)!r} twice in one object")
    return dict(pairs)


def load_tensors(path: Path, fix: str, header_only: bool = False) -> tuple[dict, dict]:
    """(tensors, metadata) saved by `models.checkpoint.save_tensors` (with `header_only`, no tensors
    are read: {}); a damaged file is a UsageError naming `fix`."""
    from safetensors import SafetensorError, safe_open

    if not Path(path).is_file():  # a FIFO would block the read forever
        raise UsageError(f"{path} is not a regular file (a folder, a FIFO, a device or a dangling link); {fix}")
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = json.loads((handle.metadata() or {})["toylens"])
            return ({} if header_only else {name: handle.get_tensor(name) for name in handle.keys()}), metadata
    except (SafetensorError, OSError, KeyError, TypeError, ValueError, RecursionError) as error:
        raise UsageError(f"{path} is {damage(path)} ({error}); {fix}") from None


def read_tensors(path: Path, refusal: Callable[[Exception], str]) -> dict:
    """Every tensor of a safetensors file, on the CPU; a file safetensors cannot read (truncated,
    not safetensors) is a UsageError worded by `refusal` from the error."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as error:
        raise UsageError(refusal(error)) from None


def stored_values(path: Path) -> int:
    """How many numbers a safetensors file holds, read from its header alone."""
    import math

    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            return sum(math.prod(handle.get_slice(name).get_shape()) for name in handle.keys())
    except (SafetensorError, OSError, ValueError) as error:
        raise UsageError(f"{path} is {damage(path)} ({error}); retrain the run") from None


def damage(path: Path) -> str:
    """Why a weights file does not load, in words: pickles get named as such."""
    with open(path, "rb") as handle:
        head = handle.read(4)
    if head.startswith(b"PK\x03\x04") or (head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05")):
        return "a pickle (torch.save), not safetensors; toylens never unpickles a file"
    return "corrupt or truncated"
