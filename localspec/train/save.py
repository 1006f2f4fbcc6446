"""What a trained EAGLE head folder holds besides its weights: the released layouts' config.json keys and
Hugging Face names of the one decoder layer (shared by train-eagle's EAGLE-1 and EAGLE-3 heads)."""

from __future__ import annotations

EAGLE_LAYER_NAMES = {  # our Layer's modules -> the Hugging Face names a released head uses
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
    "mlp_norm": "post_attention_layernorm",
}


def head_config(c, architecture: str, **extra) -> dict:
    """config.json of a one-layer head of DecoderConfig ``c`` (the released EAGLE layouts' keys)."""
    return {
        "architectures": [architecture],
        "model_type": "llama",
        "hidden_size": c.hidden_size,
        "intermediate_size": c.intermediate_size,
        "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads,
        "head_dim": c.head_dim,
        "num_hidden_layers": 1,
        "rms_norm_eps": c.rms_eps,
        "rope_theta": c.rope_theta,
        "rope_scaling": c.rope_scaling,
        "max_position_embeddings": c.max_positions,
        "hidden_act": "silu",
        **extra,
    }
