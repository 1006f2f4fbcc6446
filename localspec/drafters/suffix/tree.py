"""Python face of the compiled suffix trie (``_suffixtree.c``): append tokens, ask for a draft."""

from __future__ import annotations

import ctypes
import importlib.util
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

SEP = -1
MAX_DRAFT = 1024  # size of the draft output buffers
_I32P = ctypes.POINTER(ctypes.c_int32)
_F32P = ctypes.POINTER(ctypes.c_float)


@lru_cache(maxsize=1)
def _lib():
    spec = importlib.util.find_spec("localspec.drafters.suffix._suffixtree")
    if spec is None or not spec.origin:
        raise ImportError("localspec's compiled suffix tree is missing: reinstall localspec (pip install -e .)")
    return load_library(spec.origin)


def load_library(path: str) -> ctypes.CDLL:
    """The trie's C functions from a compiled ``_suffixtree`` (another build can be compared with it)."""
    lib = ctypes.CDLL(path)
    lib.st_new.restype = ctypes.c_void_p
    lib.st_new.argtypes = [ctypes.c_int32]
    lib.st_free.argtypes = [ctypes.c_void_p]
    lib.st_append.restype = ctypes.c_int
    lib.st_append.argtypes = [ctypes.c_void_p, ctypes.c_int32]
    lib.st_draft.restype = ctypes.c_int32
    lib.st_draft.argtypes = [
        ctypes.c_void_p,
        _I32P,
        ctypes.c_int32,
        ctypes.c_int32,
        ctypes.c_float,
        ctypes.c_float,
        ctypes.c_float,
        _I32P,
        _F32P,
        _I32P,
    ]
    if hasattr(lib, "st_count"):  # builds before it had no st_count
        lib.st_count.restype = ctypes.c_int64
        lib.st_count.argtypes = [ctypes.c_void_p, _I32P, ctypes.c_int32]
    for name in ("st_n_nodes", "st_n_tokens", "st_memory"):
        getattr(lib, name).restype = ctypes.c_int64
        getattr(lib, name).argtypes = [ctypes.c_void_p]
    return lib


@dataclass(frozen=True)
class TreeDraft:
    tokens: tuple[int, ...]
    probs: tuple[float, ...]  # path confidence of each token
    match_len: int

    @property
    def score(self) -> float:
        """Expected number of accepted tokens if the confidences were the acceptance probabilities."""
        return float(sum(self.probs))


class _CompiledTrie:
    """The trie in _suffixtree.c through ctypes."""

    def __init__(self, max_depth: int, lib: ctypes.CDLL) -> None:
        self._lib = lib
        self._tree = lib.st_new(max_depth)
        if not self._tree:
            raise MemoryError("could not allocate a suffix tree")
        self._out_tokens = (ctypes.c_int32 * MAX_DRAFT)()
        self._out_probs = (ctypes.c_float * MAX_DRAFT)()
        self._match = ctypes.c_int32()

    def append(self, token: int) -> None:
        if self._lib.st_append(self._tree, token):
            raise MemoryError("suffix tree: out of memory")

    def draft(self, tail, max_tokens: int, min_prob: float, factor: float, offset: float):
        tail = np.ascontiguousarray(tail, dtype=np.int32)
        n = self._lib.st_draft(
            self._tree,
            tail.ctypes.data_as(_I32P),
            len(tail),
            max_tokens,
            min_prob,
            factor,
            offset,
            self._out_tokens,
            self._out_probs,
            ctypes.byref(self._match),
        )
        return tuple(self._out_tokens[:n]), tuple(self._out_probs[:n]), self._match.value

    def count_of(self, pattern) -> int:
        pattern = np.ascontiguousarray(pattern, dtype=np.int32)
        return self._lib.st_count(self._tree, pattern.ctypes.data_as(_I32P), len(pattern))

    @property
    def corpus_len(self) -> int:
        return self._lib.st_n_tokens(self._tree)

    @property
    def node_count(self) -> int:
        return self._lib.st_n_nodes(self._tree)

    def memory_bytes(self) -> int:
        return self._lib.st_memory(self._tree)

    def close(self) -> None:
        if self._tree:
            self._lib.st_free(self._tree)
            self._tree = None

    def __del__(self) -> None:
        if getattr(self, "_tree", None):
            self.close()


def implementation() -> str:
    """Which trie SuffixTree uses by default: "C" (the compiled extension) or "Python" (the fallback)."""
    try:
        _lib()
    except (ImportError, OSError, AttributeError):  # not built, not loadable, or its functions not exported
        return "Python"
    return "C"


class SuffixTree:
    """A depth-limited suffix trie with occurrence counts over token sequences: the compiled one, or the
    pure-Python fallback (suffix_trie_py.py, the same drafts) where the extension was not built.
    ``implementation`` forces one ("C" or "Python"); ``lib`` is a compiled build to use (benchmarks)."""

    def __init__(self, max_depth: int = 64, lib: ctypes.CDLL | None = None, implementation: str | None = None) -> None:
        if max_depth < 2:
            raise ValueError("max_depth must be at least 2")
        self.max_depth = max_depth
        self.implementation = "C" if lib is not None else implementation or globals()["implementation"]()
        if self.implementation == "C":
            self._trie = _CompiledTrie(max_depth, lib or _lib())
        else:
            from localspec.drafters.suffix.trie_py import PyTrie

            self._trie = PyTrie(max_depth)

    def extend(self, tokens: Iterable[int]) -> None:
        """Append tokens to the open sequence."""
        append = self._trie.append
        for token in tokens:
            append(int(token))

    def close_sequence(self) -> None:
        """End the open sequence: no match or draft crosses this point."""
        self._trie.append(SEP)

    def add_sequence(self, tokens: Iterable[int]) -> None:
        self.extend(tokens)
        self.close_sequence()

    def draft(
        self, context: Sequence[int], max_tokens: int, min_prob: float = 0.1, factor: float = 1.0, offset: float = 0.0
    ) -> TreeDraft:
        """A draft of up to ``max_tokens`` (at most MAX_DRAFT) after ``context``; the rule is st_draft's in
        _suffixtree.c. Matches are at most max_depth - 1 tokens long, so only the context's tail is passed."""
        tail = list(context[-(self.max_depth - 1) :])
        tokens, probs, match = self._trie.draft(tail, min(max_tokens, MAX_DRAFT), min_prob, factor, offset)
        return TreeDraft(tokens, probs, match)

    def count(self, pattern: Sequence[int]) -> int:
        """Occurrences of ``pattern`` (at most max_depth tokens) as the trie counts them."""
        if not 0 < len(pattern) <= self.max_depth:
            raise ValueError(f"pattern length must be in 1..{self.max_depth}")
        return self._trie.count_of(list(pattern))

    @property
    def n_tokens(self) -> int:
        return self._trie.corpus_len

    @property
    def n_nodes(self) -> int:
        return self._trie.node_count

    def memory_bytes(self) -> int:
        return self._trie.memory_bytes()

    def close(self) -> None:
        close = getattr(self._trie, "close", None)
        if close:
            close()
