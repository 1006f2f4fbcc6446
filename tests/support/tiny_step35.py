"""A tiny random Step-3.5-layout GGUF (architecture step35) with several MTP ("nextn") blocks, written with the
gguf package: no model small enough to download carries more than one MTP block, and step35 is an
architecture whose llama.cpp graph runs the block picked by ``llama_set_nextn_layer_offset`` (the chained
heads of src/models/step35.cpp). Tensor names and metadata keys as that loader reads them; the trunk is
dense (no experts); its first layer has a sliding window (llama.cpp requires one) wider than the tests' context.

``heads`` gives each MTP block's kind, as in tiny_hybrid.py: "random", or a block whose attention and FFN add
nothing so that it reads only the token ("token") or only the hidden row it is given ("hidden"). With
``trunk="identity"`` the trunk adds nothing: the target's next token is then f(last token), which a "token"
block predicts exactly from whatever token it is given, and a "hidden" block fed the row a "token" block gave
repeats that block's guess (its row is the normed embedding of the token it read)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from support.tiny_gguf import VOCAB, _finish, _llama_header, weight_makers
from support.tiny_hybrid import nextn_tensors

EMBD, FF, HEADS, KV_HEADS, LAYERS = 64, 128, 4, 2, 2
HEAD_DIM = EMBD // HEADS


def write_tiny_step35(
    path: Path, heads=("random", "random"), seed: int = 0, scale: float = 0.5, trunk: str = "random"
) -> Path:
    rng = np.random.default_rng(seed)
    blocks = LAYERS + len(heads)
    w = _llama_header(path, "tiny-step35", EMBD, blocks, FF, HEADS, KV_HEADS, arch="step35")
    a = "step35."
    w.add_uint32(a + "nextn_predict_layers", len(heads))
    w.add_uint32(a + "expert_feed_forward_length", FF)
    w.add_uint32(a + "attention.sliding_window", 512)
    w.add_array(a + "attention.sliding_window_pattern", [1] + [0] * (blocks - 1))  # llama.cpp wants one

    rand, ones, out = weight_makers(rng, scale)

    def block(b, adds):
        w.add_tensor(b + "attn_norm.weight", ones(EMBD))
        w.add_tensor(b + "attn_q.weight", rand(HEADS * HEAD_DIM, EMBD) * 2)
        w.add_tensor(b + "attn_k.weight", rand(KV_HEADS * HEAD_DIM, EMBD) * 2)
        w.add_tensor(b + "attn_v.weight", rand(KV_HEADS * HEAD_DIM, EMBD))
        w.add_tensor(b + "attn_output.weight", out(EMBD, HEADS * HEAD_DIM, adds=adds))
        w.add_tensor(b + "ffn_norm.weight", ones(EMBD))
        w.add_tensor(b + "ffn_gate.weight", rand(FF, EMBD))
        w.add_tensor(b + "ffn_up.weight", rand(FF, EMBD))
        w.add_tensor(b + "ffn_down.weight", out(EMBD, FF, adds=adds))

    w.add_tensor("token_embd.weight", rng.standard_normal((len(VOCAB), EMBD)).astype(np.float32))
    w.add_tensor("output_norm.weight", ones(EMBD))
    w.add_tensor("output.weight", rand(len(VOCAB), EMBD) * 8)
    for i in range(LAYERS):
        block(f"blk.{i}.", trunk != "identity")
    for i, kind in enumerate(heads):
        b = f"blk.{LAYERS + i}."
        block(b, kind == "random")
        nextn_tensors(w, b, kind, EMBD, rand, ones)
    return _finish(w, path)
