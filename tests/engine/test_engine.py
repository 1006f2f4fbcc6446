"""The generate loop with scripted fakes: exactness, cache invariant, stopping, overflow."""

import numpy as np
import pytest
from support.fakes import OracleDrafter, RandomDrafter, ScriptedBackend

from localspec.drafters.base import Drafter, NoDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.loop import generate, stream_generate
from localspec.errors import ConfigError, ContextOverflow
from localspec.sampling import SamplingParams
from localspec.types import Draft

GREEDY = SamplingParams(temperature=0)
PROMPTS = [
    [1, 2, 3],
    [4, 4, 4, 4],
    [0],
    [5, 6, 7, 8, 9, 10, 11, 5, 6],
    [3, 1, 4, 1, 5, 9, 2, 6],
    [7, 7, 1, 7, 7],
    [2, 9],
    [11, 10, 9, 8, 7, 6, 5, 4, 3],
]


def plain(backend, prompt, n=40):
    return generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=n).tokens


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_output_is_unchanged_by_any_drafter(prompt):
    backend = ScriptedBackend()
    reference = plain(backend, prompt)
    k = 4
    drafters = [
        NgramDrafter(1, 3),
        RandomDrafter(backend.vocab_size, seed=len(prompt)),
        OracleDrafter(reference, len(prompt), backend.vocab_size),
    ]
    drafters += [OracleDrafter(reference, len(prompt), backend.vocab_size, right=j) for j in range(k + 1)]
    for drafter in drafters:
        backend.truncate(0)
        out = generate(backend, drafter, prompt, GREEDY, max_tokens=len(reference), draft_tokens=k)
        assert out.tokens == reference, f"{drafter.name} (right={getattr(drafter, 'right', '-')})"


def test_scripted_drafter_acceptance_is_exactly_what_it_gets_right():
    backend = ScriptedBackend()
    prompt = [1, 2, 3]
    reference = plain(backend, prompt, n=41)
    for j in range(5):
        backend.truncate(0)
        out = generate(
            backend,
            OracleDrafter(reference, 3, backend.vocab_size, right=j),
            prompt,
            GREEDY,
            max_tokens=41,
            draft_tokens=4,
        )
        rates = out.stats.acceptance_by_position()
        assert out.tokens == reference
        assert rates[:j] == [1.0] * j and all(r == 0 for r in rates[j:])
        assert out.stats.mean_accepted_length == pytest.approx(1 + out.stats.accepted / out.stats.steps)


def test_perfect_drafter_needs_fewer_forward_passes():
    backend = ScriptedBackend()
    reference = plain(backend, [1, 2], n=40)
    backend.truncate(0)
    backend.forward_calls.clear()
    out = generate(
        backend, OracleDrafter(reference, 2, backend.vocab_size), [1, 2], GREEDY, max_tokens=40, draft_tokens=7
    )
    assert out.tokens == reference
    assert out.stats.steps == 5 and max(backend.forward_calls) == 8
    assert out.stats.acceptance_rate == 1.0


def test_cache_holds_context_but_pending_token_after_turn():
    backend = ScriptedBackend()
    prompt = [1, 2, 3, 4]
    out = generate(backend, NgramDrafter(1, 3), prompt, GREEDY, max_tokens=30)
    assert backend.cached_tokens == tuple(prompt + list(out.tokens))[:-1]


def test_next_turn_prefills_only_new_tokens():
    backend = ScriptedBackend()
    prompt = [1, 2, 3, 4, 5]
    out = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=10)
    turn2 = prompt + list(out.tokens) + [6, 7, 8]
    backend.prefilled.clear()
    out2 = generate(backend, NoDrafter(), turn2, GREEDY, max_tokens=5)
    assert backend.prefilled == [3]  # the pending answer token + 6, 7; 8 goes in the first step
    assert out2.stats.prefill_tokens == 3 and out2.stats.prompt_tokens == len(turn2)


class ExplodingDrafter(Drafter):
    name = "exploding"

    def __init__(self, after):
        self.after, self.calls = after, 0

    def propose(self, context, max_tokens):
        self.calls += 1
        if self.calls > self.after:
            raise KeyboardInterrupt
        return Draft.chain([(context[-1] + 1) % 12] * max_tokens)


def test_interrupt_mid_turn_leaves_a_usable_cache():
    backend = ScriptedBackend()
    prompt = [3, 1, 4, 1, 5]
    reference = list(plain(backend, prompt, n=30))
    backend.truncate(0)
    emitted = []
    with pytest.raises(KeyboardInterrupt):
        for event in stream_generate(backend, ExplodingDrafter(after=3), prompt, GREEDY, max_tokens=30):
            emitted.extend(event.tokens)
    assert emitted == reference[: len(emitted)] and emitted
    assert backend.cached_tokens == tuple(prompt + emitted)[:-1]
    # the next turn continues from the cache and still gives the plain output
    rest = generate(backend, NoDrafter(), prompt + emitted, GREEDY, max_tokens=30 - len(emitted))
    assert list(rest.tokens) == reference[len(emitted) :]


def test_closing_the_stream_early_rolls_back_rejected_tokens():
    backend = ScriptedBackend()
    stream = stream_generate(backend, RandomDrafter(12), [1, 2, 3], GREEDY, max_tokens=50, draft_tokens=6)
    emitted = list(next(stream).tokens) + list(next(stream).tokens)
    stream.close()
    assert backend.cached_tokens == tuple([1, 2, 3] + emitted)[:-1]


def test_stops_on_end_of_generation_token():
    backend = ScriptedBackend(vocab_size=6, eog=5, scale=1.0)
    for prompt in PROMPTS:
        prompt = [t % 5 for t in prompt]
        backend.truncate(0)
        out = generate(
            backend,
            NgramDrafter(1, 2),
            prompt,
            SamplingParams(temperature=1.0),
            max_tokens=200,
            rng=np.random.default_rng(0),
        )
        if out.finish_reason == "stop":
            assert out.tokens[-1] == 5 and 5 not in out.tokens[:-1]
            assert "\x00" not in out.text and len(out.text) == len(out.tokens) - 1
        else:
            assert len(out.tokens) == 200


def test_max_tokens_is_exact_even_mid_draft():
    backend = ScriptedBackend()
    reference = plain(backend, [1], n=23)
    backend.truncate(0)
    out = generate(backend, OracleDrafter(reference, 1, 12), [1], GREEDY, max_tokens=23, draft_tokens=8)
    assert out.tokens == reference and out.finish_reason == "length"


def test_stop_string_is_not_shown_and_ends_the_turn():
    backend = ScriptedBackend()
    full = generate(backend, NoDrafter(), [1, 2], GREEDY, max_tokens=30).text
    stop = full[10:13]
    backend.truncate(0)
    out = generate(backend, NgramDrafter(1, 3), [1, 2], GREEDY, max_tokens=30, stop=[stop])
    assert out.finish_reason == "stop"
    assert out.text == full[: full.index(stop)]


def test_context_full_ends_the_answer_cleanly():
    backend = ScriptedBackend(n_ctx=20)
    out = generate(backend, NgramDrafter(1, 3), list(range(10)), GREEDY, max_tokens=100, draft_tokens=8)
    assert out.finish_reason == "context"
    assert len(out.tokens) == 11 and max(backend.forward_calls) <= 11
    assert len(backend.cached_tokens) <= backend.n_ctx


def test_prompt_longer_than_context_is_a_clear_error():
    backend = ScriptedBackend(n_ctx=16)
    with pytest.raises(ContextOverflow, match="16"):
        generate(backend, NoDrafter(), list(range(10)) * 2, GREEDY)


@pytest.mark.parametrize("k", [0, -3, "two"])
def test_draft_tokens_must_be_positive(k):
    with pytest.raises(ConfigError, match="draft-tokens"):
        generate(ScriptedBackend(), NoDrafter(), [1], GREEDY, draft_tokens=k)


def test_seeded_sampling_is_reproducible():
    runs = []
    for _ in range(2):
        backend = ScriptedBackend()
        runs.append(
            generate(
                backend,
                NgramDrafter(1, 3),
                [1, 2, 3],
                SamplingParams(temperature=1.0),
                max_tokens=40,
                rng=np.random.default_rng(7),
            ).tokens
        )
    assert runs[0] == runs[1]
