"""The global suffix cache on disk: earlier assistant answers (as token ids), one file per tokenizer.

File format (version 2, little-endian): the magic line, one JSON header line ({"version", "tokenizer"}), then
one record per answer: an 8-byte id, the token count and the CRC-32 of id + tokens (uint32 each), the int32
tokens. Saving an answer appends its record under an exclusive lock (a fraction of a millisecond, what a
server pays per request); the whole file is rewritten atomically only when old answers are evicted (once per
tenth of the bound) or when it was damaged or of version 1. Every save picks up what other chats appended
meanwhile (a rewrite keeps their answers too), so concurrent chats neither corrupt the file nor drop each
other's answers, whatever the order of saves, appends, evictions and damage.

A damaged file (a torn last record after a crash, flipped bits) keeps its records up to the damage: a copy is
set aside with a warning (beside earlier ones, never over them) and the file is rewritten from what was read.
A file of another tokenizer or an unreadable header is set aside and the cache starts empty; nothing raises.
Files are the user's alone (0600).
Appends are flushed to the operating system, not fsynced: a power loss can lose the latest answers only.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import struct
import sys
import zlib
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from filelock import FileLock

from localspec.fileio import PRIVATE, atomic_write
from localspec.places import cache_root

MAGIC = b"LOCALSPEC-SUFFIX-CACHE\n"
VERSION = 2
RECORD = struct.Struct("<8sII")  # id, token count, crc32(id + tokens)


def default_cache_dir() -> Path:
    return cache_root() / "suffix"


class AnswerStore:
    """Answers (id -> tokens), oldest first, bounded to ``max_tokens`` tokens in all. ``persist=False``
    reads the cache on disk but never writes it (`serve --no-persist`)."""

    def __init__(self, path: Path | None, tokenizer: str, max_tokens: int = 200_000, persist: bool = True) -> None:
        self.path, self.tokenizer, self.max_tokens, self.persist = path, tokenizer, max_tokens, persist
        self.answers: dict[bytes, np.ndarray] = {}  # insertion order = age
        self.warning: str | None = None
        self._pending: list[bytes] = []  # added since the last save
        self._end = 0  # the file's length as last read or written (appends start there)
        self._rewrite = False  # the file must be rewritten whole (evicted answers, damage, version 1)
        self._inode = None  # the file read or written (another chat's rewrite replaces it)
        self._generation = ""  # its header's, new at every rewrite
        if path is not None and path.exists():
            with self._locked():
                self._read()
            self._rewrite |= bool(self._evict())

    @classmethod
    def for_tokenizer(cls, tokenizer: str, max_tokens: int, directory: Path | None = None, persist=True) -> AnswerStore:
        directory = directory or default_cache_dir()
        return cls(directory / f"{tokenizer[:32]}.bin", tokenizer, max_tokens, persist)

    @property
    def n_tokens(self) -> int:
        return sum(len(a) for a in self.answers.values())

    def add(self, tokens) -> bool:
        """Keep an answer; True if older answers had to go (the caller rebuilds its tree)."""
        answer_id = secrets.token_bytes(8)
        self.answers[answer_id] = np.asarray(tokens, dtype=np.int32)
        self._pending.append(answer_id)
        dropped = self._evict()
        self._rewrite |= bool(dropped)
        return bool(dropped)

    def _evict(self) -> list[bytes]:
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
        """Append the answers added since the last save (rewrite the file if it must be)."""
        if self.path is None or not self.persist or not (self._pending or self._rewrite):
            return
        with self._locked():
            if not self._same_file():  # another chat rewrote it (or it is gone): read it again
                self._read()
                self._rewrite |= bool(self._evict())
            elif self._rewrite:  # what other chats appended since goes into the rewrite too
                self._catch_up()
                self._evict()
            if self._rewrite or self._end == 0:
                self._write_all()
            else:
                self._append()
        self._pending, self._rewrite = [], False

    def _same_file(self) -> bool:
        """The file this process last read or wrote, perhaps grown by appends: the same inode, size and header
        (a rewrite's header carries a fresh ``generation``, so a reused inode number is not taken for it)."""
        try:
            st = self.path.stat()
            with open(self.path, "rb") as f:
                head = f.read(len(self._header()))
        except OSError:
            return False
        return st.st_ino == self._inode and st.st_size >= self._end and head == self._header()

    # -- file format --------------------------------------------------------------------------------
    @contextmanager
    def _locked(self):
        """An exclusive lock beside the file, held by one process at a time on Linux, macOS and Windows
        (filelock: flock on POSIX, msvcrt.locking on Windows); released when the block ends or the process dies."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(self.path.with_suffix(".lock"), mode=PRIVATE):
            yield

    def _catch_up(self) -> None:
        """Read the answers other chats appended since this process last read or wrote the file (a torn
        record of a crashed one is left out)."""
        with open(self.path, "rb") as f:
            f.seek(self._end)
            tail = f.read()
        if tail:
            self._records(tail, self._end, whole=False)
            pending = set(self._pending)  # theirs came before this process's unsaved answers: older
            self.answers = {**{i: a for i, a in self.answers.items() if i not in pending},
                            **{i: self.answers[i] for i in self._pending if i in self.answers}}  # fmt: skip

    def _append(self) -> None:
        with open(self.path, "r+b") as f:
            f.seek(self._end)
            if tail := f.read():  # other chats' answers; a torn record of a crashed one is cut off below
                self._records(tail, self._end, whole=False)
            records = b"".join(_record(i, self.answers[i]) for i in self._pending if i in self.answers)
            f.seek(self._end)
            f.write(records)
            f.truncate()
            self._end = f.tell()

    def _header(self) -> bytes:
        fields = {"version": VERSION, "tokenizer": self.tokenizer, "generation": self._generation}
        return MAGIC + json.dumps(fields).encode() + b"\n"

    def _read(self) -> None:
        """Merge the file's answers into memory (ours stay, in their order after the file's)."""
        try:
            data = self.path.read_bytes() if self.path.exists() else b""
            self._inode = self.path.stat().st_ino if data else None
        except OSError as exc:
            return self._discard(exc)
        self._end = 0
        if not data:
            return
        try:
            if not data.startswith(MAGIC):
                raise ValueError("not a localspec suffix cache")
            end = data.index(b"\n", len(MAGIC)) + 1
            header = json.loads(data[len(MAGIC) : end])
            self._generation = str(header.get("generation", ""))
            self._rewrite |= "generation" not in header  # an older file: rewritten once with one
            if header.get("tokenizer") != self.tokenizer:
                raise ValueError("it belongs to another tokenizer")
            if header.get("version") == 1:
                return self._read_v1(header, data[end:])
            if header.get("version") != VERSION:
                raise ValueError(f"version {header.get('version')} (this localspec reads {VERSION})")
        except (ValueError, KeyError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
            return self._discard(exc)
        if not self._records(data[end:], end, whole=True):
            self._damaged(data)

    def _records(self, data: bytes, offset: int, whole: bool) -> bool:
        """Read the records in ``data`` (which starts at ``offset`` in the file); False if it ends damaged."""
        found, at = {}, 0
        while at + RECORD.size <= len(data):
            answer_id, n, crc = RECORD.unpack_from(data, at)
            body = data[at + RECORD.size : at + RECORD.size + 4 * n]
            if len(body) != 4 * n or zlib.crc32(answer_id + body) != crc:
                break
            found[answer_id] = np.frombuffer(body, dtype="<i4").astype(np.int32)
            at += RECORD.size + 4 * n
        mine = {i: self.answers[i] for i in self.answers if i not in found}
        self.answers = {**found, **mine} if whole else {**self.answers, **found}
        self._end = offset + at
        return at == len(data)

    def _read_v1(self, header: dict, body: bytes) -> None:
        if zlib.crc32(body) != header.get("crc32"):
            return self._discard(ValueError("checksum mismatch"))
        tokens, at, found = np.frombuffer(body, dtype="<i4"), 0, {}
        for answer_id, length in header["answers"]:
            found[bytes.fromhex(answer_id)] = tokens[at : at + length].astype(np.int32)
            at += length
        self.answers = {**found, **{i: a for i, a in self.answers.items() if i not in found}}
        self._rewrite = True  # written back as version 2

    def _aside(self) -> Path:
        """A free name for a damaged file's copy: a.corrupt, then a.1.corrupt, a.2.corrupt, ..."""
        aside, n = self.path.with_suffix(".corrupt"), 0
        while aside.exists():
            n += 1
            aside = self.path.with_suffix(f".{n}.corrupt")
        return aside

    def _damaged(self, data: bytes) -> None:
        aside = self._aside()
        with contextlib.suppress(OSError):
            shutil.copyfile(self.path, aside)
            os.chmod(aside, PRIVATE)
        self._warn(f"its end is damaged; {len(self.answers)} answers were read, a copy is in {aside.name}")
        self._rewrite = True

    def _discard(self, reason: Exception) -> None:
        aside = self._aside()
        self._warn(f"{reason}; it was moved to {aside.name} and the cache starts empty")
        with contextlib.suppress(OSError):
            os.replace(self.path, aside)
        self._end, self._rewrite = 0, True

    def _warn(self, what: str) -> None:
        self.warning = f"localspec: the suffix cache {self.path} could not be used whole ({what})"
        print(self.warning, file=sys.stderr)

    def _write_all(self) -> None:
        self._generation = secrets.token_hex(8)
        data = self._header() + b"".join(_record(i, a) for i, a in self.answers.items())
        atomic_write(self.path, data)
        self._end, self._inode = len(data), self.path.stat().st_ino


def _record(answer_id: bytes, tokens: np.ndarray) -> bytes:
    body = tokens.astype("<i4").tobytes()
    return RECORD.pack(answer_id, len(tokens), zlib.crc32(answer_id + body)) + body
