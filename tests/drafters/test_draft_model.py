"""The draft-model drafter on scripted models: exact greedy output, its own cache kept in step with the
target's context without re-prefilling, and the rejection rule against exact matching."""

import numpy as np
import pytest
from support.draft_machine import CPU_SHAPE, GPU_SHAPE, machine  # noqa: F401
from support.fakes import ScriptedBackend, TimedBackend

from localspec.drafters.base import NoDrafter
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.engine.loop import generate
from localspec.engine.speclen import AdaptiveK
from localspec.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)
V = 16


def drafter_for(seed, target_vocab=V, draft_vocab=V, scale=2.0):
    draft = ScriptedBackend(vocab_size=draft_vocab, scale=scale, seed=seed)
    drafter = DraftModelDrafter(draft, min(draft_vocab, target_vocab), target_vocab, seed=1)
    draft.prefilled.clear()  # what it was fed to time it at load
    draft.forward_calls.clear()
    return drafter, draft


def test_greedy_output_is_the_targets_whatever_the_draft_model():
    target = ScriptedBackend(vocab_size=V, seed=0)
    plain = generate(target, NoDrafter(), [1, 2, 3], GREEDY, max_tokens=120).tokens
    for seed, expect_high in ((0, True), (9, False)):  # the same model drafting for itself; a different one
        drafter, _ = drafter_for(seed)
        out = generate(target, drafter, [1, 2, 3], GREEDY, max_tokens=120, draft_tokens=4)
        assert out.tokens == plain
        assert (out.stats.acceptance_rate == 1.0) == expect_high


def test_draft_cache_follows_the_context_without_re_prefilling():
    target = ScriptedBackend(vocab_size=V, seed=0)
    drafter, draft = drafter_for(9)
    prompt = list(range(10)) * 3
    out = generate(target, drafter, prompt, GREEDY, max_tokens=80, draft_tokens=3)
    assert draft.prefilled == [len(prompt) - 1]  # the prompt once (lazily, at the first proposal)
    assert max(draft.forward_calls) <= 2  # afterwards only the bonus token (and the last accepted one)
    fed = sum(draft.prefilled) + sum(draft.forward_calls)
    assert fed < len(prompt) + out.stats.generated + out.stats.drafted  # never the context again
    # turn 2 continues the conversation: only the new tokens are fed
    prompt2 = prompt + list(out.tokens) + [4, 5, 6]
    before = sum(draft.prefilled)
    generate(target, drafter, prompt2, GREEDY, max_tokens=20, draft_tokens=3)
    assert sum(draft.prefilled) - before <= 3 + 1


def test_rejection_sampling_accepts_more_than_exact_matching():
    target = ScriptedBackend(vocab_size=V, seed=0, scale=1.0)
    drafter, _ = drafter_for(9, scale=1.0)
    sampling = SamplingParams(temperature=0.7, top_k=0, top_p=1.0, min_p=0.0)
    out = generate(target, drafter, [1, 2, 3], sampling, max_tokens=300, draft_tokens=3, rng=np.random.default_rng(0))
    rules = out.stats.rule_comparison()
    assert rules["positions"] > 100
    assert rules["rejection_sampling"] > rules["exact_match"] + 0.05
    # the realised acceptance of the examined positions agrees with the rule's expected acceptance
    assert abs(out.stats.accepted / rules["positions"] - rules["rejection_sampling"]) < 0.06


def test_padding_ids_of_a_bigger_vocabulary_are_never_drafted():
    target = ScriptedBackend(vocab_size=V, seed=0)
    drafter, _ = drafter_for(9, target_vocab=V, draft_vocab=V + 8)  # the draft pads 8 more ids
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    out = generate(target, drafter, [1, 2, 3], sampling, max_tokens=200, draft_tokens=4, rng=np.random.default_rng(1))
    assert max(out.tokens) < V and out.stats.drafted > 0


# this project's 2-core CPU (Qwen 1.5B: k=4 2.5x, k=8 5.5x, k=16 6.8x a step) and a GPU (a window ~ a step)


def timed_turn(
    clock, target_step, draft_step, draft_prefill, shape, draft_seed, drafter_name="draft", known_costs=True
):
    """One 300-token answer to a 200-token prompt on a simulated machine: (completion, seconds of prefill
    and decode, the draft model). known_costs: the controller starts from the machine's verify-cost curve,
    as a session does that loads what earlier ones measured."""
    window = machine(target_step, shape)
    policy = AdaptiveK()
    if known_costs:
        sizes = (1, 2, 3, 5, 9, 17, 33, 65)
        policy.load_costs({"verify_s": {str(n): window(n) for n in sizes}, "count": {str(n): 9 for n in sizes}})
    target = TimedBackend(clock, window, target_step / 4, vocab_size=V, seed=0)
    draft = TimedBackend(clock, machine(draft_step, shape), draft_prefill, vocab_size=V, seed=draft_seed)
    drafter = DraftModelDrafter(draft, V, V, seed=1) if drafter_name == "draft" else NoDrafter()
    draft.prefilled.clear()
    draft.forward_calls.clear()
    prompt = [(i * 7) % V for i in range(200)]
    start = clock.now
    out = generate(target, drafter, prompt, GREEDY, max_tokens=300, draft_tokens=policy)
    return out, clock.now - start, draft


@pytest.mark.parametrize("known_costs", [True, False])
def test_a_costly_draft_model_that_does_not_pay_is_fed_nothing(virtual_clock, known_costs):
    """The 0.5B -> 1.5B pair on 2 cores: a draft step costs a third of a target step, a catch-up token 5%
    of one. Drafting cannot pay here, so the draft model must not even be caught up on the prompt."""
    plain, plain_s, _ = timed_turn(virtual_clock, 0.09, 0.03, 0.0045, CPU_SHAPE, 9, "none")
    out, seconds, draft = timed_turn(virtual_clock, 0.09, 0.03, 0.0045, CPU_SHAPE, 9, known_costs=known_costs)
    assert out.tokens == plain.tokens
    assert draft.fed() == 0 and out.stats.drafter["catchup_tokens"] == 0
    assert seconds <= plain_s / 0.97


def test_on_a_fast_machine_the_draft_model_is_used_where_it_pays(virtual_clock):
    """A GPU-like machine where a window costs about a step and the draft model a twentieth of one: the same
    controller catches the draft model up and drafts long."""
    plain, plain_s, _ = timed_turn(virtual_clock, 0.01, 0.0005, 0.00005, GPU_SHAPE, 0, "none")
    out, seconds, draft = timed_turn(virtual_clock, 0.01, 0.0005, 0.00005, GPU_SHAPE, 0)
    assert out.tokens == plain.tokens
    assert draft.fed() > 0 and out.stats.speclen["mean_k"] > 2
    assert seconds < 0.6 * plain_s
