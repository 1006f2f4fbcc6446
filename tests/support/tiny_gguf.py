"""A tiny random llama-architecture GGUF with K-quant weights, written with the gguf package.

For what no downloadable test model covers: SmolLM2's Q4_1 weights take neither llama.cpp's repacked nor
its tiled K-quant matmuls, which Q4_K models (most GGUFs users run) do. Rows of Q4_K are 256 values, so
every weight matrix here has a multiple of 256 columns. The vocabulary is the 256 bytes (a byte-level BPE
with one merge) plus an end-of-text token: tests feed token ids, not text.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

Q4_K_BLOCK = 144  # bytes per 256 weights: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
EMBD, FF, HEADS, KV_HEADS, LAYERS = 256, 512, 4, 2, 2


def _bytes_to_unicode() -> list[str]:
    """GPT-2's printable stand-in character for each byte value."""
    keep = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _q4_k(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """Random Q4_K blocks for a rows x cols matrix: small scales so activations stay in range."""
    blocks = rng.integers(0, 256, size=(rows, cols // 256, Q4_K_BLOCK), dtype=np.uint8)
    d = np.full((rows, cols // 256, 1), 2e-3, dtype=np.float16).view(np.uint8)
    dmin = np.full((rows, cols // 256, 1), 1e-3, dtype=np.float16).view(np.uint8)
    blocks[:, :, 0:2], blocks[:, :, 2:4] = d, dmin
    return blocks.reshape(rows, cols // 256 * Q4_K_BLOCK)


VOCAB = _bytes_to_unicode() + ["ab", "<|endoftext|>"]  # llama.cpp's BPE loader wants a merge


def _llama_header(
    path: Path, name: str, embd: int, layers: int, ff: int, heads: int, kv_heads: int, arch="llama", vocab=VOCAB
):
    """A GGUF writer with the llama-style metadata and the byte-level vocabulary written."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_context_length(2048)
    w.add_embedding_length(embd)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(embd // heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(vocab))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(vocab)
    w.add_token_types([gguf.TokenType.NORMAL] * 257 + [gguf.TokenType.CONTROL] * (len(vocab) - 257))
    w.add_token_merges(["a b"])
    w.add_bos_token_id(len(vocab) - 1)
    w.add_eos_token_id(len(vocab) - 1)
    return w


def weight_makers(rng, scale: float):
    """rand(*shape) (scaled by the input width), ones(n), and out(*shape, adds) (a matrix whose product joins
    the residual stream: zeros when it must add nothing) for a tiny random model's tensors."""

    def rand(*shape):
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    def ones(n):
        return np.ones(n, dtype=np.float32)

    def out(*shape, adds=True):
        return rand(*shape) if adds else np.zeros(shape, dtype=np.float32)

    return rand, ones, out


def _finish(w, path: Path) -> Path:
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_tiny_f32_llama(
    path: Path,
    seed: int = 0,
    embd=64,
    layers=8,
    ff=128,
    heads=4,
    kv_heads=2,
    scale=0.5,
    focus=0,
    extra_tokens=0,
    specials: tuple[str, ...] = (),
) -> Path:
    """A random float32 llama GGUF that the torch backend (dequantizing nothing) and llama.cpp both run:
    the same weights on both sides, so their hidden states and logits can be compared. ``focus`` > 0: only
    tokens 0..focus-1 get output rows (the others' logits are 0), so a few tokens carry most of the mass.
    ``specials``: control tokens of these texts (FIM markers, which llama.cpp recognises by their text)."""
    rng = np.random.default_rng(seed)
    extras = [f"<|extra_{i}|>" for i in range(extra_tokens)] + list(specials)
    vocab = VOCAB[:-1] + extras + VOCAB[-1:]  # control tokens
    w = _llama_header(path, "tiny-f32-llama", embd, layers, ff, heads, kv_heads, vocab=vocab)
    head_dim = embd // heads

    def rand(*shape):
        return (rng.standard_normal(shape) * scale / np.sqrt(shape[-1])).astype(np.float32)

    w.add_tensor("token_embd.weight", (rng.standard_normal((len(vocab), embd))).astype(np.float32))
    w.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    output = rand(len(vocab), embd) * 8
    if focus:
        output[focus:] = 0
    w.add_tensor("output.weight", output)
    for i in range(layers):
        w.add_tensor(f"blk.{i}.attn_q.weight", rand(embd, embd) * 4)
        w.add_tensor(f"blk.{i}.attn_k.weight", rand(kv_heads * head_dim, embd) * 4)
        w.add_tensor(f"blk.{i}.attn_v.weight", rand(kv_heads * head_dim, embd))
        w.add_tensor(f"blk.{i}.attn_output.weight", rand(embd, embd))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", rand(ff, embd))
        w.add_tensor(f"blk.{i}.ffn_up.weight", rand(ff, embd))
        w.add_tensor(f"blk.{i}.ffn_down.weight", rand(embd, ff))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(embd, dtype=np.float32))
    return _finish(w, path)


def write_tiny_llama(path: Path, seed: int = 0) -> Path:
    import gguf

    rng = np.random.default_rng(seed)
    vocab = VOCAB
    head_dim = EMBD // HEADS
    w = _llama_header(path, "tiny-q4k-llama", EMBD, LAYERS, FF, HEADS, KV_HEADS)
    q4k = gguf.GGMLQuantizationType.Q4_K
    # token_embd and output hold len(vocab) rows of EMBD values: Q4_K too
    w.add_tensor("token_embd.weight", _q4_k(rng, len(vocab), EMBD), raw_dtype=q4k)
    w.add_tensor("output_norm.weight", np.ones(EMBD, dtype=np.float32))
    w.add_tensor("output.weight", _q4_k(rng, len(vocab), EMBD), raw_dtype=q4k)
    for i in range(LAYERS):
        for name, rows, cols in (
            ("attn_q", EMBD, EMBD),
            ("attn_k", KV_HEADS * head_dim, EMBD),
            ("attn_v", KV_HEADS * head_dim, EMBD),
            ("attn_output", EMBD, EMBD),
            ("ffn_gate", FF, EMBD),
            ("ffn_up", FF, EMBD),
            ("ffn_down", EMBD, FF),
        ):
            w.add_tensor(f"blk.{i}.{name}.weight", _q4_k(rng, rows, cols), raw_dtype=q4k)
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(EMBD, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(EMBD, dtype=np.float32))
    return _finish(w, path)
