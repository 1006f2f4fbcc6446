"""Writing files so that a crash or a concurrent reader never sees half of one."""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE = 0o600  # chats, caches and settings hold what the user typed and read: theirs alone


def atomic_write(path: Path, data: bytes, mode: int = PRIVATE) -> None:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk, then rename it over ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "wb") as f:
        os.chmod(tmp, mode)  # a file left over from a crash keeps its old mode otherwise
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
