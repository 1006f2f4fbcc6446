"""`localspec convert-eagle`: an EAGLE-3 head in the Hugging Face layout (eagle_heads.py reads it) written
as the GGUF that llama.cpp's `eagle3` loader reads, for one target GGUF.

What llama.cpp's loader wants (src/models/eagle3.cpp): metadata `eagle3.target_layers` (three layer ids
whose *inputs* it reads), `eagle3.target_hidden_size`, the usual attention/rope keys, the target's
tokenizer (the head's vocabulary is the target's), and tensors `fc.weight`, `blk.0.attn_norm` (the token
embedding's norm), `blk.0.attn_norm_2` (the hidden state's norm), q/k/v over 2H, `output_norm`, `output`
(the draft vocabulary's LM head) and `d2t` as int64 *absolute* target ids. q and k rows are interleaved per
head for llama.cpp's rotary layout (pairs of adjacent values, where Hugging Face rotates halves).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from localspec.drafters.heads.gguf import TYPES, copy_tokenizer, head_header, rope_factors, scalar
from localspec.errors import ConfigError, ModelError

_NORMS = {
    "midlayer.input_layernorm.weight": "blk.0.attn_norm.weight",
    "midlayer.hidden_norm.weight": "blk.0.attn_norm_2.weight",
    "midlayer.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    "norm.weight": "output_norm.weight",
}
_MATRICES = {
    "fc.weight": "fc.weight",
    "midlayer.self_attn.q_proj.weight": "blk.0.attn_q.weight",
    "midlayer.self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "midlayer.self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "midlayer.self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "midlayer.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
    "midlayer.mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "midlayer.mlp.down_proj.weight": "blk.0.ffn_down.weight",
    "lm_head.weight": "output.weight",
    "embed_tokens.weight": "token_embd.weight",
}


def convert_eagle(folder: Path, target: Path, out: Path, dtype: str = "f16") -> dict:
    """Write the GGUF head; returns what it wrote (layers, sizes) for the command's report."""
    import gguf

    from localspec.backends.llama_cpp.capi import check_gguf

    if dtype not in TYPES:
        raise ConfigError(f"--type must be one of {', '.join(TYPES)}, not {dtype!r}")
    reader = gguf.GGUFReader(str(check_gguf(target)))
    config, state, layout = _checked_head(Path(folder), reader.fields, Path(target).name)
    out = Path(out)
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # a cut-short run leaves no half-written head
    try:
        _write_head(tmp, reader, config, state, layout, dtype)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    hidden = int(state["fc.weight"].shape[0])
    return {"layers": list(layout.feature_layers), "draft_vocab": int(len(layout.draft_to_target)), "hidden": hidden}


def _checked_head(folder: Path, fields: dict, target_name: str):
    """(config, numpy state, layout) of an EAGLE-3 head that fits the target GGUF's fields."""
    from localspec.drafters.eagle.checkpoint import eagle_layout, load_eagle_state

    config, state = load_eagle_state(folder)
    arch = scalar(fields, "general.architecture")
    hidden = int(scalar(fields, f"{arch}.embedding_length"))
    n_layers = int(scalar(fields, f"{arch}.block_count"))
    vocab = len(fields["tokenizer.ggml.tokens"].data)
    try:
        layout = eagle_layout(config, state, hidden, n_layers, vocab)
    except (ConfigError, ModelError) as exc:
        raise type(exc)(f"{folder} for {target_name}: {exc}") from exc
    if layout.version != 3:
        raise ConfigError(f"{folder} is an EAGLE-{layout.version} head; llama.cpp runs EAGLE-3 heads only")
    if "fc.bias" in state:
        raise ConfigError(f"{folder}: its fc has a bias, which llama.cpp's eagle3 graph does not read")
    state = {k: np.asarray(v.float().numpy() if hasattr(v, "float") else v) for k, v in state.items()}
    return config, state, layout


def _write_head(path: Path, reader, config: dict, state: dict, layout, dtype: str) -> None:
    import gguf

    hidden = int(state["fc.weight"].shape[0])
    w = gguf.GGUFWriter(str(path), "eagle3")
    ffn = int(state["midlayer.mlp.gate_proj.weight"].shape[0])
    heads, kv_heads, head_dim, rope_base = head_header(w, reader, config, "EAGLE-3 head", hidden, 1, ffn)
    w.add_array("eagle3.target_layers", list(layout.feature_layers))
    w.add_uint32("eagle3.target_hidden_size", hidden)
    copy_tokenizer(reader, w)
    matrix = np.float16 if dtype == "f16" else np.float32
    for src, dst in _MATRICES.items():
        if src in state:
            t = state[src]
            if src.endswith(("q_proj.weight", "k_proj.weight")):
                t = _interleave(t, heads if src.endswith("q_proj.weight") else kv_heads)
            w.add_tensor(dst, np.ascontiguousarray(t, dtype=matrix))
    for src, dst in _NORMS.items():
        w.add_tensor(dst, np.ascontiguousarray(state[src], dtype=np.float32))
    factors = rope_factors(config, head_dim, rope_base)
    if factors is not None:
        w.add_tensor("rope_freqs.weight", factors)
    d2t, vocab = np.asarray(layout.draft_to_target, dtype=np.int64), len(reader.fields["tokenizer.ggml.tokens"].data)
    if len(d2t) != vocab or np.any(d2t != np.arange(vocab)):
        w.add_tensor("d2t", d2t, raw_dtype=gguf.GGMLQuantizationType.I64)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _interleave(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of each head from Hugging Face's rotate-half order [x0..x(d/2-1), y0..] to llama.cpp's pairs."""
    shape = w.shape
    return w.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)
