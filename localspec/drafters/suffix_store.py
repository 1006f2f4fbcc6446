"""The global suffix cache on disk: earlier assistant answers (as token ids), one file per tokenizer.

File format (little-endian): the magic line, one JSON header line ({"version", "tokenizer", "answers":
[[id, length], ...], "crc32"}), then every answer's int32 tokens back to back. Writes go to a temporary file
and replace the old one atomically under an exclusive lock, after merging in answers that other chats saved
meanwhile (by id), so concurrent chats neither corrupt the file nor drop each other's answers. A corrupt or
incompatible file is set aside with a warning and the cache starts empty; nothing raises.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from localspec.fileio import atomic_write, cache_root

MAGIC = b"LOCALSPEC-SUFFIX-CACHE\n"
VERSION = 1


def default_cache_dir() -> Path:
    return cache_root() / "suffix"


class AnswerStore:
    """Answers (id -> tokens), oldest first, bounded to ``max_tokens`` tokens in all."""

    def __init__(self, path: Path | None, tokenizer: str, max_tokens: int = 200_000) -> None:
        self.path, self.tokenizer, self.max_tokens = path, tokenizer, max_tokens
        self.answers: dict[str, np.ndarray] = {}  # insertion order = age
        self.warning: str | None = None
        if path is not None and path.exists():
            with self._locked():
                self.answers = self._read()
            self._evict()

    @classmethod
    def for_tokenizer(cls, tokenizer: str, max_tokens: int, directory: Path | None = None) -> AnswerStore:
        directory = directory or default_cache_dir()
        return cls(directory / f"{tokenizer[:32]}.bin", tokenizer, max_tokens)

    @property
    def n_tokens(self) -> int:
        return sum(len(a) for a in self.answers.values())

    def add(self, tokens) -> bool:
        """Keep an answer; True if older answers had to go (the caller rebuilds its tree)."""
        self.answers[secrets.token_hex(8)] = np.asarray(tokens, dtype=np.int32)
        return bool(self._evict())

    def _evict(self) -> list[str]:
        """Past the bound, drop the oldest answers down to 90% of it (so eviction, which makes the
        in-memory tree rebuild, happens once per tenth of the cache, not on every turn)."""
        total = self.n_tokens
        if total <= self.max_tokens:
            return []
        dropped = []
        for answer_id in list(self.answers):
            if total <= 0.9 * self.max_tokens:
                break
            total -= len(self.answers.pop(answer_id))
            dropped.append(answer_id)
        return dropped

    def save(self) -> None:
        """Merge with what is on disk now, bound the size, write atomically."""
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            merged = self._read() if self.path.exists() else {}
            for answer_id, tokens in self.answers.items():
                merged.setdefault(answer_id, tokens)
            self.answers = merged
            self._evict()
            self._write()

    # -- file format --------------------------------------------------------------------------------
    @contextmanager
    def _locked(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read(self) -> dict[str, np.ndarray]:
        try:
            data = self.path.read_bytes()
            if not data.startswith(MAGIC):
                raise ValueError("not a localspec suffix cache")
            end = data.index(b"\n", len(MAGIC))
            header = json.loads(data[len(MAGIC) : end])
            if header.get("version") != VERSION:
                raise ValueError(f"version {header.get('version')} (this localspec reads {VERSION})")
            if header.get("tokenizer") != self.tokenizer:
                raise ValueError("it belongs to another tokenizer")
            body = data[end + 1 :]
            if zlib.crc32(body) != header.get("crc32"):
                raise ValueError("checksum mismatch")
            tokens = np.frombuffer(body, dtype="<i4")
            answers, at = {}, 0
            for answer_id, length in header["answers"]:
                answers[answer_id] = tokens[at : at + length].astype(np.int32)
                at += length
            if at != len(tokens):
                raise ValueError("length mismatch")
            return answers
        except (OSError, ValueError, KeyError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
            self._discard(exc)
            return {}

    def _discard(self, reason: Exception) -> None:
        aside = self.path.with_suffix(".corrupt")
        self.warning = (
            f"localspec: the suffix cache {self.path} could not be used ({reason}); "
            f"it was moved to {aside.name} and the cache starts empty"
        )
        print(self.warning, file=sys.stderr)
        with contextlib.suppress(OSError):
            os.replace(self.path, aside)

    def _write(self) -> None:
        body = b"".join(a.astype("<i4").tobytes() for a in self.answers.values())
        header = {
            "version": VERSION,
            "tokenizer": self.tokenizer,
            "crc32": zlib.crc32(body),
            "answers": [[answer_id, len(a)] for answer_id, a in self.answers.items()],
        }
        atomic_write(self.path, MAGIC + json.dumps(header).encode() + b"\n" + body)
