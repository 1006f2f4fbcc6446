"""Recurrent and hybrid targets on llama.cpp (Mamba, RWKV, Qwen3.5, Granite-4): their state is not cut back
by position, except within the snapshots llama.cpp keeps for some architectures (n_rs_seq). A tiny random
Qwen3.5-layout GGUF (tests/support/tiny_hybrid.py) covers the rollback; an architecture without snapshots is
simulated on SmolLM2 (reported hybrid, partial removal refused as llama.cpp refuses it)."""

import llama_cpp
import numpy as np
import pytest
from support.tiny_hybrid import write_tiny_qwen35

from localspec.backends.llama_cpp.backend import RS_SNAPSHOTS, LlamaCppBackend
from localspec.drafters.base import NoDrafter, check_fit
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.suffix.drafter import SuffixDrafter
from localspec.engine.loop import generate
from localspec.errors import ConfigError
from localspec.models.registry import resolve_model
from localspec.sampling import SamplingParams

pytestmark = pytest.mark.model
GREEDY = SamplingParams(temperature=0)


@pytest.fixture
def hybrid(monkeypatch):
    monkeypatch.setattr(llama_cpp, "llama_model_is_hybrid", lambda model: True)
    real_rm = llama_cpp.llama_memory_seq_rm

    def seq_rm(mem, seq, p0, p1):  # llama.cpp's recurrent memory: whole sequences only
        if p0 > 0:
            return False
        return real_rm(mem, seq, p0, p1)

    monkeypatch.setattr(llama_cpp, "llama_memory_seq_rm", seq_rm)
    _, path = resolve_model("smollm2-135m")
    with LlamaCppBackend(path, n_ctx=512, n_threads=2) as backend:
        yield backend


@pytest.fixture
def old_hybrid(monkeypatch):
    """The simulated hybrid on a llama-cpp-python without the partial state calls: no checkpoints either."""
    for name in ("llama_state_seq_get_size_ext", "llama_state_seq_get_data_ext", "llama_state_seq_set_data_ext"):
        monkeypatch.delattr(llama_cpp, name)
    monkeypatch.setattr(llama_cpp, "llama_model_is_hybrid", lambda model: True)
    _, path = resolve_model("smollm2-135m")
    with LlamaCppBackend(path, n_ctx=512, n_threads=2) as backend:
        yield backend


def test_a_hybrid_target_refuses_speculation_by_name(old_hybrid):
    hybrid = old_hybrid
    assert hybrid.recurrent and not hybrid.capabilities.can_truncate and not hybrid.capabilities.checkpoints
    with pytest.raises(ConfigError, match=r"(?i)smollm2.*cannot be rolled back.*--drafter none"):
        check_fit(hybrid, NgramDrafter())


def test_a_refused_cut_prefills_the_kept_positions_again_and_plain_decoding_stays_right(hybrid):
    prompt = hybrid.tokenizer.tokenize("The capital of France is")
    first = generate(hybrid, NoDrafter(), prompt, GREEDY, max_tokens=12)
    assert hybrid.cached_tokens == (*prompt, *first.tokens[:-1])  # the turn's end cut its last token off
    hybrid.truncate(3)
    assert hybrid.cached_tokens == tuple(prompt[:3])
    again = generate(hybrid, NoDrafter(), prompt, GREEDY, max_tokens=12)
    assert again.tokens == first.tokens and again.stats.prefill_tokens == len(prompt) - 1 - 3


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory):
    path = write_tiny_qwen35(tmp_path_factory.mktemp("hybrid") / "qwen35.gguf")
    with LlamaCppBackend(path, n_ctx=256, n_threads=2) as backend:
        yield backend


def test_a_qwen35_target_rolls_back_within_its_snapshots(qwen35, tmp_path):
    assert qwen35.recurrent and qwen35.capabilities.can_truncate and qwen35.capabilities.max_rollback == RS_SNAPSHOTS
    assert not qwen35.capabilities.tree_attention
    context = [int(t) for t in np.random.default_rng(0).integers(0, 257, 40)]
    with LlamaCppBackend(qwen35.path, n_ctx=256, n_threads=2) as fresh:
        for back in (1, 5, RS_SNAPSHOTS, RS_SNAPSHOTS + 1):
            qwen35.truncate(0)
            qwen35.prefill(context[:20])
            qwen35.forward(context[20:])
            qwen35.truncate(40 - back)
            kept = len(qwen35.cached_tokens)
            # within the snapshots the cut is exact; further back the kept positions are prefilled again
            assert kept == 40 - back
            got = qwen35.forward(context[kept : 41 - back]).logits[-1]
            fresh.truncate(0)
            want = fresh.forward(context[: 41 - back]).logits[-1]
            assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max(), back


def test_a_cut_past_the_snapshots_goes_back_to_where_the_last_prompt_ended(qwen35):
    """A new turn whose prompt re-renders the previous answer (a template that drops its reasoning) cuts far
    back into it: the state saved where the last prompt ended is restored and only the kept answer tokens
    run again, not the whole conversation."""
    context = [int(t) for t in np.random.default_rng(3).integers(0, 257, 80)]
    decoded, decode = [], qwen35._decode
    with LlamaCppBackend(qwen35.path, n_ctx=256, n_threads=2) as fresh:
        for keep in (30, 33, 45):
            qwen35.truncate(0)
            qwen35.prefill(context[:30])  # the prompt
            qwen35.prompt_cached()  # as the engine says after a prompt's prefill
            for token in context[30:70]:  # the answer, a token per step
                qwen35.forward([token])
            qwen35._decode = lambda chunk, **kw: decoded.append(len(chunk)) or decode(chunk, **kw)
            try:
                qwen35.truncate(keep)
            finally:
                del qwen35._decode
            assert sum(decoded) == keep - 30 and len(qwen35.cached_tokens) == keep
            decoded.clear()
            got = qwen35.forward(context[keep : keep + 1]).logits[-1]
            fresh.truncate(0)
            want = fresh.forward(context[: keep + 1]).logits[-1]
            assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max(), keep


def test_the_engine_saves_the_state_where_a_turns_prompt_ends(qwen35):
    qwen35.truncate(0)
    prompt = [int(t) for t in np.random.default_rng(4).integers(0, 257, 30)]
    generate(qwen35, NoDrafter(), prompt, GREEDY, max_tokens=30)
    assert qwen35._turn_point.position == len(prompt) - 1  # the prompt but its pending last token


@pytest.mark.parametrize("batch", [1, 2, 5])
def test_a_cut_to_or_before_the_last_decodes_start_is_exact_too(qwen35, batch):
    """llama.cpp's snapshots are the states after each token of the last decode call: it accepts a cut of
    that whole call (a plain step's one token, a new turn's prompt diverging there) but leaves a wrong
    state; such a cut must prefill again instead."""
    context = [int(t) for t in np.random.default_rng(2).integers(0, 257, 60)]
    with LlamaCppBackend(qwen35.path, n_ctx=256, n_threads=2) as fresh:
        for back in (batch, batch + 3):
            qwen35.truncate(0)
            qwen35.prefill(context[:30])
            qwen35.forward(context[30 : 30 + batch])
            keep = 30 + batch - back
            qwen35.truncate(keep)
            got = qwen35.forward(context[keep : keep + 1]).logits[-1]
            fresh.truncate(0)
            want = fresh.forward(context[: keep + 1]).logits[-1]
            assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max(), (batch, back)


@pytest.mark.parametrize("drafter", [NgramDrafter, SuffixDrafter])
def test_greedy_speculation_on_a_hybrid_target_equals_plain(qwen35, drafter):
    prompt = [40, 41, 42, 43, 44, 45, 46, 47] * 3
    qwen35.truncate(0)
    plain = generate(qwen35, NoDrafter(), prompt, GREEDY, max_tokens=60).tokens
    qwen35.truncate(0)
    out = generate(qwen35, drafter(), prompt, GREEDY, max_tokens=60, draft_tokens=RS_SNAPSHOTS + 8)
    assert out.tokens == plain and out.stats.drafted > 0


def oracle_run(backend, right: int, max_tokens: int, draft_tokens: int):
    """Greedy answers with drafts right for ``right`` tokens and wrong after: (completion, plain tokens)."""
    from support.fakes import OracleDrafter

    prompt = [50, 51, 52, 53]
    backend.truncate(0)
    plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=max_tokens).tokens
    backend.truncate(0)
    drafter = OracleDrafter(plain, len(prompt), backend.vocab_size, right=right)
    return generate(backend, drafter, prompt, GREEDY, max_tokens=max_tokens, draft_tokens=draft_tokens), plain


def test_drafts_on_a_hybrid_target_are_capped_at_its_rollback(qwen35):
    """A draft right for 2 tokens and wrong after: rejected tails must fit the snapshots, so no draft is longer."""
    out, plain = oracle_run(qwen35, 2, 50, RS_SNAPSHOTS + 8)
    assert out.tokens == plain and out.stats.accepted > 0
    assert len(out.stats.drafted_at) == RS_SNAPSHOTS


def test_snapshots_are_fewer_where_memory_is_short_and_the_cap_follows(qwen35, monkeypatch, tmp_path):
    import localspec.backends.llama_cpp.backend as llama

    per = qwen35.info.snapshot_bytes / RS_SNAPSHOTS
    assert per > 0
    monkeypatch.setattr(llama, "available_memory", lambda: 5.5 * per / llama.RS_SHARE)  # room for 5 of them
    path = write_tiny_qwen35(tmp_path / "qwen35.gguf")
    with LlamaCppBackend(path, n_ctx=256, n_threads=2) as short:
        assert short.capabilities.max_rollback == 5 and short.info.snapshot_bytes == int(5 * per)
        out, plain = oracle_run(short, 2, 40, RS_SNAPSHOTS)
        assert out.tokens == plain and len(out.stats.drafted_at) == 5


@pytest.fixture(scope="module")
def checkpointed(tmp_path_factory):
    """The tiny qwen35 made without snapshots, as llama.cpp makes Mamba, RWKV or Qwen3-Next: checkpoints."""
    import localspec.backends.llama_cpp.backend as llama

    path = write_tiny_qwen35(tmp_path_factory.mktemp("checkpoint") / "qwen35.gguf")
    saved, llama.RS_SNAPSHOTS = llama.RS_SNAPSHOTS, 0
    try:
        backend = LlamaCppBackend(path, n_ctx=256, n_threads=2)
    finally:
        llama.RS_SNAPSHOTS = saved  # read when a context is made: other tests' models keep their snapshots
    with backend:
        yield backend


def test_without_snapshots_a_cut_within_a_verify_window_restores_the_saved_state(checkpointed, qwen35):
    b = checkpointed
    assert b.capabilities.checkpoints and b.capabilities.max_rollback is None and b.capabilities.can_truncate
    context = [int(t) for t in np.random.default_rng(1).integers(0, 257, 60)]
    for back in (1, 7, 30):  # any depth within the window, past where 16 snapshots reach
        b.truncate(0)
        b.prefill(context[:20])
        b.forward(context[20:])  # a 40-token window
        b.truncate(60 - back)
        assert len(b.cached_tokens) == 60 - back
        got = b.forward(context[60 - back : 61 - back]).logits[-1]
        qwen35.truncate(0)
        want = qwen35.forward(context[: 61 - back]).logits[-1]
        assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max(), back


def test_greedy_speculation_with_checkpoints_equals_plain_and_drafts_past_16(checkpointed):
    out, plain = oracle_run(checkpointed, 18, 80, 24)
    assert out.tokens == plain and out.stats.accepted > 0 and len(out.stats.drafted_at) == 24


def test_a_hybrid_draft_model_cuts_its_drafts_back_from_a_saved_state(qwen35, tmp_path):
    """A recurrent draft model drafts token by token, so its rejected drafts lie before its last decode call,
    past what snapshots restore: it saves its state where drafting starts and returns there, instead of
    prefilling its whole context again every step."""
    from localspec.drafters.draft_model import DraftModelDrafter
    from localspec.engine.speclen import FixedK

    with LlamaCppBackend(write_tiny_qwen35(tmp_path / "draft.gguf", seed=5), n_ctx=256, n_threads=2) as draft:
        drafter = DraftModelDrafter(draft, qwen35.vocab_size, qwen35.vocab_size, seed=0)
        fed, real = [], draft.prefill
        draft.prefill = lambda tokens, progress=None: (fed.append(len(tokens)), real(tokens, progress))[1]
        prompt = [60, 61, 62, 63, 64, 65]
        qwen35.truncate(0)
        plain = generate(qwen35, NoDrafter(), prompt, GREEDY, max_tokens=40).tokens
        qwen35.truncate(0)
        out = generate(qwen35, drafter, prompt, GREEDY, max_tokens=40, draft_tokens=FixedK(4))
    assert out.tokens == plain and out.stats.drafted > out.stats.accepted
    assert sum(fed) <= len(prompt) + 2 * 40, fed


def test_a_loaded_conversation_state_is_cut_without_the_snapshots_of_another(qwen35):
    """llama.cpp restores a saved state without its snapshots: a cut right after loading must not use the
    snapshots of whatever ran before."""
    a = [int(t) for t in np.random.default_rng(3).integers(0, 257, 40)]
    b = [int(t) for t in np.random.default_rng(4).integers(0, 257, 40)]
    qwen35.truncate(0)
    qwen35.prefill(a[:20])
    qwen35.forward(a[20:])
    saved = qwen35.save_state()
    qwen35.truncate(0)
    qwen35.prefill(b[:30])
    qwen35.forward(b[30:])  # the snapshots now hold b's states
    qwen35.load_state(a, saved)
    qwen35.truncate(37)
    got = qwen35.forward(a[37:38]).logits[-1]
    qwen35.truncate(0)
    want = qwen35.forward(a[:38]).logits[-1]
    assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max()
