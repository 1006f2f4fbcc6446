"""A tiny random Qwen3.5-layout GGUF (architecture qwen35: Gated DeltaNet layers with a full-attention layer
every second one), written with the gguf package, for the hybrid-target tests: no downloadable model here
is hybrid. Tensor names and metadata keys as llama.cpp's loader reads them (src/models/qwen35.cpp).

With ``mtp``, one MTP ("nextn") block follows the trunk, as Qwen3.5 MTP GGUFs carry it: block_count counts
it, ``qwen35.nextn_predict_layers`` = 1, and it is a full-attention block plus ``nextn.eh_proj`` (the
concatenated [norm(embedding), norm(hidden)] down to the width), ``nextn.enorm`` and ``nextn.hnorm``; its
logits come from the model's output head. ``mtp`` = "random", "no-nextn" (the block without its nextn
tensors: llama.cpp refuses such a file, and `list` must not call it MTP), or a block whose attention and FFN add
nothing, so that it reads only the token ("token") or only the target's hidden row ("hidden"). With
``trunk="identity"`` the trunk's layers add nothing either: the target's next token is then a fixed
function of the last token, f(x) = argmax(output . norm(embed(x))), which the "token" block predicts exactly
(every draft right) and the "hidden" block one position late (it repeats the token it is given)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from support.tiny_gguf import VOCAB, _finish, _llama_header, weight_makers

EMBD, FF, HEADS, KV_HEADS, LAYERS = 64, 128, 4, 2, 4
HEAD_DIM = EMBD // HEADS
K_HEADS, V_HEADS, STATE, CONV = 2, 4, 16, 4  # gated delta net: key heads, value heads, head size, conv kernel


def write_tiny_qwen35(
    path: Path, seed: int = 0, scale: float = 0.5, mtp: str | None = None, trunk: str = "random"
) -> Path:
    rng = np.random.default_rng(seed)
    blocks = LAYERS + (1 if mtp else 0)
    w = _llama_header(path, "tiny-qwen35", EMBD, blocks, FF, HEADS, KV_HEADS, arch="qwen35")
    a = "qwen35."
    if mtp:
        w.add_uint32(a + "nextn_predict_layers", 1)
    w.add_uint32(a + "attention.key_length", HEAD_DIM)
    w.add_uint32(a + "attention.value_length", HEAD_DIM)
    w.add_array(a + "rope.dimension_sections", [3, 3, 2, 0])
    w.add_uint32(a + "ssm.conv_kernel", CONV)
    w.add_uint32(a + "ssm.inner_size", V_HEADS * STATE)
    w.add_uint32(a + "ssm.state_size", STATE)
    w.add_uint32(a + "ssm.time_step_rank", V_HEADS)
    w.add_uint32(a + "ssm.group_count", K_HEADS)
    w.add_uint32(a + "full_attention_interval", 2)

    rand, ones, out = weight_makers(rng, scale)

    def attention(b, adds):
        w.add_tensor(b + "attn_q.weight", rand(HEADS * HEAD_DIM * 2, EMBD) * 2)
        w.add_tensor(b + "attn_k.weight", rand(KV_HEADS * HEAD_DIM, EMBD) * 2)
        w.add_tensor(b + "attn_v.weight", rand(KV_HEADS * HEAD_DIM, EMBD))
        w.add_tensor(b + "attn_output.weight", out(EMBD, HEADS * HEAD_DIM, adds=adds))
        w.add_tensor(b + "attn_q_norm.weight", ones(HEAD_DIM))
        w.add_tensor(b + "attn_k_norm.weight", ones(HEAD_DIM))

    def ffn(b, adds):
        w.add_tensor(b + "ffn_gate.weight", rand(FF, EMBD))
        w.add_tensor(b + "ffn_up.weight", rand(FF, EMBD))
        w.add_tensor(b + "ffn_down.weight", out(EMBD, FF, adds=adds))

    key_dim, value_dim = K_HEADS * STATE, V_HEADS * STATE
    w.add_tensor("token_embd.weight", rng.standard_normal((len(VOCAB), EMBD)).astype(np.float32))
    w.add_tensor("output_norm.weight", ones(EMBD))
    w.add_tensor("output.weight", rand(len(VOCAB), EMBD) * 8)
    adds = trunk != "identity"
    for i in range(LAYERS):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", ones(EMBD))
        w.add_tensor(b + "post_attention_norm.weight", ones(EMBD))
        if (i + 1) % 2 == 0:  # full attention (q carries its gate: twice the heads' width)
            attention(b, adds)
        else:  # gated delta net
            w.add_tensor(b + "attn_qkv.weight", rand(key_dim * 2 + value_dim, EMBD) * 2)
            w.add_tensor(b + "attn_gate.weight", rand(value_dim, EMBD))
            w.add_tensor(b + "ssm_conv1d.weight", rand(key_dim * 2 + value_dim, CONV) * 2)
            w.add_tensor(b + "ssm_dt.bias", np.zeros(V_HEADS, dtype=np.float32))
            w.add_tensor(b + "ssm_a", -np.ones(V_HEADS, dtype=np.float32))
            w.add_tensor(b + "ssm_beta.weight", rand(V_HEADS, EMBD))
            w.add_tensor(b + "ssm_alpha.weight", rand(V_HEADS, EMBD))
            w.add_tensor(b + "ssm_norm.weight", ones(STATE))
            w.add_tensor(b + "ssm_out.weight", out(EMBD, value_dim, adds=adds))
        ffn(b, adds)
    if mtp:
        _mtp_block(w, f"blk.{LAYERS}.", mtp, rand, ones, attention, ffn)
    return _finish(w, path)


def _mtp_block(w, b, mode, rand, ones, attention, ffn) -> None:
    w.add_tensor(b + "attn_norm.weight", ones(EMBD))
    w.add_tensor(b + "post_attention_norm.weight", ones(EMBD))
    attention(b, mode == "random")
    ffn(b, mode == "random")
    if mode != "no-nextn":  # (a converter that dropped the nextn tensors and kept the rest)
        nextn_tensors(w, b, mode, EMBD, rand, ones)


def nextn_tensors(w, b, mode, embd, rand, ones) -> None:
    """An MTP block's own tensors: eh_proj random, or the identity on the token's half ("token") or on the
    hidden row's half ("hidden") of [norm(embedding), norm(hidden)]; enorm and hnorm."""
    if mode == "random":
        proj = rand(embd, 2 * embd) * 2
    else:
        proj = np.zeros((embd, 2 * embd), dtype=np.float32)
        half = 0 if mode == "token" else embd
        proj[:, half : half + embd] = np.eye(embd, dtype=np.float32)
    w.add_tensor(b + "nextn.eh_proj.weight", proj)
    w.add_tensor(b + "nextn.enorm.weight", ones(embd))
    w.add_tensor(b + "nextn.hnorm.weight", ones(embd))
