"""JSON written the one way (strict: no NaN), schema checks for stored JSON (read by `common.store`),
and file checksums: every file toylens reads is untrusted until it passes these."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from common.cli import UsageError


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


def not_unicode(text: str) -> bool:
    """Whether `text` holds a lone surrogate (U+D800..U+DFFF): Python carries it, but it is not
    Unicode, cannot be encoded as UTF-8, and strict JSON readers refuse the escape Python writes."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def json_text(payload) -> str:
    """The text write_json stores: strict JSON, indented, sorted keys."""
    return json.dumps(strict(payload), indent=2, sort_keys=True, allow_nan=False) + "\n"


def differences(recorded: dict, wanted: dict, prefix: str = "") -> list[str]:
    """Dotted names of the fields that differ, e.g. ['training.max_steps']. A stored key that is not
    printable (a newline, a control character) is named by its repr, so a message quoting it stays
    one line."""
    found = []
    for key in sorted(set(recorded) | set(wanted)):
        a, b = recorded.get(key), wanted.get(key)
        name = key if str(key).isprintable() else repr(key)
        if isinstance(a, dict) and isinstance(b, dict):
            found += differences(a, b, f"{prefix}{name}.")
        elif a != b:
            found.append(f"{prefix}{name}")
    return found


def check_fields(data, types: dict, where: str, fix: str, nullable=()) -> dict:
    """`data` if it is a JSON object of known fields, each of exactly the type `types` gives it (int
    and float exclude true and false, float excludes NaN and infinity, list means a list of
    strings, object any value but true or false; a field in `nullable` may also be null); else a
    UsageError naming the field and `fix`."""
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


TYPE_WORDS = {
    str: "a string",
    int: "an integer",
    float: "a finite number",
    bool: "true or false",
    dict: "an object",
    list: "a list of strings",
    object: "a JSON value other than true or false",
}  # fields checked member by member later


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
