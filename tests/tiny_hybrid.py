"""A tiny random Qwen3.5-layout GGUF (architecture qwen35: Gated DeltaNet layers with a full-attention layer
every second one), written with the gguf package, for the hybrid-target tests: no downloadable model here
is hybrid. Tensor names and metadata keys as llama.cpp's loader reads them (src/models/qwen35.cpp)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tiny_gguf import VOCAB, _finish, _llama_header

EMBD, FF, HEADS, KV_HEADS, LAYERS = 64, 128, 4, 2, 4
HEAD_DIM = EMBD // HEADS
K_HEADS, V_HEADS, STATE, CONV = 2, 4, 16, 4  # gated delta net: key heads, value heads, head size, conv kernel


def write_tiny_qwen35(path: Path, seed: int = 0, scale: float = 0.5) -> Path:
    rng = np.random.default_rng(seed)
    w = _llama_header(path, "tiny-qwen35", EMBD, LAYERS, FF, HEADS, KV_HEADS, arch="qwen35")
    a = "qwen35."
    w.add_uint32(a + "attention.key_length", HEAD_DIM)
    w.add_uint32(a + "attention.value_length", HEAD_DIM)
    w.add_array(a + "rope.dimension_sections", [3, 3, 2, 0])
    w.add_uint32(a + "ssm.conv_kernel", CONV)
    w.add_uint32(a + "ssm.inner_size", V_HEADS * STATE)
    w.add_uint32(a + "ssm.state_size", STATE)
    w.add_uint32(a + "ssm.time_step_rank", V_HEADS)
    w.add_uint32(a + "ssm.group_count", K_HEADS)
    w.add_uint32(a + "full_attention_interval", 2)

    def rand(*shape):
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    def ones(n):
        return np.ones(n, dtype=np.float32)

    key_dim, value_dim = K_HEADS * STATE, V_HEADS * STATE
    w.add_tensor("token_embd.weight", rng.standard_normal((len(VOCAB), EMBD)).astype(np.float32))
    w.add_tensor("output_norm.weight", ones(EMBD))
    w.add_tensor("output.weight", rand(len(VOCAB), EMBD) * 8)
    for i in range(LAYERS):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", ones(EMBD))
        w.add_tensor(b + "post_attention_norm.weight", ones(EMBD))
        if (i + 1) % 2 == 0:  # full attention (q carries its gate: twice the heads' width)
            w.add_tensor(b + "attn_q.weight", rand(HEADS * HEAD_DIM * 2, EMBD) * 2)
            w.add_tensor(b + "attn_k.weight", rand(KV_HEADS * HEAD_DIM, EMBD) * 2)
            w.add_tensor(b + "attn_v.weight", rand(KV_HEADS * HEAD_DIM, EMBD))
            w.add_tensor(b + "attn_output.weight", rand(EMBD, HEADS * HEAD_DIM))
            w.add_tensor(b + "attn_q_norm.weight", ones(HEAD_DIM))
            w.add_tensor(b + "attn_k_norm.weight", ones(HEAD_DIM))
        else:  # gated delta net
            w.add_tensor(b + "attn_qkv.weight", rand(key_dim * 2 + value_dim, EMBD) * 2)
            w.add_tensor(b + "attn_gate.weight", rand(value_dim, EMBD))
            w.add_tensor(b + "ssm_conv1d.weight", rand(key_dim * 2 + value_dim, CONV) * 2)
            w.add_tensor(b + "ssm_dt.bias", np.zeros(V_HEADS, dtype=np.float32))
            w.add_tensor(b + "ssm_a", -np.ones(V_HEADS, dtype=np.float32))
            w.add_tensor(b + "ssm_beta.weight", rand(V_HEADS, EMBD))
            w.add_tensor(b + "ssm_alpha.weight", rand(V_HEADS, EMBD))
            w.add_tensor(b + "ssm_norm.weight", ones(STATE))
            w.add_tensor(b + "ssm_out.weight", rand(EMBD, value_dim))
        w.add_tensor(b + "ffn_gate.weight", rand(FF, EMBD))
        w.add_tensor(b + "ffn_up.weight", rand(FF, EMBD))
        w.add_tensor(b + "ffn_down.weight", rand(EMBD, FF))
    return _finish(w, path)
