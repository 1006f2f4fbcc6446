"""The PyTorch backend: tiny random decoders of each architecture built here (cache, rollback, exact
speculative decoding, hidden states), and parity with llama.cpp on the real SmolLM2-135M GGUF."""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fakes import OracleDrafter, RandomDrafter, ScriptedBackend  # noqa: E402
from localspec.backends.torch_backend import TorchBackend, _unpermute  # noqa: E402
from localspec.backends.torch_decoder import Decoder, DecoderConfig, rope_inv_freq  # noqa: E402
from localspec.drafters.base import NoDrafter  # noqa: E402
from localspec.drafters.ngram import NgramDrafter  # noqa: E402
from localspec.engine import generate  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402

GREEDY = SamplingParams(temperature=0)
V = 24
ARCHS = {
    "llama-gqa": DecoderConfig(V, 32, 64, 2, 4, 2, 8),
    "qwen2-bias-tied": DecoderConfig(V, 32, 48, 2, 4, 1, 8, attn_bias=True, tie_embeddings=True, rope_theta=1e6),
    "llama3-scaled-rope": DecoderConfig(V, 32, 64, 2, 4, 4, 8, rope_theta=5e5, rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}),
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
    return TorchBackend.from_decoder(model, ScriptedBackend(vocab_size=V), n_ctx=256)


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
    assert out.hidden.shape == (1, 3, 32)
    embed = backend.model.embed.weight.detach().numpy()
    assert_close(out.hidden[0] @ embed.T, out.logits)


def test_llama3_rope_scaling_slows_only_long_wavelengths():
    plain = rope_inv_freq(DecoderConfig(V, 32, 64, 1, 1, 1, 64, rope_theta=5e5))
    scaled = rope_inv_freq(ARCHS["llama3-scaled-rope"].__class__(V, 32, 64, 1, 1, 1, 64, rope_theta=5e5,
                                                                  rope_scaling=ARCHS["llama3-scaled-rope"].rope_scaling))
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
    from localspec.backends.llama_cpp import LlamaCppBackend
    from localspec.chat import Conversation
    from localspec.registry import resolve_model
    from test_llama_cpp import PROMPTS
    path = resolve_model("smollm2-135m")[1]
    tb, lb = TorchBackend(path, n_ctx=512, n_threads=2), LlamaCppBackend(path, n_ctx=512, n_threads=2)
    identical = 0
    for text in PROMPTS:
        conv = Conversation()
        conv.add("user", text)
        prompt = conv.prompt_tokens(lb, reserve=48)
        assert tb.tokenize(text) == lb.tokenize(text)
        tb.truncate(0)
        lb.truncate(0)
        a, b = lb.forward(prompt).logits, tb.forward(prompt).logits
        assert np.abs(a - b).max() < 3.0 and np.abs(a - b).mean() < 0.4
        assert (a.argmax(1) == b.argmax(1)).mean() > 0.85
        lb.truncate(0)
        tb.truncate(0)
        x = generate(lb, NoDrafter(), prompt, GREEDY, max_tokens=48).tokens
        y = generate(tb, NoDrafter(), prompt, GREEDY, max_tokens=48).tokens
        if x == y:
            identical += 1
            continue
        i = next(i for i, (u, v) in enumerate(zip(x, y)) if u != v)
        tb.truncate(0)
        row = np.sort(tb.forward(list(prompt) + list(x[:i])).logits[-1])
        assert row[-1] - row[-2] < 0.6, f"{text!r}: outputs differ at token {i} where nothing is close"
    assert identical >= 5
    lb.close()
    tb.close()
