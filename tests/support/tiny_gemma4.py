"""A tiny Gemma-4 target and a tiny Gemma-4 assistant drafter (GGUF architectures `gemma4` and
`gemma4-assistant`), written with the gguf package; keys and tensor names as llama.cpp's loaders read them
(src/models/gemma4.cpp, src/models/gemma4-assistant.cpp).

The target: two layers, a sliding-window one then a full one (the assistant reads the KV of the target's
last full and last sliding layer), an output head of its own. The assistant: twice the target's width (its
width must differ from the target's), no keys or values of its own (it attends over the target's cache), a
pre-projection of [embedding; target hidden row] and a post-projection back to the target's width.

With ``trunk="identity"`` the target's layers add nothing: its next token is f(x) = argmax(W . norm(E x)).
An assistant ``mode``: "random"; "token" (its layers add nothing, the pre-projection keeps the embedding
half and its head is W): it predicts f of the token it is given, every draft right; "hidden" (it keeps the
hidden half): it reproduces the target's logits of the position before, so it repeats the pending token.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from support.tiny_gguf import VOCAB, _finish, _llama_header

EMBD, FF, KV_HEADS, HEAD_DIM, WINDOW = 64, 128, 2, 16, 64
HEADS = 4  # the target's (EMBD / HEADS = HEAD_DIM)
A_EMBD, A_HEADS = 2 * EMBD, 8  # the assistant's (A_EMBD / A_HEADS = HEAD_DIM)
PATTERN = [True, False]  # per layer: sliding window?


def _common(w, arch: str) -> None:
    a = f"{arch}."
    w.add_uint32(a + "attention.key_length", HEAD_DIM)
    w.add_uint32(a + "attention.value_length", HEAD_DIM)
    w.add_uint32(a + "attention.key_length_swa", HEAD_DIM)
    w.add_uint32(a + "attention.value_length_swa", HEAD_DIM)
    w.add_uint32(a + "attention.sliding_window", WINDOW)
    w.add_array(a + "attention.sliding_window_pattern", PATTERN)
    w.add_float32(a + "rope.freq_base", 10000.0)
    w.add_float32(a + "rope.freq_base_swa", 10000.0)


def _rand(rng, scale):
    def rand(*shape):
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    return rand


def _ones(n):
    return np.ones(n, dtype=np.float32)


def _ffn(w, b: str, width: int, rand, adds: bool) -> None:
    """A layer's normed GELU FFN block (its down projection zero unless it ``adds``)."""
    w.add_tensor(b + "ffn_norm.weight", _ones(width))
    w.add_tensor(b + "ffn_gate.weight", rand(FF, width))
    w.add_tensor(b + "ffn_up.weight", rand(FF, width))
    w.add_tensor(b + "ffn_down.weight", rand(width, FF) * adds)
    w.add_tensor(b + "post_ffw_norm.weight", _ones(width))


def target_weights(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(token embedding [V, E], output head [V, E]) of the target written with this seed."""
    rng = np.random.default_rng(seed)
    return rng.standard_normal((len(VOCAB), EMBD)).astype(np.float32), _rand(rng, 0.5)(len(VOCAB), EMBD) * 8


def write_tiny_gemma4(path: Path, seed: int = 0, trunk: str = "random", scale: float = 0.5) -> Path:
    embed, head = target_weights(seed)
    rng = np.random.default_rng(seed + 100)
    rand = _rand(rng, scale)
    w = _llama_header(path, "tiny-gemma4", EMBD, len(PATTERN), FF, HEADS, KV_HEADS, arch="gemma4")
    _common(w, "gemma4")
    w.add_uint32("gemma4.embedding_length_per_layer_input", 0)
    w.add_float32("gemma4.final_logit_softcapping", 0.0)
    w.add_tensor("token_embd.weight", embed)
    w.add_tensor("output.weight", head)
    w.add_tensor("output_norm.weight", _ones(EMBD))
    w.add_tensor("rope_freqs.weight", _ones(HEAD_DIM // 2))
    adds = trunk != "identity"
    for i in range(len(PATTERN)):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", _ones(EMBD))
        w.add_tensor(b + "attn_q.weight", rand(HEADS * HEAD_DIM, EMBD) * 2)
        w.add_tensor(b + "attn_k.weight", rand(KV_HEADS * HEAD_DIM, EMBD) * 2)
        w.add_tensor(b + "attn_v.weight", rand(KV_HEADS * HEAD_DIM, EMBD))
        w.add_tensor(b + "attn_output.weight", rand(EMBD, HEADS * HEAD_DIM) * adds)
        w.add_tensor(b + "attn_q_norm.weight", _ones(HEAD_DIM))
        w.add_tensor(b + "attn_k_norm.weight", _ones(HEAD_DIM))
        w.add_tensor(b + "post_attention_norm.weight", _ones(EMBD))
        _ffn(w, b, EMBD, rand, adds)
    return _finish(w, path)


def write_tiny_assistant(path: Path, target_seed: int = 0, mode: str = "random", seed: int = 7) -> Path:
    _, head = target_weights(target_seed)
    rng = np.random.default_rng(seed)
    rand = _rand(rng, 0.5)
    arch = "gemma4-assistant"
    w = _llama_header(path, "tiny-gemma4-assistant", A_EMBD, len(PATTERN), FF, A_HEADS, KV_HEADS, arch=arch)
    _common(w, arch)
    w.add_uint32(arch + ".embedding_length_out", EMBD)
    w.add_uint32(arch + ".nextn_predict_layers", len(PATTERN))
    adds = mode == "random"
    if adds:
        own_head, pre = rand(len(VOCAB), A_EMBD) * 8, rand(A_EMBD, 2 * EMBD)
    else:  # the identity from the kept half of [embedding; hidden] into the first EMBD dims, W as the head
        own_head = np.zeros((len(VOCAB), A_EMBD), dtype=np.float32)
        own_head[:, :EMBD] = head
        pre = np.zeros((A_EMBD, 2 * EMBD), dtype=np.float32)
        half = 0 if mode == "token" else EMBD
        pre[:EMBD, half : half + EMBD] = np.eye(EMBD, dtype=np.float32)
    w.add_tensor("token_embd.weight", own_head)
    w.add_tensor("output_norm.weight", _ones(A_EMBD))
    w.add_tensor("nextn.pre_projection.weight", pre)
    w.add_tensor("nextn.post_projection.weight", rand(EMBD, A_EMBD))
    w.add_tensor("rope_freqs.weight", _ones(HEAD_DIM // 2))
    for i in range(len(PATTERN)):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", _ones(A_EMBD))
        w.add_tensor(b + "attn_q.weight", rand(A_HEADS * HEAD_DIM, A_EMBD) * 2)
        w.add_tensor(b + "attn_output.weight", rand(A_EMBD, A_HEADS * HEAD_DIM) * adds)
        w.add_tensor(b + "attn_q_norm.weight", _ones(HEAD_DIM))
        w.add_tensor(b + "post_attention_norm.weight", _ones(A_EMBD))
        w.add_tensor(b + "layer_output_scale.weight", _ones(1))
        _ffn(w, b, A_EMBD, rand, adds)
    return _finish(w, path)
