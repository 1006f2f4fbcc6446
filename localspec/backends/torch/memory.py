"""Whether a model fits the torch device before anything is put there: the weights, then the KV cache.

The torch backend keeps every weight on the device (it offloads nothing to the CPU and has no int8/int4
weights), so a model whose weights do not fit free device memory is refused with the figures and the way
that does fit — a quantized GGUF on the llama.cpp backend, which keeps on the GPU the layers that fit
(--gpu-layers) — instead of failing in an allocation. Weights that fit but leave too little for the asked
context get the context that fits, and the load report says so.
"""

from __future__ import annotations

from localspec.errors import ModelError

RESERVE_SHARE, RESERVE_MIN = 0.05, 2**30  # left free: the CUDA context, a window's activations, a drafter
MIN_CTX = 512  # a context shorter than this is no chat: refuse instead
GB = 1e9


def free_bytes(device) -> int | None:
    """Free memory of a torch device (CUDA: the driver's figure), None where there is none to check (CPU)."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return None


def fit_context(device, name: str, weights: int, kv_per_token: int, n_ctx: int) -> tuple[int, str]:
    """(the context to allocate, a note for the load report) for ``weights`` bytes and ``kv_per_token``
    bytes of keys and values per position, or a ModelError naming what is needed and what to run instead."""
    free = free_bytes(device)
    if free is None:
        return n_ctx, ""
    room = free - max(RESERVE_MIN, int(RESERVE_SHARE * free)) - weights
    need = weights + MIN_CTX * kv_per_token
    if room < MIN_CTX * kv_per_token:
        raise ModelError(
            f"{name} needs {need / GB:.1f} GB on {device} (weights {weights / GB:.1f} GB + a {MIN_CTX}-token KV "
            f"cache), but {free / GB:.1f} GB is free. The torch backend keeps all weights on the GPU and has no "
            "int8/int4 weights: run a quantized GGUF of it with --backend llama.cpp (it keeps on the GPU the layers "
            "that fit, --gpu-layers), or a smaller model"
        )
    fits = room // kv_per_token // 256 * 256
    if fits >= n_ctx:
        return n_ctx, ""
    return fits, f"context {fits} tokens of the {n_ctx} asked: the KV cache that fits {free / GB:.1f} GB free"
