"""A random model of mlx-lm's own qwen3_5 class (Qwen3.5's layout: Gated DeltaNet layers, full attention every
``interval``-th layer), for the MLX hybrid tests and benchmarks/mlx_hybrid_rollback.py."""

from __future__ import annotations


def qwen3_5_model(width: int, layers: int, vocab: int, head_dim: int, interval: int, seed: int = 0, scale=None):
    import mlx.core as mx
    from mlx.utils import tree_map
    from mlx_lm.models import qwen3_5

    mx.random.seed(seed)
    heads = width // head_dim
    text = {
        "model_type": "qwen3_5_text",
        "hidden_size": width,
        "intermediate_size": width * 2,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": max(1, heads // 2),
        "head_dim": head_dim,
        "vocab_size": vocab,
        "linear_num_value_heads": heads,
        "linear_num_key_heads": max(1, heads // 2),
        "linear_key_head_dim": head_dim,
        "linear_value_head_dim": head_dim,
        "full_attention_interval": interval,
        "max_position_embeddings": 8192,
    }
    model = qwen3_5.Model(qwen3_5.ModelArgs(model_type="qwen3_5", text_config=text))
    if scale is not None:  # sharper weights: a tiny model's greedy picks then have clear margins
        model.update(tree_map(lambda p: p * scale, model.parameters()))
    mx.eval(model.parameters())
    return model
