"""MTP drafting on llama.cpp with tiny Qwen3.5-layout GGUFs that carry an MTP block (tests/support/tiny_hybrid.py):
the layer is loaded and found from the GGUF, it is paired with the right token and hidden row (blocks built
so that their drafts are known exactly), greedy output equals plain decoding, sampling keeps the target's
distribution, and a model without the layer is refused by name."""

import numpy as np
import pytest
from support.distribution import chi_square_p
from support.drafts import record_first_drafts
from support.llama_mtp import exact_pairs  # noqa: F401
from support.tiny_hybrid import write_tiny_qwen35

from localspec.backends.llama_cpp.backend import LlamaCppBackend
from localspec.drafters.base import NoDrafter
from localspec.drafters.context import DrafterContext
from localspec.drafters.mtp.drafter import build
from localspec.engine.loop import generate
from localspec.engine.speclen import FixedK
from localspec.errors import ConfigError
from localspec.sampling import SamplingParams

pytestmark = pytest.mark.model
GREEDY = SamplingParams(temperature=0)


def load(tmp_path_factory, **kwargs):
    name = "-".join(f"{k}={v}" for k, v in kwargs.items()) or "plain"
    path = write_tiny_qwen35(tmp_path_factory.mktemp("mtp") / f"{name}.gguf", **kwargs)
    return LlamaCppBackend(path, n_ctx=512, n_threads=2)


@pytest.fixture(scope="module")
def partial_mtp(tmp_path_factory):
    """A token-reading block on a random trunk: right about half the time (greedy), so drafts are both
    accepted and rejected."""
    with load(tmp_path_factory, mtp="token") as backend:
        yield backend


def prompt_of(backend):
    return backend.tokenizer.tokenize("the quick brown fox jumps over the lazy dog and")


def test_the_mtp_block_is_loaded_and_the_trunk_is_the_rest(partial_mtp):
    assert partial_mtp.capabilities.mtp_layers == 1 and partial_mtp.n_layers == 4
    assert partial_mtp.capabilities.hidden_states and partial_mtp.capabilities.max_rollback == 16


@pytest.mark.parametrize("draft_tokens", [FixedK(4), "auto"])
def test_greedy_mtp_output_equals_plain(partial_mtp, draft_tokens):
    prompt = prompt_of(partial_mtp)
    plain = generate(partial_mtp, NoDrafter(), prompt, GREEDY, max_tokens=60)
    drafter = build(partial_mtp, None, DrafterContext(seed=0))
    try:
        out = generate(partial_mtp, drafter, prompt, GREEDY, max_tokens=60, draft_tokens=draft_tokens)
        again = generate(partial_mtp, drafter, prompt, GREEDY, max_tokens=60, draft_tokens=draft_tokens)
    finally:
        drafter.close()
    assert out.tokens == plain.tokens and again.tokens == plain.tokens
    if isinstance(draft_tokens, FixedK):
        assert out.stats.drafter["mtp_drafted"] > 0


def test_a_token_reading_block_on_an_identity_trunk_drafts_every_token_right(tmp_path_factory):
    """The target's next token is f(last token) and so is the block's prediction from the token it is
    given: drafts are right exactly when the block gets the pending token at its position and chains on its
    own output. A pairing one position off would draft f(f(x)) or the token itself."""
    with load(tmp_path_factory, mtp="token", trunk="identity") as backend:
        prompt = prompt_of(backend)
        plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=64)
        drafter = build(backend, None, DrafterContext(seed=0))
        try:
            out = generate(backend, drafter, prompt, GREEDY, max_tokens=64, draft_tokens=FixedK(8))
        finally:
            drafter.close()
    assert out.tokens == plain.tokens
    assert out.stats.accepted == out.stats.drafted > 0  # tau = 9 a step


def test_a_hidden_reading_block_gets_the_targets_row_of_the_position_before(tmp_path_factory):
    """Reading only the hidden row, the block reproduces the target's logits at the position before the
    pending token, whose greedy pick *is* the pending token: its first draft token must repeat it."""
    with load(tmp_path_factory, mtp="hidden", trunk="identity") as backend:
        drafter = build(backend, None, DrafterContext(seed=0))
        pairs = record_first_drafts(drafter)
        try:
            generate(backend, drafter, prompt_of(backend), GREEDY, max_tokens=40, draft_tokens=FixedK(2))
        finally:
            drafter.close()
    later = pairs[1:]  # the first pending token is the prompt's own, not a greedy pick
    assert len(later) >= 10 and all(pending == first for pending, first in later)


def test_sampled_mtp_keeps_the_targets_distribution(partial_mtp):
    """At T > 0 the MTP drafts carry the layer's q rows; the first two tokens of sampled answers follow the
    target's exact distribution (chi-square), and drafts were both accepted and rejected."""
    sampling = SamplingParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
    prompt = prompt_of(partial_mtp)
    dist = exact_pairs(partial_mtp, prompt, sampling)
    drafter = build(partial_mtp, None, DrafterContext(seed=0))
    rng, counts, accepted = np.random.default_rng(7), {}, set()
    try:
        for _ in range(1500):
            out = generate(partial_mtp, drafter, prompt, sampling, max_tokens=2, draft_tokens=FixedK(2), rng=rng)
            counts[out.tokens[:2]] = counts.get(out.tokens[:2], 0) + 1
            accepted.add(out.stats.accepted)
    finally:
        drafter.close()
    assert {0, 1} <= accepted
    assert chi_square_p(counts, dist) > 1e-3


def test_a_model_without_mtp_layers_is_refused_by_name(tmp_path_factory):
    with load(tmp_path_factory) as backend:
        assert backend.capabilities.mtp_layers == 0
        with pytest.raises(ConfigError, match=r"tiny-qwen35.*no MTP layers.*nextn_predict_layers"):
            build(backend, None, DrafterContext())


def test_list_finds_the_mtp_layer_in_the_file_not_in_its_name(tmp_path):
    from localspec.backends.gguf_meta import mtp_layers
    from localspec.models.hub import listing
    from localspec.models.registry import ModelEntry, Registry

    files = {
        m: write_tiny_qwen35(tmp_path / f"model-{i}.gguf", mtp=m) for i, m in enumerate(("random", None, "no-nextn"))
    }
    assert [mtp_layers(p) for p in files.values()] == [1, 0, 0]
    models = {f"m{i}": ModelEntry(f"m{i}", path=str(p), drafters=("suffix",)) for i, p in enumerate(files.values())}
    rows = {row["name"]: row for row in listing(Registry("m0", models))}
    assert rows["m0"]["drafters"] == ["suffix", "mtp"] and rows["m0"]["downloaded"][0]["mtp_layers"] == 1
    assert rows["m1"]["drafters"] == rows["m2"]["drafters"] == ["suffix"]


def test_a_stopped_answer_and_a_prompt_cached_without_it_are_handed_over_once(partial_mtp):
    """The chat's stop button closes the stream mid-answer: the kept part still reaches the MTP layer, so the
    next turn prefills only its new tokens. A prompt cached by plain decoding is handed over the first time
    the drafter meets it, and not again."""
    from localspec.engine.loop import stream_generate

    prompt = prompt_of(partial_mtp)
    partial_mtp.truncate(0)
    generate(partial_mtp, NoDrafter(), prompt, GREEDY, max_tokens=8)  # caches the prompt without the drafter
    drafter = build(partial_mtp, None, DrafterContext(seed=0))
    try:
        first = generate(partial_mtp, drafter, prompt, GREEDY, max_tokens=4, draft_tokens=FixedK(2))
        assert first.stats.prefill_tokens == len(prompt) - 1  # handed over: the drafter had none of it
        answer = list(first.tokens)
        stream = stream_generate(partial_mtp, drafter, prompt + answer, GREEDY, max_tokens=40, draft_tokens=FixedK(3))
        for _ in range(4):
            answer += list(next(stream).tokens)
        stream.close()  # stopped: the answer so far is kept
        cached = len(partial_mtp.cached_tokens)
        turn = prompt + answer + partial_mtp.tokenizer.tokenize(" and then")
        nxt = generate(partial_mtp, drafter, turn, GREEDY, max_tokens=4, draft_tokens=FixedK(2))
    finally:
        drafter.close()
    assert nxt.stats.prefill_tokens == len(turn) - 1 - cached


def test_the_mtp_layers_cache_is_saved_and_loaded_with_the_servers_conversation_states(tmp_path_factory):
    """Two conversations take turns through the server's conversation states: back on the first, its saved
    state is loaded for the target and for the MTP layer alike, so the turn prefills only its new tokens and
    drafts exactly what a drafter that never switched drafts."""
    from localspec.chat.prompt_states import PromptStates

    def turns(backend, switch: bool):
        drafter = build(backend, None, DrafterContext(seed=0))
        drafts, propose = [], drafter.propose
        drafter.propose = lambda c, k: drafts.append(propose(c, k)) or drafts[-1]
        states = PromptStates(backend, budget_bytes=1 << 30)
        a = backend.tokenizer.tokenize("the quick brown fox jumps over the lazy dog and the cat sat on the mat " * 2)
        b = backend.tokenizer.tokenize("an entirely different conversation about ships, sails and the open sea " * 2)
        try:
            states.prepare(a, drafter)
            first = generate(backend, drafter, a, GREEDY, max_tokens=24, draft_tokens=FixedK(3))
            if switch:
                states.prepare(b, drafter)
                generate(backend, drafter, b, GREEDY, max_tokens=24, draft_tokens=FixedK(3))
            again = a + list(first.tokens) + backend.tokenizer.tokenize(" and so")
            states.prepare(again, drafter)
            cached = len(backend.cached_tokens)
            drafts.clear()
            out = generate(backend, drafter, again, GREEDY, max_tokens=24, draft_tokens=FixedK(3))
        finally:
            drafter.close()
        return out, len(again) - 1 - cached, [d.tokens for d in drafts], states.loads

    with load(tmp_path_factory, mtp="token") as backend:
        switched = turns(backend, switch=True)
        backend.truncate(0)
        straight = turns(backend, switch=False)
    out, new_tokens, drafts, loads = switched
    assert loads == 1 and out.stats.prefill_tokens == new_tokens  # only the new tokens
    assert out.tokens == straight[0].tokens and drafts == straight[2] and out.stats.drafted > 0
