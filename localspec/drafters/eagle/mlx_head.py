"""EAGLE-1/2 and EAGLE-3 heads running in MLX, from the same checkpoints as `eagle_heads.py` (formats
described there), for the MLX backend. Same interface as the torch heads: `fuse` target feature rows,
`step` (tokens, hidden inputs, first slot) -> outputs, `logits` over the target's vocabulary. Chains only
(the MLX backend has no tree attention).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from localspec.drafters.eagle.checkpoint import eagle_layout, read_eagle_config
from localspec.drafters.heads.feature_drafter import TREE_SLOTS
from localspec.errors import ConfigError, ModelError

_LAYER = (
    "self_attn.q_proj",
    "self_attn.k_proj",
    "self_attn.v_proj",
    "self_attn.o_proj",
    "mlp.gate_proj",
    "mlp.up_proj",
    "mlp.down_proj",
    "post_attention_layernorm",
)


def _load(folder: Path) -> tuple[dict, dict]:
    import mlx.core as mx

    folder = Path(folder)
    config = read_eagle_config(folder)
    try:
        if (folder / "model.safetensors").is_file():
            state = mx.load(str(folder / "model.safetensors"))
        elif (folder / "pytorch_model.bin").is_file():
            import torch  # only to read the pickle; the head runs in MLX

            raw = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
            state = {
                k: mx.array(v.float().numpy()) if v.is_floating_point() else mx.array(v.numpy()) for k, v in raw.items()
            }
        else:
            raise ModelError(f"{folder}: no pytorch_model.bin or model.safetensors")
    except ModelError:
        raise
    except ImportError as exc:
        raise ConfigError(
            f"{folder}: reading pytorch_model.bin needs torch; convert the head to "
            f"model.safetensors or pip install torch"
        ) from exc
    except Exception as exc:
        raise ModelError(f"{folder}: the EAGLE weights cannot be read ({exc}); download the head again") from exc
    if "fc.weight" not in state:
        raise ModelError(f"{folder}: not an EAGLE head (no fc.weight)")
    return config, state


class MlxEagleHead:
    def __init__(self, folder: Path, target) -> None:
        import mlx.core as mx
        from mlx_lm.models.rope_utils import initialize_rope

        config, state = _load(folder)
        args = target.model.args
        self.inner = target.decoder
        # the target's LM head (tied embeddings have none of their own)
        self.target_head = target.model.lm_head if "lm_head" in target.model else self.inner.embed_tokens.as_linear
        h = int(args.hidden_size)
        self.target_vocab = target.vocab_size
        try:
            layout = eagle_layout(config, state, h, len(target.decoder.layers), self.target_vocab)
        except (ConfigError, ModelError) as exc:
            raise type(exc)(f"{folder}: {exc}") from exc
        self.version, self.feature_layers = layout.version, layout.feature_layers
        prefix = "midlayer." if self.version == 3 else "layers.0."
        missing = [k for k in _LAYER if f"{prefix}{k}.weight" not in state]
        if missing:
            raise ModelError(f"EAGLE head: missing layer weights {missing} under {prefix}")
        self.w = {k: state[f"{prefix}{k}.weight"] for k in _LAYER}
        self.fc_w, self.fc_b = state["fc.weight"], state.get("fc.bias")
        self.heads = int(config.get("num_attention_heads", args.num_attention_heads))
        self.kv_heads = int(config.get("num_key_value_heads", self.heads))
        self.head_dim = int(config.get("head_dim", h // self.heads))
        self.eps = float(config.get("rms_norm_eps", args.rms_norm_eps))
        self.rope = initialize_rope(
            self.head_dim,
            config.get("rope_theta", getattr(args, "rope_theta", 10000.0)),
            False,
            config.get("rope_scaling", getattr(args, "rope_scaling", None)),
            config.get("max_position_embeddings"),
        )
        self.embed = state.get("embed_tokens.weight")
        if self.version == 3:
            self.hidden_norm = state["midlayer.hidden_norm.weight"]
            self.input_norm = state["midlayer.input_layernorm.weight"]
            self.norm, self.lm_head = state["norm.weight"], state["lm_head.weight"]
            self.draft_to_target = layout.draft_to_target
        slots = target.n_ctx + TREE_SLOTS
        self.k = mx.zeros((self.kv_heads, slots, self.head_dim), dtype=self.fc_w.dtype)
        self.v = mx.zeros((self.kv_heads, slots, self.head_dim), dtype=self.fc_w.dtype)
        self.lo = 0

    def _embed(self, tokens: Sequence[int]):
        import mlx.core as mx

        ids = mx.array(list(tokens), dtype=mx.int32)
        return self.embed[ids] if self.embed is not None else self.inner.embed_tokens(ids)

    def fuse(self, rows):
        import mlx.core as mx

        x = mx.array(np.asarray(rows, dtype=np.float32)).astype(self.fc_w.dtype)
        if self.version == 1:
            return x
        out = x @ self.fc_w.T
        return out + self.fc_b if self.fc_b is not None else out

    def step(self, tokens: Sequence[int], hidden, start: int, positions=None, mask=None):
        import mlx.core as mx

        if positions is not None or mask is not None:
            raise ConfigError("the MLX EAGLE head drafts chains only")
        w, n = self.w, len(tokens)
        emb = self._embed(tokens).astype(hidden.dtype)
        if self.version == 1:
            x = mx.concatenate([emb, hidden], axis=-1) @ self.fc_w.T
            x = x + self.fc_b if self.fc_b is not None else x
            residual, attn_in = x, x
        else:
            residual = hidden
            attn_in = mx.concatenate(
                [
                    mx.fast.rms_norm(emb, self.input_norm, self.eps),
                    mx.fast.rms_norm(hidden, self.hidden_norm, self.eps),
                ],
                axis=-1,
            )
        q = (attn_in @ w["self_attn.q_proj"].T).reshape(n, self.heads, self.head_dim).transpose(1, 0, 2)
        k = (attn_in @ w["self_attn.k_proj"].T).reshape(n, self.kv_heads, self.head_dim).transpose(1, 0, 2)
        v = (attn_in @ w["self_attn.v_proj"].T).reshape(n, self.kv_heads, self.head_dim).transpose(1, 0, 2)
        q, k = self.rope(q[None], offset=start)[0], self.rope(k[None], offset=start)[0]
        end = start + n
        self.k[:, start:end], self.v[:, start:end] = k, v
        keys, values = self.k[:, self.lo : end], self.v[:, self.lo : end]
        allowed = mx.arange(self.lo, end)[None, :] <= mx.arange(start, end)[:, None]
        out = mx.fast.scaled_dot_product_attention(
            q[None], keys[None], values[None], scale=self.head_dim**-0.5, mask=allowed
        )[0]
        x = residual + out.transpose(1, 0, 2).reshape(n, self.heads * self.head_dim) @ w["self_attn.o_proj"].T
        g = mx.fast.rms_norm(x, w["post_attention_layernorm"], self.eps)
        x = x + (nn_silu(g @ w["mlp.gate_proj"].T) * (g @ w["mlp.up_proj"].T)) @ w["mlp.down_proj"].T
        mx.eval(x, self.k, self.v)
        return x

    def logits(self, out) -> np.ndarray:
        import mlx.core as mx

        if self.version == 1:  # the target's own LM head reads the predicted feature
            return np.array(self.target_head(out).astype(mx.float32))
        draft = np.array((mx.fast.rms_norm(out, self.norm, self.eps) @ self.lm_head.T).astype(mx.float32))
        full = np.full((out.shape[0], self.target_vocab), -np.inf, dtype=np.float32)
        full[:, self.draft_to_target] = draft
        return full


def nn_silu(x):
    import mlx.core as mx

    return x * mx.sigmoid(x)
