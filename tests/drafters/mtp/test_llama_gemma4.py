"""The Gemma-4 assistant mode of `--drafter mtp` (`--mtp-assistant FILE.gguf`) on llama.cpp, with a tiny
Gemma-4 target and tiny assistants built in the test (tests/support/tiny_gemma4.py): an assistant whose drafts are
known exactly (every draft right; or the pending token repeated, which checks the row it is handed), greedy
output equal to plain decoding over two turns, and pairs that do not belong together refused by name."""

import pytest
from support.drafts import record_first_drafts
from support.tiny_gemma4 import write_tiny_assistant, write_tiny_gemma4
from support.tiny_hybrid import write_tiny_qwen35

from localspec.backends.llama_cpp.backend import LlamaCppBackend
from localspec.drafters.base import NoDrafter
from localspec.drafters.context import DrafterContext
from localspec.drafters.mtp.drafter import MtpOptions, build
from localspec.engine.loop import generate
from localspec.engine.speclen import FixedK
from localspec.errors import ConfigError, ModelError
from localspec.sampling import SamplingParams

pytestmark = pytest.mark.model
GREEDY = SamplingParams(temperature=0)
PROMPT = [50, 51, 52, 53, 54, 55]


def pair(tmp_path, trunk, mode):
    target = LlamaCppBackend(write_tiny_gemma4(tmp_path / f"gemma4-{trunk}.gguf", trunk=trunk), n_ctx=256, n_threads=2)
    assistant = write_tiny_assistant(tmp_path / f"assistant-{mode}.gguf", mode=mode)
    return target, build(target, MtpOptions(assistant=str(assistant)), DrafterContext(seed=0))


def test_a_token_reading_assistant_drafts_every_token_of_an_identity_target(tmp_path):
    target, drafter = pair(tmp_path, "identity", "token")
    with target:
        plain = generate(target, NoDrafter(), PROMPT, GREEDY, max_tokens=40)
        target.truncate(0)
        out = generate(target, drafter, PROMPT, GREEDY, max_tokens=40, draft_tokens=FixedK(4))
        drafter.close()
    assert out.tokens == plain.tokens and out.stats.accepted == out.stats.drafted > 0
    assert "assistant" in drafter.describe()


def test_a_hidden_reading_assistant_gets_the_targets_row_of_the_position_before(tmp_path):
    target, drafter = pair(tmp_path, "identity", "hidden")
    pairs = record_first_drafts(drafter)
    with target:
        generate(target, drafter, PROMPT, GREEDY, max_tokens=30, draft_tokens=FixedK(2))
        drafter.close()
    assert len(pairs) >= 10 and all(pending == first for pending, first in pairs[1:])


@pytest.mark.parametrize("draft_tokens", [FixedK(4), "auto"])
def test_greedy_output_with_an_assistant_equals_plain_over_two_turns(tmp_path, draft_tokens):
    target, drafter = pair(tmp_path, "random", "random")
    with target:
        first = generate(target, NoDrafter(), PROMPT, GREEDY, max_tokens=30).tokens
        second_prompt = PROMPT + list(first) + [60, 61]
        second = generate(target, NoDrafter(), second_prompt, GREEDY, max_tokens=30).tokens
        target.truncate(0)
        got = generate(target, drafter, PROMPT, GREEDY, max_tokens=30, draft_tokens=draft_tokens)
        again = generate(target, drafter, second_prompt, GREEDY, max_tokens=30, draft_tokens=draft_tokens)
        drafter.close()
    assert got.tokens == first and again.tokens == second


def test_pairs_that_do_not_belong_together_are_refused_by_name(tmp_path):
    assistant = write_tiny_assistant(tmp_path / "assistant.gguf")
    gemma = write_tiny_gemma4(tmp_path / "gemma4.gguf")
    not_assistant = pytest.raises(ModelError, match=r"gemma4.gguf is a 'gemma4' model, not a Gemma-4 assistant")
    with LlamaCppBackend(gemma, n_ctx=256, n_threads=2) as target, not_assistant:
        build(target, MtpOptions(assistant=str(gemma)), DrafterContext())
    other = write_tiny_qwen35(tmp_path / "qwen35.gguf")
    another = pytest.raises(ConfigError, match=r"assistant.gguf drafts for a Gemma-4 model.*belongs to another")
    with LlamaCppBackend(other, n_ctx=256, n_threads=2) as target, another:
        build(target, MtpOptions(assistant=str(assistant)), DrafterContext())


def test_sampled_assistant_drafts_keep_the_targets_distribution(tmp_path):
    """At T > 0 the assistant's drafts carry its q rows: the first two tokens of sampled answers follow the
    target's exact distribution (chi-square), with drafts both accepted and rejected."""
    import numpy as np
    from support.distribution import chi_square_p
    from support.llama_mtp import exact_pairs

    target, drafter = pair(tmp_path, "random", "token")
    sampling = SamplingParams(temperature=1.0, top_k=6, top_p=1.0, min_p=0.0)
    with target:
        dist = exact_pairs(target, PROMPT, sampling)
        rng, counts, accepted = np.random.default_rng(5), {}, set()
        for _ in range(1500):
            out = generate(target, drafter, PROMPT, sampling, max_tokens=2, draft_tokens=FixedK(2), rng=rng)
            counts[out.tokens[:2]] = counts.get(out.tokens[:2], 0) + 1
            accepted.add(out.stats.accepted)
        drafter.close()
    assert {0, 1} <= accepted
    assert chi_square_p(counts, dist) > 1e-3


def test_an_assistant_needs_only_the_last_prompt_row_of_a_prompt_cached_without_it(tmp_path):
    """The assistant reads the target's cache and keeps none of its own: a prompt cached by plain decoding
    is not prefilled again for it, only its last position (whose row it drafts from)."""
    target, drafter = pair(tmp_path, "identity", "token")
    with target:
        generate(target, NoDrafter(), PROMPT, GREEDY, max_tokens=8)
        out = generate(target, drafter, PROMPT, GREEDY, max_tokens=20, draft_tokens=FixedK(4))
        drafter.close()
    assert out.stats.prefill_tokens == 1 and out.stats.accepted == out.stats.drafted > 0
