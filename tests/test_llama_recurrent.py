"""Recurrent and hybrid targets on llama.cpp (Mamba, RWKV, Qwen3.5, Granite-4): their state is not cut back
by position, except within the snapshots llama.cpp keeps for some architectures (n_rs_seq). A tiny random
Qwen3.5-layout GGUF (tests/tiny_hybrid.py) covers the rollback; an architecture without snapshots is
simulated on SmolLM2 (reported hybrid, partial removal refused as llama.cpp refuses it)."""

import llama_cpp
import numpy as np
import pytest
from tiny_hybrid import write_tiny_qwen35

from localspec.backends.llama_cpp import RS_SNAPSHOTS, LlamaCppBackend
from localspec.drafters.base import NoDrafter, check_fit
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.suffix import SuffixDrafter
from localspec.engine import generate
from localspec.errors import ConfigError
from localspec.registry import resolve_model
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


def test_a_hybrid_target_refuses_speculation_by_name(hybrid):
    assert hybrid.recurrent and not hybrid.capabilities.can_truncate
    with pytest.raises(ConfigError, match=r"(?i)smollm2.*cannot be rolled back.*--drafter none"):
        check_fit(hybrid, NgramDrafter())


def test_a_refused_cut_prefills_the_kept_positions_again_and_plain_decoding_stays_right(hybrid):
    prompt = hybrid.tokenize("The capital of France is")
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
    assert qwen35.recurrent and qwen35.capabilities.can_truncate and qwen35.max_rollback == RS_SNAPSHOTS
    assert not qwen35.capabilities.tree_attention
    context = [int(t) for t in np.random.default_rng(0).integers(0, 257, 40)]
    with LlamaCppBackend(qwen35.path, n_ctx=256, n_threads=2) as fresh:
        for back in (1, 5, RS_SNAPSHOTS, RS_SNAPSHOTS + 1):
            qwen35.truncate(0)
            qwen35.prefill(context[:20])
            qwen35.forward(context[20:])
            qwen35.truncate(40 - back)
            kept = qwen35.cached_len
            # within the snapshots the cut is exact; further back the kept positions are prefilled again
            assert kept == 40 - back
            got = qwen35.forward(context[kept : 41 - back]).logits[-1]
            fresh.truncate(0)
            want = fresh.forward(context[: 41 - back]).logits[-1]
            assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max(), back


@pytest.mark.parametrize("drafter", [NgramDrafter, SuffixDrafter])
def test_greedy_speculation_on_a_hybrid_target_equals_plain(qwen35, drafter):
    prompt = [40, 41, 42, 43, 44, 45, 46, 47] * 3
    qwen35.truncate(0)
    plain = generate(qwen35, NoDrafter(), prompt, GREEDY, max_tokens=60).tokens
    qwen35.truncate(0)
    out = generate(qwen35, drafter(), prompt, GREEDY, max_tokens=60, draft_tokens=RS_SNAPSHOTS + 8)
    assert out.tokens == plain and out.stats.drafted > 0


def test_drafts_on_a_hybrid_target_are_capped_at_its_rollback(qwen35):
    """A draft right for 2 tokens and wrong after: rejected tails must fit the snapshots, so no draft is longer."""
    from fakes import OracleDrafter

    prompt = [50, 51, 52, 53]
    qwen35.truncate(0)
    plain = generate(qwen35, NoDrafter(), prompt, GREEDY, max_tokens=50).tokens
    qwen35.truncate(0)
    drafter = OracleDrafter(plain, len(prompt), qwen35.vocab_size, right=2)
    out = generate(qwen35, drafter, prompt, GREEDY, max_tokens=50, draft_tokens=RS_SNAPSHOTS + 8)
    assert out.tokens == plain and out.stats.accepted > 0
    assert len(out.stats.drafted_at) == RS_SNAPSHOTS
