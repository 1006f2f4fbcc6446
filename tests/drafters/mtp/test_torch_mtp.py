"""MTP on the torch backend with tiny MiMo-layout checkpoints (config.json model_type "mimo",
`model.mtp_layers.0.*` beside a Qwen2 body), built here: layers whose drafts are known exactly (as in
test_llama_mtp.py), greedy output equal to plain decoding, the target's distribution at T = 2, and a folder
without MTP layers refused by name."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file
from support.distribution import chi_square_p
from support.drafts import record_first_drafts
from support.llama_mtp import exact_pairs
from support.tiny_torch import write_hf_checkpoint

from localspec.backends.torch.backend import TorchBackend
from localspec.drafters.base import NoDrafter
from localspec.drafters.context import DrafterContext
from localspec.drafters.mtp.drafter import build
from localspec.engine.loop import generate
from localspec.engine.speclen import FixedK
from localspec.errors import ConfigError
from localspec.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)
H, FF = 32, 64  # write_hf_checkpoint's sizes


def write_mimo(folder, mtp: str = "token", trunk: str = "random", seed: int = 0):
    """A MiMo folder: the Qwen2 checkpoint of test_torch_backend plus one MTP layer. ``mtp``: "token" (the
    layer reads only the token: input_proj keeps the embedding half, attention and MLP add nothing) or
    "hidden" (only the target's row); ``trunk="identity"``: the body's layers add nothing either, "weak":
    little (the token layer is then right part of the time)."""
    write_hf_checkpoint(folder, "qwen2", seed=seed)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="mimo", num_nextn_predict_layers=1, tie_word_embeddings=False)
    (folder / "config.json").write_text(json.dumps(config))
    state = load_file(str(folder / "model.safetensors"))
    g = torch.Generator().manual_seed(seed + 1)
    # an LM head of its own: tied to the embedding, the next token would mostly be the last one again
    state["lm_head.weight"] = torch.randn(config["vocab_size"], H, generator=g) * 4
    scale = {"identity": 0.0, "weak": 0.012}.get(trunk)
    if scale is not None:  # the body's layers add nothing, or little, to the residual stream
        for key in state:
            if key.endswith(("self_attn.o_proj.weight", "mlp.down_proj.weight")):
                state[key] = state[key] * scale
    p = "model.mtp_layers.0."
    proj = torch.zeros(H, 2 * H)
    half = H if mtp == "token" else 0  # [hidden row; token] order
    proj[:, half : half + H] = torch.eye(H)
    layer = {
        "input_layernorm.weight": torch.ones(H),
        "post_attention_layernorm.weight": torch.ones(H),
        "token_layernorm.weight": torch.ones(H),
        "hidden_layernorm.weight": torch.ones(H),
        "final_layernorm.weight": torch.ones(H),
        "input_proj.weight": proj,
        "self_attn.o_proj.weight": torch.zeros(H, H),
        "mlp.gate_proj.weight": torch.randn(FF, H, generator=g),
        "mlp.up_proj.weight": torch.randn(FF, H, generator=g),
        "mlp.down_proj.weight": torch.zeros(H, FF),
    }
    for name, rows in (("q", H), ("k", H // 2), ("v", H // 2)):  # 4 heads, 2 kv heads of 8
        layer[f"self_attn.{name}_proj.weight"] = torch.randn(rows, H, generator=g)
        layer[f"self_attn.{name}_proj.bias"] = torch.randn(rows, generator=g)
    state.update({p + k: v for k, v in layer.items()})
    save_file({k: v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    return folder


def backend_of(folder):
    return TorchBackend(folder, n_ctx=256, n_threads=2)


def prompt_of(backend):
    return backend.tokenizer.tokenize("the quick brown fox jumps over the lazy dog")


def test_a_token_reading_layer_on_an_identity_body_drafts_every_token_right(tmp_path):
    backend = backend_of(write_mimo(tmp_path, "token", "identity"))
    prompt = prompt_of(backend)
    plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=48)
    drafter = build(backend, None, DrafterContext(seed=0))
    backend.truncate(0)
    out = generate(backend, drafter, prompt, GREEDY, max_tokens=48, draft_tokens=FixedK(6))
    assert drafter.name == "mtp" and out.tokens == plain.tokens
    assert out.stats.accepted == out.stats.drafted > 0


def test_a_hidden_reading_layer_gets_the_targets_row_of_the_position_before(tmp_path):
    backend = backend_of(write_mimo(tmp_path, "hidden", "identity"))
    drafter = build(backend, None, DrafterContext(seed=0))
    pairs = record_first_drafts(drafter)
    generate(backend, drafter, prompt_of(backend), GREEDY, max_tokens=30, draft_tokens=FixedK(2))
    assert len(pairs) >= 10 and all(pending == first for pending, first in pairs[1:])


@pytest.mark.parametrize("draft_tokens", [FixedK(3), "auto"])
def test_greedy_mtp_on_a_random_body_equals_plain(tmp_path, draft_tokens):
    backend = backend_of(write_mimo(tmp_path, "token", "weak"))
    prompt = prompt_of(backend)
    plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=60)
    backend.truncate(0)
    out = generate(
        backend, build(backend, None, DrafterContext(seed=0)), prompt, GREEDY, max_tokens=60, draft_tokens=draft_tokens
    )
    assert out.tokens == plain.tokens


def test_sampled_mtp_on_torch_keeps_the_targets_distribution(tmp_path):
    backend = backend_of(write_mimo(tmp_path, "token", "weak"))
    sampling = SamplingParams(temperature=2.0, top_k=8, top_p=1.0, min_p=0.0)  # broad: drafts rejected too
    prompt = prompt_of(backend)
    dist = exact_pairs(backend, prompt, sampling)
    drafter = build(backend, None, DrafterContext(seed=0))
    rng, counts, accepted = np.random.default_rng(3), {}, set()
    for _ in range(1200):
        out = generate(backend, drafter, prompt, sampling, max_tokens=2, draft_tokens=FixedK(2), rng=rng)
        counts[out.tokens[:2]] = counts.get(out.tokens[:2], 0) + 1
        accepted.add(out.stats.accepted)
    assert {0, 1} <= accepted
    assert chi_square_p(counts, dist) > 1e-3


def test_a_folder_without_mtp_layers_is_refused_by_name(tmp_path):
    write_hf_checkpoint(tmp_path, "qwen2")
    with pytest.raises(ConfigError, match=r"no MTP layers.*num_nextn_predict_layers"):
        build(backend_of(tmp_path), None, DrafterContext())


def test_a_mimo_folder_missing_part_of_its_mtp_layer_is_a_clear_error(tmp_path):
    from localspec.errors import ModelError

    folder = write_mimo(tmp_path)
    state = load_file(str(folder / "model.safetensors"))
    del state["model.mtp_layers.0.token_layernorm.weight"]
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(ModelError, match=r"token_layernorm.weight is missing; download"):
        build(backend_of(folder), None, DrafterContext())
