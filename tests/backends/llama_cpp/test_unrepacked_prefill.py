"""Long prompts prefilled in a second context on an unrepacked load of the file, their cache copied into the main
context (unrepacked_prefill.py), on the real SmolLM2-135M. Both contexts run the same (unrepacked) kernels here,
so the copied cache must give exactly the rows and answers of a prompt prefilled in the main context."""

import numpy as np
import pytest

from localspec.backends.llama_cpp.backend import LlamaCppBackend
from localspec.backends.llama_cpp.unrepacked_prefill import (
    COPY_RATIO,
    MAX_CTX,
    MIN_TOKENS,
    SHARE,
    UnrepackedPrefill,
    prefill_ctx,
)
from localspec.drafters.base import NoDrafter
from localspec.drafters.suffix.drafter import SuffixDrafter, SuffixOptions
from localspec.engine.loop import generate
from localspec.errors import ContextOverflow, ModelError
from localspec.sampling import SamplingParams
from localspec.types import common_prefix

pytestmark = pytest.mark.model
GREEDY = SamplingParams(temperature=0)
TEXT = (
    "Rewrite this function so that it returns a list instead of printing:\n"
    "def show(items):\n    for i, item in enumerate(items):\n        print(i, item.name, item.price)\n"
)


def open_pair(path, n_ctx=1024):
    kwargs = {"n_ctx": n_ctx, "n_threads": 2, "extra_buffers": False}
    return (
        LlamaCppBackend(path, unrepacked_prefill=True, **kwargs),
        LlamaCppBackend(path, unrepacked_prefill=False, **kwargs),
    )


@pytest.fixture(scope="module")
def pair(smollm2_path):
    side, plain = open_pair(smollm2_path)
    with side, plain:
        yield side, plain


def chat(backend, messages):
    return backend.tokenizer.chat_tokens(messages)


def last_row(backend, context):
    """The rows after prefilling all of ``context`` but its last token (what the cache holds is reused)."""
    keep = common_prefix(backend.cached_tokens, context[:-1])
    backend.truncate(keep)
    backend.prefill(context[keep:-1])
    rows = backend.forward([context[-1]]).rows.numpy().copy()
    backend.truncate(len(context) - 1)
    return rows


def test_the_load_report_says_so_and_only_where_asked(pair):
    side, plain = pair
    assert "prompts prefilled on unrepacked weights (up to 1024 tokens)" in side.info.placement
    assert "prefilled" not in plain.info.placement


def test_a_long_prompt_is_prefilled_beside_and_answers_as_if_prefilled_here(pair):
    side, plain = pair
    prompt = chat(side, [{"role": "user", "content": TEXT}])
    assert len(prompt) > MIN_TOKENS
    for b in pair:
        b.truncate(0)
    assert np.array_equal(last_row(side, prompt), last_row(plain, prompt))
    assert side._side_prefill.tokens == prompt[:-1]  # it was prefilled there, and its cache copied here
    assert list(side.cached_tokens) == list(plain.cached_tokens) == prompt[:-1]
    answers = [generate(b, NoDrafter(), prompt, GREEDY, max_tokens=24).tokens for b in pair]
    assert answers[0] == answers[1] and len(answers[0]) > 5


def test_the_next_turn_copies_the_answer_over_before_prefilling_beside(pair):
    """The answer was decoded in the main context: the second context lacks it, and gets it copied first."""
    side, plain = pair
    first = [{"role": "user", "content": TEXT}]
    prompt = chat(side, first)
    for b in pair:
        b.truncate(0)
    answer = [generate(b, SuffixDrafter(SuffixOptions(), None), prompt, GREEDY, max_tokens=32) for b in pair]
    assert answer[0].tokens == answer[1].tokens
    follow_up = "Now add a docstring and type hints, and explain what changed and why it is easier to test."
    messages = first + [{"role": "assistant", "content": answer[0].text}, {"role": "user", "content": follow_up}]
    second = chat(side, messages)
    assert len(second) - len(prompt) > MIN_TOKENS
    # the main context holds the answer's tokens, the second context only the first prompt
    assert len(side._side_prefill.tokens) < common_prefix(side.cached_tokens, second[:-1])
    assert np.array_equal(last_row(side, second), last_row(plain, second))
    assert side._side_prefill.tokens == second[:-1]
    replies = [generate(b, NoDrafter(), second, GREEDY, max_tokens=24).tokens for b in pair]
    assert replies[0] == replies[1]


def test_a_short_run_of_prompt_tokens_is_prefilled_in_the_main_context(pair):
    side, _ = pair
    prompt = chat(side, [{"role": "user", "content": TEXT}])
    side.truncate(0)
    side.prefill(prompt[:-1])
    before = list(side._side_prefill.tokens)
    side.prefill(prompt[:8])  # a few more tokens after a cached prefix
    assert side._side_prefill.tokens == before
    assert list(side.cached_tokens) == prompt[:-1] + prompt[:8]


def test_a_prompt_past_the_context_still_overflows_clearly(smollm2_path):
    side, _plain = open_pair(smollm2_path, n_ctx=64)
    with side, _plain:
        prompt = chat(side, [{"role": "user", "content": TEXT * 3}])
        with pytest.raises(ContextOverflow, match="context is full"):
            side.prefill(prompt)
        assert side._side_prefill.tokens == []  # too long for it: the main context raised, as without it


def test_a_refused_copy_falls_back_to_the_main_context_for_good(smollm2_path, monkeypatch):
    side, plain = open_pair(smollm2_path)
    with side, plain:
        prompt = chat(side, [{"role": "user", "content": TEXT}])
        helper = side._side_prefill

        def refuse(*args, **kwargs):
            raise ModelError("refused")

        monkeypatch.setattr(helper, "prefill", refuse)
        assert np.array_equal(last_row(side, prompt), last_row(plain, prompt))
        assert side._side_prefill is None and helper._ctx is None  # closed, and not tried again
        assert list(side.cached_tokens) == prompt[:-1]


def test_slots_prefill_in_the_shared_batches(smollm2_path):
    side, plain = open_pair(smollm2_path)
    with side, plain:
        helper = side._side_prefill
        slots, _run = side.slots(2)
        assert side._side_prefill is None and helper._ctx is None  # freed: the slots never use it
        assert all(s._side_prefill is None for s in slots)


def test_a_run_of_prompt_tokens_must_pay_for_the_copies_and_fit():
    """The whole cache is copied back after each prefill there: a run short against its context stays here."""
    helper = UnrepackedPrefill.__new__(UnrepackedPrefill)
    helper._ctx, helper.n_ctx = object(), 20_000
    assert helper.takes([], [1] * MIN_TOKENS) and not helper.takes([], [1] * (MIN_TOKENS - 1))
    least = 9_000 // (COPY_RATIO - 1) + 1  # after 9,000 cached tokens, the fewest new ones that pay for the copies
    assert helper.takes([1] * 9_000, [1] * least)
    assert not helper.takes([1] * 9_000, [1] * (least - 2))
    assert not helper.takes([1] * 19_900, [1] * 200)  # past its context


def test_a_second_load_that_fails_leaves_the_model_loaded_prefilling_here(smollm2_path, monkeypatch):
    from localspec.backends.llama_cpp import backend as module

    def fail(*args, **kwargs):
        raise ModelError("out of memory")

    monkeypatch.setattr(module, "UnrepackedPrefill", fail)
    with LlamaCppBackend(smollm2_path, n_ctx=512, n_threads=2, unrepacked_prefill=True) as b:
        assert b._side_prefill is None and "prefilled" not in b.info.placement
        prompt = chat(b, [{"role": "user", "content": TEXT}])
        assert len(generate(b, NoDrafter(), prompt, GREEDY, max_tokens=4).tokens) == 4


def test_the_second_context_is_sized_by_the_main_one_the_cap_and_free_memory():
    per_token = 28_672  # Qwen2.5-1.5B's keys and values, f16
    assert prefill_ctx(32_768, per_token, 20 * 2**30) == MAX_CTX
    assert prefill_ctx(8_192, per_token, 20 * 2**30) == 8_192
    assert prefill_ctx(8_192, per_token, None) == 8_192  # memory unknown: not bounded by it
    assert prefill_ctx(8_192, per_token, 2**30) == int(SHARE * 2**30 // per_token) // 256 * 256
    assert prefill_ctx(8_192, per_token, 100 * 2**20) == 0  # fewer than MIN_CTX tokens fit
    assert prefill_ctx(512, per_token, 20 * 2**30) == 512  # a small main context: as small


def test_copies_between_the_contexts_reuse_one_buffer_and_load_back_exactly(pair):
    """capi.seq_state with a scratch buffer: a copy no larger than the last one lands in the same memory, a
    larger one grows it, and what it holds loads back into a context as the cache it was copied from."""
    from localspec.backends.llama_cpp.capi import seq_state, set_seq_state

    _, plain = pair
    tokens = chat(plain, [{"role": "user", "content": TEXT * 3}])
    plain.truncate(0)
    plain.prefill(tokens[:-1])
    want = plain.forward([tokens[-1]]).rows.numpy().copy()
    scratch = [None]
    plain.truncate(40)
    small = seq_state(plain._lib, plain._ctx, scratch)
    first = scratch[0]
    plain.truncate(0)
    plain.prefill(tokens[:-1])
    big = seq_state(plain._lib, plain._ctx, scratch)
    assert big.size > small.size and scratch[0] is not first and scratch[0].size >= big.size
    grown = scratch[0]
    plain.truncate(40)
    again = seq_state(plain._lib, plain._ctx, scratch)
    assert scratch[0] is grown and again.ctypes.data == grown.ctypes.data and again.size == small.size
    plain.prefill(tokens[40:-1])
    big = seq_state(plain._lib, plain._ctx, scratch)
    plain.truncate(0)
    assert set_seq_state(plain._lib, plain._ctx, bytes(big))  # any bytes-like copy loads, read in place
    plain.load_state(tokens[:-1], big)
    assert np.array_equal(plain.forward([tokens[-1]]).rows.numpy(), want)
