"""A row's sampling candidates: its top-k logits, or the logits min-p keeps, in ascending id order.

This is the one part of sampling that reads the whole vocabulary, once per sampled or verified row. The
compiled scan (``_shortlist.c``) finds a 152k vocabulary's top 40 in 0.07 ms where numpy's partition takes 1.1 ms
(benchmarks/sampling_cost.py, 2-core EPYC), without copying the row; where the C extension could not be built,
numpy gives the same candidates.
"""

from __future__ import annotations

import ctypes
import importlib.util
from functools import lru_cache

import numpy as np

_I32P = ctypes.POINTER(ctypes.c_int32)
_F32P = ctypes.POINTER(ctypes.c_float)
SLACK = 1e-3  # logits: how much looser the float32 bound of ``above`` is than the float64 one it stands for


@lru_cache(maxsize=1)
def compiled() -> ctypes.CDLL | None:
    """The C functions, or None where the extension was not built (no C compiler at install)."""
    spec = importlib.util.find_spec("localspec._shortlist")
    if spec is None or not spec.origin:
        return None
    lib = ctypes.CDLL(spec.origin)
    lib.sl_top_k.restype = ctypes.c_int32
    lib.sl_top_k.argtypes = [_F32P, ctypes.c_int32, ctypes.c_int32, _I32P, _F32P]
    lib.sl_above.restype = ctypes.c_int32
    lib.sl_above.argtypes = [_F32P, ctypes.c_int32, ctypes.c_float, _I32P, _F32P, ctypes.c_int32]
    return lib


def _contiguous_f32(row: np.ndarray) -> np.ndarray:
    return row if row.dtype == np.float32 and row.flags.c_contiguous else np.ascontiguousarray(row, np.float32)


def top_k(row: np.ndarray, k: int, use_c: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(ids, logits) of the ``k`` largest logits of ``row`` (1 <= k <= len(row)), ascending id; of equal logits
    the first ids are kept."""
    lib = compiled() if use_c else None
    if lib is None:
        ids = _partition(row, k)
        return ids, np.asarray(row)[ids]
    given, row = row, _contiguous_f32(row)
    ids, vals = np.empty(k, np.int32), np.empty(k, np.float32)
    if (
        lib.sl_top_k(row.ctypes.data_as(_F32P), row.shape[0], k, ids.ctypes.data_as(_I32P), vals.ctypes.data_as(_F32P))
        != k
    ):
        return top_k(given, k, use_c=False)  # the scan could not allocate its heap
    return _given(given, row, ids, vals)


def _partition(row: np.ndarray, k: int) -> np.ndarray:
    """The k largest by argpartition (ties at the k-th value broken by id, as the compiled scan does)."""
    row = np.asarray(row)
    kth = np.partition(row, row.shape[0] - k)[row.shape[0] - k]
    above = np.flatnonzero(row > kth)
    equal = np.flatnonzero(row == kth)[: k - above.shape[0]]
    return np.sort(np.concatenate([above, equal]))


def above(row: np.ndarray, gap: float, use_c: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(ids, logits) of every logit within ``gap`` (<= 0) of the row's largest, ascending id: a superset of
    what the same test in float64 keeps (the float32 bound is loosened by SLACK), for the caller to refine."""
    gap -= SLACK
    lib = compiled() if use_c else None
    if lib is None:
        row = np.asarray(row)
        ids = np.flatnonzero(row >= np.float32(row.max() + np.float32(gap)))
        return ids, row[ids]
    given, row = row, _contiguous_f32(row)
    cap = 64
    while True:
        ids, vals = np.empty(cap, np.int32), np.empty(cap, np.float32)
        n = lib.sl_above(
            row.ctypes.data_as(_F32P), row.shape[0], gap, ids.ctypes.data_as(_I32P), vals.ctypes.data_as(_F32P), cap
        )
        if n <= cap:
            return _given(given, row, ids[:n], vals[:n])
        cap = n


def _given(given, row: np.ndarray, ids: np.ndarray, vals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The candidates' logits as the caller's row holds them (a float64 row is scanned as float32)."""
    ids = ids.astype(np.int64)
    return ids, (vals if given is row else np.asarray(given)[ids])
