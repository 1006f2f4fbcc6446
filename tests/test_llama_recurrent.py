"""Recurrent and hybrid targets on llama.cpp (Mamba, RWKV, Qwen3.5, Granite-4): their state is not cut back
by position. No downloadable model covers them here, so llama.cpp's answers are simulated on SmolLM2: the
model reported hybrid, and partial removal refused as llama.cpp refuses it for a recurrent state."""

import llama_cpp
import pytest

from localspec.backends.llama_cpp import LlamaCppBackend
from localspec.drafters.base import NoDrafter, check_fit
from localspec.drafters.ngram import NgramDrafter
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


def test_a_refused_cut_starts_the_sequence_over_and_plain_decoding_stays_right(hybrid):
    prompt = hybrid.tokenize("The capital of France is")
    first = generate(hybrid, NoDrafter(), prompt, GREEDY, max_tokens=12).tokens
    assert hybrid.cached_tokens == ()  # the end of the turn could not cut the last token off: dropped whole
    hybrid.prefill(prompt[:3])
    hybrid.truncate(2)
    assert hybrid.cached_tokens == ()
    again = generate(hybrid, NoDrafter(), prompt, GREEDY, max_tokens=12).tokens  # prefilled from the start
    assert again == first
