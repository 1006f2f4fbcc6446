"""The PyTorch backend: tiny random decoders of each architecture built here (cache, rollback, exact
speculative decoding, hidden states), and parity with llama.cpp on the real SmolLM2-135M GGUF."""

import numpy as np
import pytest
from support.fakes import OracleDrafter, RandomDrafter, ScriptedBackend  # noqa: E402
from support.tiny_torch import (  # noqa: F401
    ARCHS,
    GREEDY,
    HF_NAMES,
    V,
    assert_close,
    tiny,
    torch,
    write_eagle_head,
    write_hf_checkpoint,
)

from localspec.backends.torch.backend import TorchBackend, _unpermute  # noqa: E402
from localspec.backends.torch.decoder import DecoderConfig, rope_inv_freq  # noqa: E402
from localspec.drafters.base import NoDrafter  # noqa: E402
from localspec.drafters.ngram import NgramDrafter  # noqa: E402
from localspec.engine.loop import generate  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402


@pytest.mark.parametrize("name", ARCHS)
def test_feeding_one_token_at_a_time_equals_one_window(name):
    backend = tiny(name)
    tokens = [int(t) for t in np.random.default_rng(1).integers(0, V, 30)]
    whole = backend.forward(tokens).logits
    backend.truncate(0)
    rows = [backend.forward([t]).logits[0] for t in tokens]
    assert_close(np.stack(rows), whole)


@pytest.mark.parametrize("name", ARCHS)
def test_truncate_and_continue_gives_a_fresh_prefills_logits(name):
    backend = tiny(name)
    tokens = [int(t) for t in np.random.default_rng(2).integers(0, V, 40)]
    backend.prefill(tokens[:-5])
    fresh = backend.forward(tokens[-5:]).logits
    for keep in (0, 7, len(tokens) - 6):
        backend.truncate(keep)
        backend.prefill(tokens[keep:-5])
        assert_close(backend.forward(tokens[-5:]).logits, fresh)


@pytest.mark.parametrize("name", ARCHS)
def test_speculative_greedy_equals_plain_greedy(name):
    backend = tiny(name)
    prompt = [1, 2, 3, 4, 1, 2, 3]
    plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=60).tokens
    for drafter in (NgramDrafter(1, 3), RandomDrafter(V, seed=3), OracleDrafter(plain, len(prompt), V, right=2)):
        backend.truncate(0)
        assert generate(backend, drafter, prompt, GREEDY, max_tokens=60, draft_tokens=4).tokens == plain


def test_hidden_states_are_what_the_lm_head_sees():
    backend = tiny("qwen2-bias-tied")
    out = backend.forward([3, 4, 5], return_hidden=True)
    assert out.hidden.shape == (3, 32)
    embed = backend.model.embed.weight.detach().numpy()
    assert_close(out.hidden @ embed.T, out.logits)
    backend.set_feature_layers((0, 1, -1))  # several layers come concatenated per token, in that order
    backend.truncate(0)
    both = backend.forward([3, 4, 5], return_hidden=True).hidden
    assert both.shape == (3, 96) and np.array_equal(both[:, 64:], out.hidden)
    assert_close(both[:, :32], embed[[3, 4, 5]])  # the input of layer 0 is the embedding


def test_llama3_rope_scaling_slows_only_long_wavelengths():
    plain = rope_inv_freq(DecoderConfig(V, 32, 64, 1, 1, 1, 64, rope_theta=5e5))
    scaled = rope_inv_freq(
        ARCHS["llama3-scaled-rope"].__class__(
            V, 32, 64, 1, 1, 1, 64, rope_theta=5e5, rope_scaling=ARCHS["llama3-scaled-rope"].rope_scaling
        )
    )
    wavelen = 2 * np.pi / plain.numpy()
    short, long_ = wavelen < 64 / 4, wavelen > 64 / 1
    assert short.any() and long_.any()
    np.testing.assert_allclose(scaled.numpy()[short], plain.numpy()[short], rtol=1e-6)
    np.testing.assert_allclose(scaled.numpy()[long_], plain.numpy()[long_] / 8, rtol=1e-6)


def test_unpermute_inverts_llama_cpps_qk_permutation():
    w = np.arange(8 * 2 * 3, dtype=np.float32).reshape(16, 3)  # 2 heads of dim 8
    n_head = 2
    permuted = w.reshape(n_head, 2, 16 // n_head // 2, 3).swapaxes(1, 2).reshape(w.shape)  # what convert does
    np.testing.assert_array_equal(_unpermute(permuted, n_head), w)


@pytest.mark.model
def test_parity_with_llama_cpp_on_smollm2():
    """llama.cpp runs the Q4_1 weights with 8-bit-quantized activations, the torch backend the same weights
    dequantized in fp32: logits agree to within quantization noise, and greedy output is identical except
    where the best two tokens are within 0.6 logits of each other."""
    from support.prompts import PROMPTS

    from localspec.backends.llama_cpp.backend import LlamaCppBackend
    from localspec.chat.conversation import Conversation
    from localspec.models.registry import resolve_model

    path = resolve_model("smollm2-135m")[1]
    tb, lb = TorchBackend(path, n_ctx=512, n_threads=2), LlamaCppBackend(path, n_ctx=512, n_threads=2)
    identical = 0
    for text in PROMPTS:
        conv = Conversation()
        conv.add("user", text)
        prompt = conv.prompt_tokens(lb, reserve=32)
        assert tb.tokenizer.tokenize(text) == lb.tokenizer.tokenize(text)
        tb.truncate(0)
        lb.truncate(0)
        a, b = lb.forward(prompt).logits, tb.forward(prompt).logits
        assert np.abs(a - b).max() < 3.0 and np.abs(a - b).mean() < 0.4
        assert (a.argmax(1) == b.argmax(1)).mean() > 0.85
        lb.truncate(0)
        tb.truncate(0)
        x = generate(lb, NoDrafter(), prompt, GREEDY, max_tokens=32).tokens
        y = generate(tb, NoDrafter(), prompt, GREEDY, max_tokens=32).tokens
        if x == y:
            identical += 1
            continue
        i = next(i for i, (u, v) in enumerate(zip(x, y, strict=False)) if u != v)
        tb.truncate(0)
        row = np.sort(tb.forward(list(prompt) + list(x[:i])).logits[-1])
        assert row[-1] - row[-2] < 0.6, f"{text!r}: outputs differ at token {i} where nothing is close"
    assert identical >= 5
    lb.close()
    tb.close()


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_hugging_face_folder_loads_weights_tokenizer_and_chat_template(tmp_path, model_type):
    from localspec.chat.conversation import Conversation

    reference = write_hf_checkpoint(tmp_path, model_type)
    backend = TorchBackend(tmp_path, n_ctx=256, n_threads=2)
    text = "hello world, naïve fox"
    tokens = backend.tokenizer.tokenize(text)
    detok = backend.tokenizer.detokenizer()
    assert "".join(detok.push(t) for t in tokens) + detok.flush() == text
    ref = TorchBackend.from_decoder(reference, backend.tokenizer, n_ctx=256)
    np.testing.assert_array_equal(backend.forward(tokens).logits, ref.forward(tokens).logits)
    conv = Conversation()
    conv.add("user", "def add(a, b):")
    prompt = conv.prompt_tokens(backend, reserve=40)
    assert backend.tokenizer.tokenize("<|im_start|>")[0] in prompt and backend.tokenizer.eog_tokens == {
        backend.tokenizer.tokenize("<|im_end|>")[0]
    }
    backend.truncate(0)
    plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=40).tokens
    backend.truncate(0)
    assert generate(backend, NgramDrafter(1, 3), prompt, GREEDY, max_tokens=40, draft_tokens=4).tokens == plain


def test_unsupported_or_broken_folders_are_clear_errors(tmp_path):
    from localspec.errors import ModelError

    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(ModelError, match="model_type 'gpt2'"):
        TorchBackend(tmp_path)
    write_hf_checkpoint(tmp_path, "llama")
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(ModelError, match="model.safetensors is missing"):
        TorchBackend(tmp_path)


@pytest.mark.parametrize("fmt,with_embed", [("bin", True), ("safetensors", False)])
@pytest.mark.parametrize("name", ["llama-gqa", "qwen2-bias-tied"])
def test_eagle_head_drafts_and_output_stays_the_targets(tmp_path, name, fmt, with_embed):
    from localspec.drafters.eagle.drafter import EagleDrafter

    backend = tiny(name)
    write_eagle_head(tmp_path / "head", backend, fmt, with_embed=with_embed)
    prompt = [1, 2, 3, 4, 1, 2, 3]
    plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=60).tokens
    drafter = EagleDrafter(backend, tmp_path / "head")
    backend.truncate(0)
    out = generate(backend, drafter, prompt, GREEDY, max_tokens=60, draft_tokens=3)
    assert out.tokens == plain
    # fed from the prompt's first position on (its features come with the prefill), without gaps, up to
    # what the last step verified
    assert drafter.rows.first == 0 and out.stats.drafter["eagle_positions_fed"] >= len(prompt) - 1 + 60 - 4
    assert out.stats.drafted > 30
    sampled = generate(
        backend,
        drafter,
        prompt,
        SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
        max_tokens=40,
        draft_tokens=3,
        rng=np.random.default_rng(0),
    )
    assert sampled.stats.rule_comparison()["positions"] > 0  # drafts carry q at temperature > 0


def test_eagle_needs_the_torch_backend_and_a_real_head(tmp_path):
    from localspec.drafters.eagle.drafter import EagleDrafter
    from localspec.errors import ConfigError, ModelError

    with pytest.raises(ConfigError, match="hidden states.*--backend torch"):
        EagleDrafter(ScriptedBackend(), tmp_path)
    (tmp_path / "config.json").write_text("{}")
    torch.save({"something": torch.zeros(1)}, tmp_path / "pytorch_model.bin")
    with pytest.raises(ModelError, match="no fc.weight"):
        EagleDrafter(tiny("llama-gqa"), tmp_path)


@pytest.mark.model
def test_cli_runs_smollm2_on_torch_with_an_eagle_head(tmp_path):
    import json

    from support.cli import run_cli

    from localspec.models.registry import resolve_model

    target = TorchBackend(resolve_model("smollm2-135m")[1], n_ctx=256, n_threads=2)
    write_eagle_head(tmp_path / "head", target, "safetensors", with_embed=False)
    target.close()
    result = run_cli(
        "run",
        "--json",
        "--backend",
        "torch",
        "--drafter",
        "eagle",
        "--eagle-head",
        str(tmp_path / "head"),
        "-t",
        "0",
        "-n",
        "12",
        "--draft-tokens",
        "2",
        "Count to five.",
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["drafter"] == "eagle" and out["stats"]["generated_tokens"] == 12 and out["stats"]["drafted"] > 0
