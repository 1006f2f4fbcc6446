"""Writing files so that a crash or a concurrent reader never sees half of one."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, flush it to disk, then rename it over ``path``."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def data_dir() -> Path:
    """localspec's data folder (chats, registered local models): $LOCALSPEC_DATA, else
    $XDG_DATA_HOME/localspec (~/.local/share/localspec)."""
    return Path(
        os.environ.get("LOCALSPEC_DATA")
        or os.path.join(os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share"), "localspec")
    )


def cache_root() -> Path:
    """localspec's cache folder: $LOCALSPEC_CACHE, else $XDG_CACHE_HOME/localspec, else ~/.cache/localspec."""
    base = os.environ.get("LOCALSPEC_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "localspec"
    )
    return Path(base)
