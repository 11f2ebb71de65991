"""Files written whole or not at all, JSON written the one way, and file checksums."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, write) -> None:
    """Call `write(temp_path)` and rename the result over `path`: readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(temp)
        os.chmod(temp, 0o666 & ~current_umask())  # mkstemp makes 0600; give the usual permissions
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def write_json(path: Path, payload) -> None:
    def write(temp):
        Path(temp).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")

    atomic_write(path, write)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
