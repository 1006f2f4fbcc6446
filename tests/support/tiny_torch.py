"""Tiny random torch decoders of each architecture, Hugging Face checkpoints of them, random EAGLE-1 heads, and
the closeness check the backend tests use."""

import numpy as np
import pytest

from localspec.backends.torch.backend import TorchBackend
from localspec.backends.torch.decoder import Decoder, DecoderConfig
from localspec.sampling import SamplingParams
from support.fakes import ScriptedTokenizer

torch = pytest.importorskip("torch")


GREEDY = SamplingParams(temperature=0)


V = 24


ARCHS = {
    "llama-gqa": DecoderConfig(V, 32, 64, 2, 4, 2, 8),
    "qwen2-bias-tied": DecoderConfig(V, 32, 48, 2, 4, 1, 8, attn_bias=True, tie_embeddings=True, rope_theta=1e6),
    "llama3-scaled-rope": DecoderConfig(
        V,
        32,
        64,
        2,
        4,
        4,
        8,
        rope_theta=5e5,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    ),
}


def assert_close(actual, expected):
    """Equal up to fp32 rounding, relative to the logits' scale."""
    assert np.abs(actual - expected).max() <= 1e-4 * np.abs(expected).max() + 1e-4


def tiny(name, seed=0):
    torch.manual_seed(seed)
    model = Decoder(ARCHS[name])
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)  # sharper distributions than the default init: fewer near-ties
    return TorchBackend.from_decoder(model, ScriptedTokenizer(vocab_size=V), n_ctx=256)


HF_NAMES = {
    "attn_norm": "input_layernorm",
    "q": "self_attn.q_proj",
    "k": "self_attn.k_proj",
    "v": "self_attn.v_proj",
    "o": "self_attn.o_proj",
    "mlp_norm": "post_attention_layernorm",
    "gate": "mlp.gate_proj",
    "up": "mlp.up_proj",
    "down": "mlp.down_proj",
}


def write_hf_checkpoint(folder, model_type, seed=0):
    """A tiny checkpoint in the Hugging Face layout: config.json, model.safetensors (HF tensor names),
    and a byte-level BPE tokenizer.json trained here with the tokenizers package."""
    import json

    from safetensors.torch import save_file

    from support.hf_folder import write_tokenizer

    vocab = write_tokenizer(folder)
    cfg = {
        "model_type": model_type,
        "vocab_size": vocab,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": model_type == "qwen2",
        "max_position_embeddings": 512,
    }
    (folder / "config.json").write_text(json.dumps(cfg))
    torch.manual_seed(seed)
    model = Decoder(
        DecoderConfig(
            vocab,
            32,
            64,
            2,
            4,
            2,
            8,
            rms_eps=1e-6,
            attn_bias=model_type == "qwen2",
            tie_embeddings=model_type == "qwen2",
            max_positions=512,
        )
    )
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    state = {"model.embed_tokens.weight": model.embed.weight, "model.norm.weight": model.norm.weight}
    if model.lm_head is not None:
        state["lm_head.weight"] = model.lm_head.weight
    for i, layer in enumerate(model.layers):
        for ours, theirs in HF_NAMES.items():
            for part, tensor in getattr(layer, ours).named_parameters():
                state[f"model.layers.{i}.{theirs}.{part}"] = tensor
    save_file({k: v.detach().contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return model


def write_eagle_head(folder, target, fmt="bin", seed=1, with_embed=True):
    """A random EAGLE-1/2 head in the released format (tensor names and config keys of the EAGLE code)."""
    import json

    cfg = target.model.cfg
    torch.manual_seed(seed)
    h, inter, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    state = {
        "fc.weight": torch.randn(h, 2 * h) * 0.3,
        "fc.bias": torch.randn(h) * 0.1,
        "layers.0.self_attn.q_proj.weight": torch.randn(cfg.n_heads * hd, h) * 0.3,
        "layers.0.self_attn.k_proj.weight": torch.randn(cfg.n_kv_heads * hd, h) * 0.3,
        "layers.0.self_attn.v_proj.weight": torch.randn(cfg.n_kv_heads * hd, h) * 0.3,
        "layers.0.self_attn.o_proj.weight": torch.randn(h, cfg.n_heads * hd) * 0.3,
        "layers.0.mlp.gate_proj.weight": torch.randn(inter, h) * 0.3,
        "layers.0.mlp.up_proj.weight": torch.randn(inter, h) * 0.3,
        "layers.0.mlp.down_proj.weight": torch.randn(h, inter) * 0.3,
        "layers.0.post_attention_layernorm.weight": torch.ones(h),
    }
    if with_embed:
        state["embed_tokens.weight"] = target.model.embed.weight.detach().clone()
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "hidden_size": h,
                "intermediate_size": inter,
                "num_attention_heads": cfg.n_heads,
                "num_key_value_heads": cfg.n_kv_heads,
                "num_hidden_layers": 1,
                "rms_norm_eps": cfg.rms_eps,
                "vocab_size": cfg.vocab_size,
                "bias": True,
            }
        )
    )
    if fmt == "bin":
        torch.save(state, folder / "pytorch_model.bin")
    else:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
