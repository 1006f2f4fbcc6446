"""Random DFlash / DSpark heads in the released Hugging Face layouts (config.json + model.safetensors), and an
independent re-implementation of the reference forward (z-lab's `DFlashDraftModel`: context keys/values
concatenated with the block's, bidirectional attention) to check localspec's heads against."""

import json

import numpy as np
import torch
from safetensors.torch import save_file

LAYER = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def write_dflash_head(
    folder,
    hidden: int,
    vocab: int,
    mask: int,
    target_layer_ids=(1, 5),
    kind: str = "dflash",
    layers: int = 1,
    block: int = 8,
    heads: int = 4,
    kv_heads: int = 2,
    ff: int = 96,
    seed: int = 0,
    confidence: bool = True,
    speculators: bool = False,
    scale: float = 1.0,
):
    """A random head for a target of width ``hidden`` and ``vocab`` tokens. ``kind="dspark"`` adds the
    Markov (rank 8) and, with ``confidence``, confidence heads, under "model."-prefixed names; with
    ``speculators`` the config is in the speculators format (`transformer_layer_config`,
    `aux_hidden_state_layer_ids`: layer inputs, bonus-anchor blocks)."""
    folder.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    head_dim = hidden // heads

    def rand(*shape, s=1.0):
        return torch.randn(*shape, generator=g) * s / shape[-1] ** 0.5

    state = {
        "fc.weight": rand(hidden, len(target_layer_ids) * hidden, s=2.0),
        "hidden_norm.weight": 1 + 0.1 * torch.randn(hidden, generator=g),
        "norm.weight": 1 + 0.1 * torch.randn(hidden, generator=g),
    }
    shapes = {
        "q_proj": (heads * head_dim, hidden),
        "k_proj": (kv_heads * head_dim, hidden),
        "v_proj": (kv_heads * head_dim, hidden),
        "o_proj": (hidden, heads * head_dim),
        "gate_proj": (ff, hidden),
        "up_proj": (ff, hidden),
        "down_proj": (hidden, ff),
    }
    for i in range(layers):
        for name in LAYER:
            group = "mlp" if name in ("gate_proj", "up_proj", "down_proj") else "self_attn"
            state[f"layers.{i}.{group}.{name}.weight"] = rand(*shapes[name], s=3.0 * scale)
        for norm in ("input_layernorm", "post_attention_layernorm"):
            state[f"layers.{i}.{norm}.weight"] = 1 + 0.1 * torch.randn(hidden, generator=g)
        for norm in ("q_norm", "k_norm"):
            state[f"layers.{i}.self_attn.{norm}.weight"] = 1 + 0.1 * torch.randn(head_dim, generator=g)
    config = {
        "architectures": ["DSparkDraftModel" if kind == "dspark" else "DFlashDraftModel"],
        "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
        "model_type": "qwen3",
        "hidden_size": hidden,
        "intermediate_size": ff,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "vocab_size": vocab,
        "block_size": block,
        "dflash_config": {"mask_token_id": mask, "target_layer_ids": list(target_layer_ids)},
    }
    if kind == "dspark":
        rank = 8
        state["markov_head.markov_w1.weight"] = torch.randn(vocab, rank, generator=g)
        state["markov_head.markov_w2.weight"] = rand(vocab, rank, s=4.0)
        if confidence:
            state["confidence_head.proj.weight"] = rand(1, hidden + rank, s=2.0)
            state["confidence_head.proj.bias"] = torch.tensor([0.3])
        state = {f"model.{k}": v for k, v in state.items()}
    if speculators:
        geometry = {k: config.pop(k) for k in list(config) if k not in ("architectures", "auto_map", "block_size")}
        extract = [i + 1 for i in geometry.pop("dflash_config")["target_layer_ids"]]
        config.update(transformer_layer_config=geometry, aux_hidden_state_layer_ids=extract, mask_token_id=mask)
    (folder / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder


def _rms(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rope(x, pos, theta=10000.0):
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    ang = torch.outer(pos.double(), inv).float()[:, None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    half = torch.cat([-x[..., d // 2 :], x[..., : d // 2]], -1)
    return x * cos + half * sin


def reference_block(folder, ctx_features, anchor: int, rows: int, embed, lm_head, prev_chain=None, first=0):
    """The reference forward of a block [anchor, mask x (rows-1)] after the context whose features (the
    concatenated target hidden states, one row per position 0..P-1) are given: logits [rows, V] of every
    row, plus for a DSpark head the Markov bias and confidence of the drafted rows first.. along
    ``prev_chain`` (the token before each)."""
    from safetensors.torch import load_file

    config = json.loads((folder / "config.json").read_text())
    config = {**config, **config.get("transformer_layer_config", {})}
    st = {k.removeprefix("model."): v.double() for k, v in load_file(str(folder / "model.safetensors")).items()}
    mask = config.get("mask_token_id", (config.get("dflash_config") or {}).get("mask_token_id"))
    heads, kv, hd = config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]
    ctx = torch.as_tensor(np.asarray(ctx_features)).double()
    p = ctx.shape[0]
    g = _rms(ctx @ st["fc.weight"].T, st["hidden_norm.weight"])
    x = torch.as_tensor(embed).double()[[anchor] + [mask] * (rows - 1)]
    pos_ctx, pos_blk = torch.arange(p), torch.arange(p, p + rows)
    for i in range(config["num_hidden_layers"]):
        w = {k[len(f"layers.{i}.") :]: v for k, v in st.items() if k.startswith(f"layers.{i}.")}
        h = _rms(x, w["input_layernorm.weight"])
        q = _rms((h @ w["self_attn.q_proj.weight"].T).view(rows, heads, hd), w["self_attn.q_norm.weight"])
        both = torch.cat([g, h])
        k = _rms((both @ w["self_attn.k_proj.weight"].T).view(p + rows, kv, hd), w["self_attn.k_norm.weight"])
        v = (both @ w["self_attn.v_proj.weight"].T).view(p + rows, kv, hd)
        q, k = _rope(q, pos_blk), _rope(k, torch.cat([pos_ctx, pos_blk]))
        k, v = k.repeat_interleave(heads // kv, 1), v.repeat_interleave(heads // kv, 1)
        att = torch.softmax(torch.einsum("qhd,khd->hqk", q, k) / hd**0.5, -1)
        out = torch.einsum("hqk,khd->qhd", att, v).reshape(rows, heads * hd)
        x = x + out @ w["self_attn.o_proj.weight"].T
        m = _rms(x, w["post_attention_layernorm.weight"])
        x = (
            x
            + (torch.nn.functional.silu(m @ w["mlp.gate_proj.weight"].T) * (m @ w["mlp.up_proj.weight"].T))
            @ w["mlp.down_proj.weight"].T
        )
    out = _rms(x, st["norm.weight"])
    logits = out @ torch.as_tensor(lm_head).double().T
    result = {"logits": logits.numpy()}
    if "markov_head.markov_w1.weight" in st and prev_chain is not None:
        w1 = st["markov_head.markov_w1.weight"][list(prev_chain)]
        result["bias"] = (w1 @ st["markov_head.markov_w2.weight"].T).numpy()
        if "confidence_head.proj.weight" in st:
            z = torch.cat([out[first : first + len(prev_chain)], w1], -1) @ st["confidence_head.proj.weight"].T
            result["confidence"] = torch.sigmoid(z + st["confidence_head.proj.bias"])[:, 0].numpy()
    return result
