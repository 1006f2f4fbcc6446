"""Integration tests on the real SmolLM2-135M GGUF through llama.cpp."""

import numpy as np
import pytest
from support.fakes import OracleDrafter, RandomDrafter
from support.prompts import PROMPTS

from localspec.backends.llama_cpp.backend import LlamaCppBackend
from localspec.backends.llama_cpp.capi import avoid_amx_buffers
from localspec.chat.conversation import Conversation
from localspec.drafters.base import NoDrafter
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.suffix.drafter import SuffixDrafter, SuffixOptions
from localspec.engine.calibrate import window_differences
from localspec.engine.exact import DEFAULT_MARGIN
from localspec.engine.loop import generate
from localspec.errors import ModelError
from localspec.models.registry import resolve_model
from localspec.sampling import SamplingParams

pytestmark = pytest.mark.model
GREEDY = SamplingParams(temperature=0)
K, N = 4, 48


@pytest.fixture(scope="module")
def backend(smollm2):
    return smollm2


@pytest.fixture(scope="module")
def draft_backend(smollm2_path):
    """A second SmolLM2 context: the model drafting for itself (its own KV cache)."""
    with LlamaCppBackend(smollm2_path, n_ctx=1024, n_threads=2) as b:
        yield b


def prompt_tokens(backend, text):
    conv = Conversation()
    conv.add("user", text)
    return conv.prompt_tokens(backend, reserve=N)


def greedy_run(backend, prompt, drafter, draft_tokens=K, exact=True, max_tokens=N, fresh=True):
    """exact: the exact guard on (the default), which is batch-invariant kernels on a CPU llama.cpp."""
    if fresh:
        backend.truncate(0)
    return generate(
        backend,
        drafter,
        prompt,
        GREEDY,
        max_tokens=max_tokens,
        draft_tokens=draft_tokens,
        exact_guard=DEFAULT_MARGIN["llama.cpp"] if exact else None,
    ).tokens


def first_difference(reference, got) -> int:
    pairs = enumerate(zip(reference, got, strict=False))
    return next((i for i, (a, b) in pairs if a != b), min(len(reference), len(got)))


@pytest.mark.parametrize("text", PROMPTS)
def test_speculative_greedy_equals_plain_greedy(backend, draft_backend, text):
    """Batch-invariant kernels: every drafter, right or wrong, gives plain decoding's tokens exactly."""
    prompt = prompt_tokens(backend, text)
    reference = greedy_run(backend, prompt, NoDrafter())
    assert len(reference) > 5
    drafters = [
        ("ngram", NgramDrafter(1, 3)),
        ("random", RandomDrafter(backend.vocab_size, seed=1)),
        ("suffix", SuffixDrafter(SuffixOptions(max_spec_factor=2.0, min_token_prob=0.0), None)),
        ("draft", DraftModelDrafter(draft_backend, backend.vocab_size, backend.vocab_size)),
    ]
    drafters += [
        (f"right-{j}", OracleDrafter(reference, len(prompt), backend.vocab_size, right=j)) for j in range(K + 1)
    ]
    for label, drafter in drafters:
        got = greedy_run(backend, prompt, drafter)
        assert got == reference, f"{label}: differs from plain at token {first_difference(reference, got)}"


LONG = "Summarise this code:\n" + "\n".join(f"def f{i}(x):\n    return x * {i} + {i * i}" for i in range(40))


def test_batch_invariant_windows_compute_each_position_as_a_single_token_step(backend):
    """Past 256 tokens llama.cpp's 1-token attention splits the KV cells (its windows do not), and a window of
    64+ query rows is tiled: with the default kernels windows differ there; batch-invariant kernels make
    every window size equal the 1-token steps bit for bit, also after rolled-back windows."""
    prompt = prompt_tokens(backend, LONG)
    assert len(prompt) > 600 and backend.capabilities.batch_invariant
    backend.set_batch_invariant(False)
    fast = window_differences(backend, prompt, 40, (2, 65))
    assert fast[2] > 0 and fast[65] > 0  # the default kernels are not batch-invariant here
    backend.set_batch_invariant(True)
    assert window_differences(backend, prompt, 40, (2, 5, 17, 65)) == {2: 0.0, 5: 0.0, 17: 0.0, 65: 0.0}
    assert window_differences(backend, prompt, 24, (5, 9), rollback=True) == {5: 0.0, 9: 0.0}
    backend.set_batch_invariant(False)


def test_greedy_output_is_plain_decodings_over_long_contexts_and_turns(backend, draft_backend):
    """Every drafter under the controller, on a prompt past 512 tokens and then a second turn that reuses
    the cache: the tokens are plain decoding's exactly (the exact guard's default: batch-invariant kernels)."""
    conv = Conversation()
    conv.add("user", LONG)
    first_prompt = conv.prompt_tokens(backend, reserve=96)
    plain_first = greedy_run(backend, first_prompt, NoDrafter(), draft_tokens=1, max_tokens=96)
    detok = backend.tokenizer.detokenizer()
    conv.add("assistant", "".join(detok.push(t) for t in plain_first) + detok.flush())
    conv.add("user", "Now write f40 and f41 the same way.")
    second_prompt = conv.prompt_tokens(backend, reserve=64)
    plain_second = greedy_run(backend, second_prompt, NoDrafter(), draft_tokens=1, max_tokens=64, fresh=False)
    for label, make in (
        ("ngram", lambda: NgramDrafter(1, 3)),
        ("suffix", lambda: SuffixDrafter(SuffixOptions(min_token_prob=0.0), None)),
        ("draft", lambda: DraftModelDrafter(draft_backend, backend.vocab_size, backend.vocab_size)),
    ):
        drafter = make()
        first = greedy_run(backend, first_prompt, drafter, draft_tokens="auto", max_tokens=96)
        assert first == plain_first, f"{label}: turn 1 differs at token {first_difference(plain_first, first)}"
        second = greedy_run(backend, second_prompt, drafter, draft_tokens="auto", max_tokens=64, fresh=False)
        assert second == plain_second, f"{label}: turn 2 differs at token {first_difference(plain_second, second)}"
    fast = greedy_run(backend, first_prompt, NgramDrafter(1, 3), draft_tokens=8, exact=False, max_tokens=96)
    assert len(fast) == 96  # the default kernels run too (their tokens may differ at near-ties: not compared)


def test_truncate_and_continue_gives_the_logits_of_a_fresh_prefill(backend):
    tokens = prompt_tokens(backend, PROMPTS[3]) + backend.tokenizer.tokenize(" def factorial(n):\n    return 1")
    backend.truncate(0)
    backend.prefill(tokens[:-4])
    fresh = backend.forward(tokens[-4:]).logits
    for keep in (0, 1, len(tokens) // 2, len(tokens) - 5, len(tokens) - 4):
        backend.truncate(keep)
        backend.prefill(tokens[keep:-4])
        again = backend.forward(tokens[-4:]).logits
        np.testing.assert_allclose(again, fresh, atol=2e-3, rtol=0, err_msg=f"after truncate({keep})")
        assert backend.cached_tokens == tuple(tokens)


def test_truncate_is_idempotent_and_absolute(backend):
    tokens = prompt_tokens(backend, PROMPTS[0])
    backend.truncate(0)
    backend.prefill(tokens)
    backend.truncate(10)
    backend.truncate(10)
    backend.truncate(50_000)
    assert backend.cached_tokens == tuple(tokens[:10])


def test_second_turn_prefills_only_the_new_messages(backend):
    backend.truncate(0)
    conv = Conversation()
    conv.add("user", "Name three colours.")
    first = generate(backend, NgramDrafter(), conv.prompt_tokens(backend, N), GREEDY, max_tokens=N)
    conv.add("assistant", first.text)
    conv.add("user", "And three animals.")
    prompt2 = conv.prompt_tokens(backend, N)
    second = generate(backend, NgramDrafter(), prompt2, GREEDY, max_tokens=N)
    new_part = len(prompt2) - second.stats.prefill_tokens
    assert second.stats.prefill_tokens < 20 and new_part > 30
    assert len(second.text) > 0


def test_chat_template_comes_from_the_gguf(backend):
    assert "<|im_start|>" in backend.tokenizer.chat_template
    tokens = prompt_tokens(backend, "hi")
    assert backend.tokenizer.tokenize("<|im_start|>", special=True)[0] in tokens
    assert backend.tokenizer.tokenize("<|im_end|>", special=True)[0] in backend.tokenizer.eog_tokens


def test_streaming_detokenizer_never_splits_a_character(backend):
    text = "naïve café — 東京 🍵 ok"
    tokens = backend.tokenizer.tokenize(text)
    detok = backend.tokenizer.detokenizer()
    pieces = [detok.push(t) for t in tokens] + [detok.flush()]
    assert "".join(pieces) == text
    assert all("\ufffd" not in p for p in pieces)
    assert any(p == "" for p in pieces)  # the emoji's bytes span tokens and were held back


def test_amx_guard_only_when_cpu_and_build_have_amx():
    assert avoid_amx_buffers("fpu amx_tile avx2", "CPU : AMX_INT8 = 1 |") is True
    assert avoid_amx_buffers("fpu avx2 avx512f", "CPU : AMX_INT8 = 1 |") is False
    assert avoid_amx_buffers("fpu amx_tile", "CPU : AVX2 = 1 |") is False


def test_suffix_drafter_with_a_warm_global_tree_stays_exact(backend, tmp_path):
    from localspec.drafters.table import DrafterSetup

    drafter = DrafterSetup().with_options("suffix", cache_dir=str(tmp_path)).build("suffix", backend)
    prompt = prompt_tokens(backend, PROMPTS[7])
    reference = greedy_run(backend, prompt, NoDrafter())
    first = greedy_run(backend, prompt, drafter)  # fills the global tree with this answer
    second = generate(
        backend, drafter, prompt, GREEDY, max_tokens=N, draft_tokens=K, exact_guard=DEFAULT_MARGIN["llama.cpp"]
    )
    assert first == reference and second.tokens == reference
    assert second.stats.drafter["wins_global"] > 0 and second.stats.acceptance_rate > 0.5
    assert drafter.store.path.exists() and drafter.store.path.parent == tmp_path


def test_draft_model_sampling_uses_q_and_beats_exact_matching(backend, draft_backend):
    """SmolLM2 drafting for itself at temperature 0.8: q is close to p, so min(1, p/q) accepts nearly
    everything while sample-and-compare would accept only sum p*q."""
    drafter = DraftModelDrafter(draft_backend, backend.vocab_size, backend.vocab_size, seed=0)
    prompt = prompt_tokens(backend, PROMPTS[6])
    backend.truncate(0)
    out = generate(
        backend,
        drafter,
        prompt,
        SamplingParams(temperature=0.8),
        max_tokens=N,
        draft_tokens=K,
        rng=np.random.default_rng(0),
    )
    rules = out.stats.rule_comparison()
    assert rules["positions"] >= 20
    assert rules["rejection_sampling"] > 0.9 and rules["rejection_sampling"] > rules["exact_match"] + 0.1
    assert out.stats.acceptance_rate > 0.8


def test_windows_longer_than_n_batch_are_split_and_stay_exact(backend):
    """A 40-token verify window on a context whose batch holds 16: decoded in three pieces, every row's
    logits come back in order and greedy output is still the model's own."""
    _, path = resolve_model("smollm2-135m")
    prompt = prompt_tokens(backend, PROMPTS[7])
    reference = greedy_run(backend, prompt, NoDrafter())
    with LlamaCppBackend(path, n_ctx=1024, n_threads=2, n_batch=16, batch_invariant=True) as small:
        assert small.n_batch == 16
        small.prefill(prompt[:-1])
        window = [prompt[-1], *reference[:39]]
        logits = small.forward(window).logits
        assert logits.shape == (40, small.vocab_size) and small.cached_tokens == tuple(prompt[:-1] + window)
        # row i predicts reference[i]: the rows are in window order, not shuffled by the split
        assert np.mean(np.argmax(logits, axis=1) == np.array(reference[:40])) >= 0.9
        small.truncate(0)
        got = generate(
            small,
            OracleDrafter(reference, len(prompt), small.vocab_size),
            prompt,
            GREEDY,
            max_tokens=N,
            draft_tokens=40,
            exact_guard=DEFAULT_MARGIN["llama.cpp"],
        ).tokens
    assert got == reference, f"window of 40 on n_batch 16: differs at token {first_difference(reference, got)}"


@pytest.mark.model
def test_the_default_context_is_the_trained_one_as_far_as_memory_allows(backend, monkeypatch):
    import localspec.backends.llama_cpp.backend as module

    per_token = backend.kv_bytes_per_token()
    assert per_token == 30 * 3 * (64 + 64) * 2  # SmolLM2-135M: 30 layers, 3 KV heads of 64, f16 K and V
    train = backend.info.train_ctx
    monkeypatch.setattr(module, "available_memory", lambda: 10**12)
    assert backend._default_ctx(train) == train == 8192
    monkeypatch.setattr(module, "available_memory", lambda: int(3000 * per_token / module.KV_SHARE))
    assert backend._default_ctx(train) == 2816  # 3000 tokens fit: cut to a multiple of 256
    monkeypatch.setattr(module, "available_memory", lambda: 1000)
    assert backend._default_ctx(train) == module.MIN_DEFAULT_CTX
    monkeypatch.setattr(module, "available_memory", lambda: None)
    assert backend._default_ctx(train) == module.DEFAULT_CTX


@pytest.mark.parametrize("seed", [3, 11])
def test_a_seeded_sampled_answer_is_the_same_tokens_whatever_the_drafter(backend, seed):
    """T=0.8 with a seed under --exact (batch-invariant kernels): each position's token comes from its own
    stream and a point-mass draft token is kept when it equals that draw, so none, ngram and suffix, with fixed
    and adaptive windows, answer with the same tokens, and the fixed windows were really used (the adaptive
    controller prices batch-invariant windows by this machine's timings and may find that none pays)."""
    sampled = SamplingParams(temperature=0.8)
    texts = [PROMPTS[2], PROMPTS[7], PROMPTS[1]]
    drafters = [
        ("ngram", lambda: NgramDrafter(1, 3), K),
        ("suffix", lambda: SuffixDrafter(SuffixOptions(min_token_prob=0.0), None), "auto"),
        ("suffix-k8", lambda: SuffixDrafter(SuffixOptions(min_token_prob=0.0), None), 8),
    ]

    def run(text, drafter, draft_tokens):
        backend.truncate(0)
        return generate(
            backend,
            drafter,
            prompt_tokens(backend, text),
            sampled,
            max_tokens=N,
            draft_tokens=draft_tokens,
            rng=np.random.default_rng(seed),
            exact_guard=DEFAULT_MARGIN["llama.cpp"],
        )

    accepted, answered = dict.fromkeys([name for name, _, _ in drafters], 0), 0
    for text in texts:
        plain = run(text, NoDrafter(), 1)
        assert plain.stats.guard_kernels
        answered += len(plain.tokens)
        for name, make, draft_tokens in drafters:
            got = run(text, make(), draft_tokens)
            assert got.tokens == plain.tokens, (
                f"{name} on {text!r}: differs at {first_difference(plain.tokens, got.tokens)}"
            )
            accepted[name] += got.stats.accepted
    assert answered > 40 and accepted["ngram"] > 0 and accepted["suffix-k8"] > 0, (answered, accepted)


def test_rows_handed_out_in_place_keep_their_values_after_the_next_decode(backend):
    """forward gives llama.cpp's logits without a copy (rows.LiveRows); the next decode overwrites that
    buffer, so the rows still held are copied first: what a caller read before and after is the same."""
    backend.truncate(0)
    prompt = prompt_tokens(backend, PROMPTS[0])
    first = backend.forward(prompt[:-1]).rows
    window = backend.forward(prompt[-1:] + [17, 42]).rows
    assert window.live and not first.live  # the window's decode detached the prefill's rows
    before = [window.row(i).copy() for i in range(3)]
    argmax = window.argmax().copy()
    backend.forward([99])  # overwrites llama.cpp's buffer
    assert not window.live
    assert all(np.array_equal(window.row(i), before[i]) for i in range(3))
    assert np.array_equal(window.argmax(), argmax)
    assert not np.array_equal(before[2], backend.forward([5]).rows.row(0))
    backend.truncate(0)


def test_a_tokenizer_kept_after_its_model_is_closed_says_so_instead_of_reading_freed_memory(smollm2_path):
    from localspec.backends.llama_cpp.vocab import LlamaVocab

    backend = LlamaCppBackend(smollm2_path, n_ctx=256)
    tokenizer = backend.tokenizer
    assert tokenizer.tokenize("hello") and tokenizer.key(backend.vocab_size) == tokenizer.key()
    backend.close()
    with pytest.raises(ModelError, match="closed"):
        tokenizer.tokenize("hello")
    alone = LlamaVocab.load(smollm2_path)  # a vocabulary loaded without weights: the same tokens
    assert alone.tokenize("hello world") == LlamaCppBackend(smollm2_path, n_ctx=256).tokenizer.tokenize("hello world")
    alone.close()
    with pytest.raises(ModelError, match="closed"):
        alone.token_text(12345)
