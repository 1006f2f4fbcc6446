"""Chained MTP layers on llama.cpp, with tiny Step-3.5-layout GGUFs that carry two or three MTP blocks
(tests/support/tiny_step35.py): layer i drafts token i + 1 (blocks built so that their drafts are known exactly), each
layer's cache holds what a fresh one fed the whole context would, and greedy output equals plain decoding."""

import numpy as np
import pytest
from support.tiny_step35 import write_tiny_step35

from localspec.backends.llama_cpp.backend import LlamaCppBackend
from localspec.drafters.base import NoDrafter
from localspec.drafters.context import DrafterContext
from localspec.drafters.mtp.drafter import build
from localspec.drafters.mtp.llama_head import LlamaMtpHead, _RowHead
from localspec.engine.loop import generate
from localspec.engine.speclen import FixedK
from localspec.sampling import SamplingParams

pytestmark = pytest.mark.model
GREEDY = SamplingParams(temperature=0)


def load(tmp_path_factory, heads, trunk="random"):
    path = tmp_path_factory.mktemp("chain") / f"{'-'.join(heads)}-{trunk}.gguf"
    return LlamaCppBackend(write_tiny_step35(path, heads=heads, trunk=trunk), n_ctx=512, n_threads=2)


def prompt_of(backend):
    return backend.tokenizer.tokenize("the quick brown fox jumps over the lazy dog and")


def drafts_of(drafter):
    """Record every draft the drafter makes."""
    drafts, propose = [], drafter.propose

    def recording(context, max_tokens):
        draft = propose(context, max_tokens)
        drafts.append(draft.tokens)
        return draft

    drafter.propose = recording
    return drafts


def test_each_layer_drafts_its_own_token_and_a_draft_is_as_long_as_the_layers_are_many(tmp_path_factory):
    """Token-reading layers on an identity trunk draft f(token) exactly: every draft token is right only if
    layer i gets draft token i at position P + i, and no draft is longer than the three layers."""
    with load(tmp_path_factory, ("token",) * 3, trunk="identity") as backend:
        prompt = prompt_of(backend)
        plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=48)
        drafter = build(backend, None, DrafterContext(seed=0))
        drafts = drafts_of(drafter)
        try:
            out = generate(backend, drafter, prompt, GREEDY, max_tokens=48, draft_tokens=FixedK(8))
            assert "3 chained MTP layers" in drafter.describe()
        finally:
            drafter.close()
    assert out.tokens == plain.tokens
    assert out.stats.accepted == out.stats.drafted > 0
    assert max(map(len, drafts)) == 3


def test_the_second_layer_reads_the_row_the_first_layer_gave(tmp_path_factory):
    """A hidden-reading second layer fed the first layer's row (the normed embedding of the token it read)
    predicts what the first layer did: every two-token draft repeats its token. Were the first layer run
    twice, the second token would be f(first) instead."""
    with load(tmp_path_factory, ("token", "hidden"), trunk="identity") as backend:
        drafter = build(backend, None, DrafterContext(seed=0))
        drafts = drafts_of(drafter)
        try:
            generate(backend, drafter, prompt_of(backend), GREEDY, max_tokens=40, draft_tokens=FixedK(2))
        finally:
            drafter.close()
    pairs = [d for d in drafts if len(d) == 2]
    assert len(pairs) >= 10 and all(a == b for a, b in pairs)


def chain(head, token, row, pos):
    """(logits, row) of every draft step from the pending ``token`` at ``pos``, greedy."""
    steps = []
    for index in range(head.max_draft):
        logits, row = head.step(token, row, pos + index, index)
        steps.append((logits, row))
        token = int(np.argmax(logits))
    return steps


def chain_pair_by_pair(head, token, row, pos):
    """The same steps built independently: under layer i, the pairs of the draft so far decoded one at a
    time at positions pos, pos + 1, ... (the single-pair step at explicit positions), as llama.cpp's driver
    places them."""
    steps, pairs = [], []
    for index in range(head.max_draft):
        pairs.append((token, row))
        head._use_layer(index)
        for t, (tok, r) in enumerate(pairs):
            logits, out = _RowHead.step(head, tok, r, pos + t)
        head._use_layer(0)
        steps.append((logits, out))
        token, row = int(np.argmax(logits)), out
    return steps


def test_every_layers_cache_matches_a_fresh_one_over_turns_with_cuts(tmp_path_factory):
    """Random layers on a random trunk (drafts mostly rejected, so the caches are cut every step): late in
    a second turn, each draft step's logits and rows equal those of a fresh head fed the whole context and
    drafting pair by pair at explicit positions.
    The prompt was cached by plain decoding first, so the drafter must have been handed it again."""
    with load(tmp_path_factory, ("random", "random")) as backend:
        prompt = prompt_of(backend)
        plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=30)
        drafter = build(backend, None, DrafterContext(seed=0))
        compared, propose = [], drafter.propose

        def comparing(context, max_tokens):
            draft = propose(context, max_tokens)  # feeds the new positions, then drafts
            if len(context) > len(prompt) + 40 and not compared:
                pos, rows = len(context) - 1, drafter._rows
                zero = np.zeros(backend.hidden_size, np.float32)
                fresh = LlamaMtpHead(backend)
                try:
                    fresh.feed(context[:pos], np.stack([rows.get(p - 1, zero) for p in range(pos)]), 0)
                    compared.append(
                        (
                            chain_pair_by_pair(fresh, context[-1], rows[pos - 1], pos),
                            chain(drafter.head, context[-1], rows[pos - 1], pos),
                        )
                    )
                finally:
                    fresh.close()
            return draft

        drafter.propose = comparing
        try:
            out = generate(backend, drafter, prompt, GREEDY, max_tokens=30, draft_tokens=FixedK(2))
            answer = prompt + list(out.tokens) + backend.tokenizer.tokenize(" and then")
            generate(backend, drafter, answer, GREEDY, max_tokens=30, draft_tokens=FixedK(2))
        finally:
            drafter.close()
    assert out.tokens == plain.tokens
    assert out.stats.drafted > out.stats.accepted  # the caches were cut
    ((want, got),) = compared
    for (w_logits, w_row), (g_logits, g_row) in zip(want, got, strict=True):
        np.testing.assert_allclose(g_logits, w_logits, atol=1e-3)
        np.testing.assert_allclose(g_row, w_row, atol=1e-3)


def test_more_layers_than_llama_cpp_chains_for_the_architecture_are_refused_by_name(tmp_path_factory, monkeypatch):
    from localspec.backends.gguf_meta import mtp_layers
    from localspec.drafters.mtp import llama_head as mtp_llama
    from localspec.errors import ConfigError

    with load(tmp_path_factory, ("random", "random")) as backend:
        assert mtp_layers(backend.path) == 2 and backend.capabilities.mtp_layers == 2 and backend.n_layers == 2
        monkeypatch.setattr(mtp_llama, "CHAINED_ARCHS", frozenset())  # as for qwen35, whose graph runs one
        with pytest.raises(ConfigError, match=r"tiny-step35 declares 2 MTP layers.*runs one MTP layer of a step35"):
            build(backend, None, DrafterContext())
