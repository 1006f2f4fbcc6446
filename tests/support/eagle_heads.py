"""EAGLE heads for the tiny torch targets: random EAGLE-3 checkpoints in the released layout, deeper tiny
decoders, the exact distribution of short answers, and a word corpus a head can learn."""

import json

import numpy as np
import pytest

from localspec.backends.torch.backend import TorchBackend
from localspec.backends.torch.decoder import Decoder, DecoderConfig
from support.fakes import ScriptedTokenizer
from support.tiny_torch import V

torch = pytest.importorskip("torch")


DEEP = DecoderConfig(V, 32, 64, 8, 4, 2, 8)  # 8 layers: EAGLE-3 reads the inputs of layers 2, 4 and 5


PROMPT = [1, 2, 3, 4, 1, 2, 3]


def backend_for(cfg, seed=0, vocab=V, scale=4.0):
    torch.manual_seed(seed)
    model = Decoder(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return TorchBackend.from_decoder(model, ScriptedTokenizer(vocab_size=vocab), n_ctx=256)


def write_eagle3_head(folder, target, draft_vocab=16, layer_ids=None, seed=2):
    """A random EAGLE-3 head in the released format: fc [H, 3H], midlayer.* with q/k/v over 2H, norm,
    lm_head over a draft vocabulary, d2t offsets (draft id + d2t = target id) and t2d."""
    cfg = target.model.cfg
    torch.manual_seed(seed)
    h, inter, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    kept = torch.sort(torch.randperm(cfg.vocab_size)[:draft_vocab]).values  # target ids in the draft vocabulary
    t2d = torch.zeros(cfg.vocab_size, dtype=torch.bool)
    t2d[kept] = True
    state = {
        "fc.weight": torch.randn(h, 3 * h) * 0.3,
        "midlayer.hidden_norm.weight": torch.ones(h),
        "midlayer.input_layernorm.weight": torch.ones(h),
        "midlayer.post_attention_layernorm.weight": torch.ones(h),
        "midlayer.self_attn.q_proj.weight": torch.randn(cfg.n_heads * hd, 2 * h) * 0.3,
        "midlayer.self_attn.k_proj.weight": torch.randn(cfg.n_kv_heads * hd, 2 * h) * 0.3,
        "midlayer.self_attn.v_proj.weight": torch.randn(cfg.n_kv_heads * hd, 2 * h) * 0.3,
        "midlayer.self_attn.o_proj.weight": torch.randn(h, cfg.n_heads * hd) * 0.3,
        "midlayer.mlp.gate_proj.weight": torch.randn(inter, h) * 0.3,
        "midlayer.mlp.up_proj.weight": torch.randn(inter, h) * 0.3,
        "midlayer.mlp.down_proj.weight": torch.randn(h, inter) * 0.3,
        "norm.weight": torch.ones(h),
        "lm_head.weight": torch.randn(draft_vocab, h) * 0.5,
        "d2t": kept - torch.arange(draft_vocab),
        "t2d": t2d,
    }
    config = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": h,
        "intermediate_size": inter,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.n_kv_heads,
        "num_hidden_layers": 1,
        "rms_norm_eps": cfg.rms_eps,
        "vocab_size": cfg.vocab_size,
        "draft_vocab_size": draft_vocab,
    }
    if layer_ids is not None:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": list(layer_ids)}
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    torch.save(state, folder / "pytorch_model.bin")
    return [int(t) for t in kept]


SMALL = DecoderConfig(6, 32, 64, 3, 4, 2, 8)  # 3 layers: the distribution tests' 3000 answers each


def exact(backend, sampling, n=3):
    """The exact distribution of every ``n``-token answer after PROMPT[:4] under ``sampling``."""
    import itertools

    dist, memo = {}, {}

    def probs(ctx):
        if ctx not in memo:
            backend.truncate(0)
            memo[ctx] = sampling.probs(backend.forward(list(ctx)).logits[-1:])[0]
        return memo[ctx]

    for seq in itertools.product(range(6), repeat=n):
        p, ctx = 1.0, tuple(PROMPT[:4])
        for t in seq:
            p *= probs(ctx)[t]
            ctx += (t,)
        dist[seq] = p
    backend.truncate(0)
    return dist


def word_corpus(path, seed=0) -> list[str]:
    """40 documents of six random four-letter words run together: text a head can learn."""
    rng = np.random.default_rng(seed)
    letters = "abcdefghijklmnopqrstuvwx"
    words = ["".join(rng.choice(list(letters), size=4)) for _ in range(6)]
    docs = [" ".join(rng.choice(words, size=60)).replace(" ", "") for _ in range(40)]
    path.write_text("\n\n".join(docs))
    return docs
