"""Figures measured on this machine, kept on disk between sessions, one small JSON file per key.

What a k-token window costs depends on the model file, the backend and its build, the device and the
threads (cost_key), not on the conversation, so a new session can start from the last one's
curve instead of measuring (and exploring) it again; the exact guard's near-tie margin
(localspec/engine/exact.py) is kept the same way. Files live in ``~/.cache/localspec/<kind>/`` (or
``$LOCALSPEC_CACHE/<kind>/``). A damaged file is ignored with a warning and overwritten by the next save;
nothing here raises into a chat.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from localspec.fileio import atomic_write
from localspec.places import cache_root

VERSION = 2  # 1 kept the curve under "costs"; such files are ignored, not reported as damaged


class KeyedCache:
    """One JSON object per key under cache_root()/kind; ``check`` raises ValueError on a damaged one."""

    kind, what = "costs", "cost cache"

    def __init__(self, key: str | None, directory: Path | None = None) -> None:
        self.key = key
        self.path = (
            None
            if key is None
            else (directory or cache_root() / self.kind) / (hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")
        )

    def check(self, data: dict) -> None:
        pass

    def load(self) -> dict:
        """What was saved under this key, or {} when there is nothing or it is damaged."""
        if self.path is None or not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("version") != VERSION or data.get("key") != self.key:
                return {}
            self.check(data["data"])
            return data["data"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            print(
                f"localspec: ignoring the damaged {self.what} {self.path} ({exc}); it will be measured again",
                file=sys.stderr,
            )
            return {}

    def save(self, data: dict) -> None:
        if self.path is None or not data:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps({"version": VERSION, "key": self.key, "data": data}, indent=1).encode())
        except OSError as exc:  # a full or read-only disk must not end the chat
            print(f"localspec: could not save the {self.what}: {exc}", file=sys.stderr)


class CostCache(KeyedCache):
    """The controller's verify-cost curve: {'verify_s': {n: seconds}, 'count': {n: timings}}."""

    def check(self, data: dict) -> None:
        if not all(float(s) > 0 for s in data["verify_s"].values()):
            raise ValueError("a cost that is not positive")

    def save(self, costs: dict) -> None:
        if costs.get("verify_s"):
            super().save(costs)

    @classmethod
    def of(cls, backend, invariant: bool) -> CostCache:
        """The curve for ``backend`` (cost_key) and the kernels in use: batch-invariant windows cost more
        than the default kernels' (localspec/backends/llama_cpp/exact.py), so each has its own."""
        key = None if cache_disabled() else cost_key(backend)
        if key is not None and invariant:
            key += "|batch-invariant kernels"
        return cls(key)


def cost_key(backend) -> str | None:
    """Identifies what verify windows cost on this machine (the controller's curve is kept per key): the model
    file (path, size, mtime), the backend and its build, the context. None: nothing to key it by."""
    path = backend.path
    try:
        stat = Path(path).stat() if path is not None else None
    except OSError:
        return None
    if stat is None:
        return None
    where = f"{backend.name}|{Path(path).resolve()}|{stat.st_size}|{int(stat.st_mtime)}"
    return f"{where}|{backend.build_id()}|ctx {backend.n_ctx}"


def cache_disabled() -> bool:
    """LOCALSPEC_NO_COST_CACHE=1: measure afresh every session (benchmarks of the cold start)."""
    return os.environ.get("LOCALSPEC_NO_COST_CACHE", "") not in ("", "0")
