"""What every head converted for llama.cpp carries in its GGUF: the hyperparameters (from the head's config, else
its target's GGUF), the target's tokenizer, Llama-3 rope factors; and the tensor types a conversion writes."""

from __future__ import annotations

import numpy as np

from localspec.errors import ModelError

TYPES = ("f16", "f32")


def rope_factors(config: dict, head_dim: int, base: float):
    """llama.cpp's rope_freqs tensor for Llama-3 rope scaling (None without scaling)."""
    scaling = config.get("rope_scaling") or {}
    if scaling.get("rope_type", scaling.get("type")) != "llama3":
        return None
    from localspec.backends.torch.decoder import DecoderConfig, rope_inv_freq

    plain = DecoderConfig(1, head_dim, 1, 1, 1, 1, head_dim, rope_theta=base)
    scaled = DecoderConfig(1, head_dim, 1, 1, 1, 1, head_dim, rope_theta=base, rope_scaling=scaling)
    return (rope_inv_freq(plain) / rope_inv_freq(scaled)).numpy().astype(np.float32)


def scalar(fields: dict, key: str, default=None):
    field = fields.get(key)
    if field is None:
        if default is None:
            raise ModelError(f"the target GGUF has no {key}")
        return default
    return field.contents()


def copy_tokenizer(reader, writer) -> None:
    """The target's tokenizer.* metadata, as it is (the head shares the target's vocabulary)."""
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        kind = field.types[0]
        value = field.contents()
        if kind == _gguf_array():
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, kind)


def _gguf_array():
    import gguf

    return gguf.GGUFValueType.ARRAY


def head_header(w, reader, config: dict, what: str, hidden: int, n_layers: int, ffn: int) -> tuple:
    """A head GGUF's hyperparameters: the head's config.json, falling back on its target's GGUF ``reader``;
    returns (heads, KV heads, head dimension, RoPE base)."""
    fields = reader.fields
    arch = scalar(fields, "general.architecture")
    heads = int(config.get("num_attention_heads", scalar(fields, f"{arch}.attention.head_count")))
    kv_heads = int(config.get("num_key_value_heads", heads))
    head_dim = int(config.get("head_dim") or hidden // heads)
    rope_base = float(config.get("rope_theta") or scalar(fields, f"{arch}.rope.freq_base", 10000.0))
    w.add_name(f"{what} for {scalar(fields, 'general.name', 'its target')}")
    w.add_context_length(int(scalar(fields, f"{arch}.context_length", 4096)))
    w.add_embedding_length(hidden)
    w.add_block_count(n_layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(rope_base)
    w.add_layer_norm_rms_eps(
        float(config.get("rms_norm_eps") or scalar(fields, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5))
    )
    w.add_vocab_size(len(fields["tokenizer.ggml.tokens"].data))
    return heads, kv_heads, head_dim, rope_base
