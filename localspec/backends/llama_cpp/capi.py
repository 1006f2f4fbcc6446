"""llama.cpp's C API as the rest of localspec sees it: the library (imported once, its log captured), its last
error in its own words, a GGUF check before it sees a file, contexts and models freed in order, a sequence's
state out and back, and the GPU layers to offload."""

from __future__ import annotations

import ctypes
import os
from collections import deque
from functools import lru_cache
from pathlib import Path

import numpy as np

from localspec.errors import ConfigError, ModelError

GGUF_MAGIC = b"GGUF"
_LOG_LINES: deque[str] = deque(maxlen=50)  # llama.cpp's recent log, quoted in load errors
_RS_LINES: deque[str] = deque(maxlen=4)  # its account of the recurrent memory of the contexts it made


def check_gguf(path: Path) -> Path:
    """A clear error for the usual ways a model path is wrong, before llama.cpp sees it."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ModelError(
            f"model file not found: {path}; check the path, or give a model alias (`localspec list` shows them)"
        )
    if not path.is_file():
        raise ModelError(f"model path is not a file: {path}; give the .gguf file inside it")
    with path.open("rb") as f:
        magic = f.read(4)
    if magic != GGUF_MAGIC:
        raise ModelError(
            f"{path} is not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r}); "
            f"llama.cpp needs a .gguf model — convert it or download the GGUF version"
        )
    return path


@lru_cache(maxsize=1)
def load_lib():
    """Import llama_cpp once, route its log into our buffer and initialise the backend."""
    try:
        import llama_cpp
    except ImportError as exc:
        raise ConfigError(
            f"the llama.cpp backend needs llama-cpp-python: pip install 'localspec[llamacpp]' ({exc})"
        ) from exc

    @llama_cpp.llama_log_callback
    def log(level: int, text: bytes, user_data) -> None:
        line = text.decode("utf-8", errors="replace")
        _LOG_LINES.append(line.rstrip())
        if line.startswith("llama_memory_recurrent: size ="):
            _RS_LINES.append(line)
        if os.environ.get("LOCALSPEC_DEBUG"):
            print(line, end="", file=__import__("sys").stderr)

    llama_cpp.llama_log_set(log, ctypes.c_void_p(0))
    llama_cpp.llama_backend_init()
    load_lib.log_callback = log  # keep the callback alive as long as the library
    return llama_cpp


def avoid_amx_buffers(cpu_flags: str | None = None, system_info: str | None = None) -> bool:
    """True when llama.cpp would put weights in its AMX buffer type, which segfaults on the first decode
    (ggml_backend_amx_mul_mat, seen on Xeons with AMX). Such weights stay in plain CPU buffers instead."""
    if cpu_flags is None:
        try:
            cpu_flags = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    if system_info is None:
        system_info = load_lib().llama_print_system_info().decode(errors="replace")
    return "amx_tile" in cpu_flags.split() and "AMX_INT8 = 1" in system_info


def free(owner) -> None:
    """Free ``owner._ctx`` and ``owner._model`` (the context first) and clear them; safe to call twice."""
    lib = owner._lib
    if owner._ctx:
        lib.llama_free(owner._ctx)
        owner._ctx = None
    if owner._model:
        lib.llama_model_free(owner._model)
        owner._model = None


def recurrent_bytes() -> float | None:
    """Bytes of the recurrent memory the last context allocated (read once), from llama.cpp's log line
    "llama_memory_recurrent: size = N MiB (... rs_seq) ..." (None if it did not say)."""
    import re

    found = re.match(r"llama_memory_recurrent: size = +([0-9.]+) MiB \(", _RS_LINES[-1]) if _RS_LINES else None
    _RS_LINES.clear()
    return float(found.group(1)) * 2**20 if found else None


def clear_log() -> None:
    """Forget llama.cpp's log so far (a load's errors quote only its own lines)."""
    _LOG_LINES.clear()


def last_error() -> str:
    """llama.cpp's own reason: its last "error" line (it says what was wrong), else its last "failed" one."""
    lines = [line for line in _LOG_LINES if line]
    errors = [line for line in lines if "error" in line.lower()] or [line for line in lines if "failed" in line.lower()]
    return (errors[-1] if errors else "no details in llama.cpp's log").strip()


def meta_str(lib, model, key: str) -> str | None:
    """The model file's metadata value under ``key`` as text (None: the file has no such key)."""
    buf = ctypes.create_string_buffer(4096)
    n = lib.llama_model_meta_val_str(model, key.encode(), buf, len(buf))
    return buf.value.decode("utf-8", errors="replace") if n >= 0 else None


def load_failed(path) -> ModelError:
    """The error for a GGUF llama.cpp would not load, with its own reason."""
    return ModelError(
        f"llama.cpp could not load {path}: {last_error()}; the file may be truncated or of an architecture "
        f"this llama.cpp build does not know — download it again or update llama-cpp-python"
    )


ALL_LAYERS = 999  # n_gpu_layers that offloads every layer (llama.cpp caps it at the model's count)


def gpu_placement(offloaded: int, n_layers: int) -> str:
    """The load report's line: llama.cpp caps the count at the model's layers (and puts the output layer
    there too)."""
    return f"{min(offloaded, n_layers)} of {n_layers} layers on the GPU" if offloaded else ""


def gpu_layers(lib, asked: int | None) -> int:
    """The layers to offload: ``asked`` (--gpu-layers; negative: all), else all of them when this build of
    llama.cpp can offload (CUDA, Metal, Vulkan), else none."""
    if asked is None:
        return ALL_LAYERS if lib.llama_supports_gpu_offload() else 0
    return ALL_LAYERS if asked < 0 else asked


def context_params(lib, n_ctx: int, n_batch: int, n_seq_max: int, threads: int):
    """llama.cpp's default context parameters with the ones every localspec context sets: its size, one batch
    size for both the logical and the physical batch, its sequences and threads, no perf counters."""
    cparams = lib.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch, cparams.n_ubatch, cparams.n_seq_max = n_ctx, n_batch, n_batch, n_seq_max
    cparams.n_threads = cparams.n_threads_batch = threads
    cparams.no_perf = True
    return cparams


def seq_state(lib, ctx, scratch: list | None = None):
    """Sequence 0's state of a context (its cache), copied out of llama.cpp: into a new bytearray (a state to
    keep), or with ``scratch`` (a one-item list holding a uint8 array to reuse, grown as needed) into that, for a
    copy loaded elsewhere at once. Measured for a 1,200-token cache (33 MB; the copy itself takes 2 ms): new
    memory costs its page faults, ~16 ms (a ctypes array 20 ms; a numpy array 4 ms while the kernel has huge
    pages free and ~110 ms where it must compact memory for them, as it did for every state a server kept)."""
    size = lib.llama_state_seq_get_size(ctx, 0)
    if scratch is None:
        kept = bytearray(size)
        written = lib.llama_state_seq_get_data(ctx, (ctypes.c_uint8 * size).from_buffer(kept), size, 0)
        del kept[written:]
        return kept
    if scratch[0] is None or scratch[0].size < size:
        scratch[0] = None  # the old one goes before the new one is allocated
        scratch[0] = np.empty(size, np.uint8)
    buffer = scratch[0]
    written = lib.llama_state_seq_get_data(ctx, buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), size, 0)
    return buffer[:written]


def set_seq_state(lib, ctx, state) -> bool:
    """Put a seq_state (or any bytes-like copy of one) back into sequence 0, read in place; False when
    llama.cpp refuses it."""
    buffer = np.frombuffer(state, np.uint8)
    pointer = buffer.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8))
    return lib.llama_state_seq_set_data(ctx, pointer, buffer.size, 0) != 0


def fill_batch(batch, entries) -> None:
    """Put ``entries`` — (tokens, whether their logits are wanted, positions, each token's sequence ids) —
    one after another into a llama_batch."""
    i = 0
    for tokens, logits, positions, seqs in entries:
        for token, position, ids in zip(tokens, positions, seqs, strict=True):
            batch.token[i], batch.pos[i], batch.logits[i], batch.n_seq_id[i] = token, position, logits, len(ids)
            for j, seq in enumerate(ids):
                batch.seq_id[i][j] = seq
            i += 1
    batch.n_tokens = i
