"""The controller's measured verify-cost curve, kept on disk between sessions.

What a k-token window costs depends on the model file, the backend and its build, the device and the
threads (Backend.cost_key()), not on the conversation, so a new session can start from the last one's
curve instead of measuring (and exploring) it again. One small JSON file per key in
``~/.cache/localspec/costs/`` (or ``$LOCALSPEC_CACHE/costs/``). A damaged file is ignored with a warning
and overwritten by the next save; nothing here raises into a chat.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Optional

from localspec.fileio import atomic_write, cache_root

VERSION = 1


def default_dir() -> Path:
    return cache_root() / "costs"


class CostCache:
    def __init__(self, key: Optional[str], directory: Optional[Path] = None) -> None:
        self.key = key
        self.path = None if key is None else (directory or default_dir()) / (
            hashlib.sha256(key.encode()).hexdigest()[:24] + ".json")

    def load(self) -> dict:
        """The saved curve ({'verify_s': {n: s}, 'count': {n: c}}), or {} when there is none or it is damaged."""
        if self.path is None or not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            if data.get("version") != VERSION or data.get("key") != self.key:
                return {}
            costs = data["costs"]
            if not all(float(s) > 0 for s in costs["verify_s"].values()):
                raise ValueError("a cost that is not positive")
            return costs
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            print(f"localspec: ignoring the damaged cost cache {self.path} ({exc}); it will be measured again",
                  file=sys.stderr)
            return {}

    def save(self, costs: dict) -> None:
        if self.path is None or not costs.get("verify_s"):
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path, json.dumps({"version": VERSION, "key": self.key, "costs": costs},
                                               indent=1).encode())
        except OSError as exc:  # a full or read-only disk must not end the chat
            print(f"localspec: could not save the cost cache: {exc}", file=sys.stderr)


def cache_disabled() -> bool:
    """LOCALSPEC_NO_COST_CACHE=1: measure afresh every session (benchmarks of the cold start)."""
    return os.environ.get("LOCALSPEC_NO_COST_CACHE", "") not in ("", "0")
