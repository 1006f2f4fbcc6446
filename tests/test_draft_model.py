"""The draft-model drafter on scripted models: exact greedy output, its own cache kept in step with the
target's context without re-prefilling, and the rejection rule against exact matching."""
import numpy as np

from fakes import ScriptedBackend
from localspec.drafters.base import NoDrafter
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.engine import generate
from localspec.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)
V = 16


def drafter_for(seed, target_vocab=V, draft_vocab=V, scale=2.0):
    draft = ScriptedBackend(vocab_size=draft_vocab, scale=scale, seed=seed)
    return DraftModelDrafter(draft, min(draft_vocab, target_vocab), target_vocab, seed=1), draft


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
    out = generate(target, drafter, [1, 2, 3], sampling, max_tokens=300, draft_tokens=3,
                   rng=np.random.default_rng(0))
    rules = out.stats.rule_comparison()
    assert rules["positions"] > 100
    assert rules["rejection_sampling"] > rules["exact_match"] + 0.05
    # the realised acceptance of the examined positions agrees with the rule's expected acceptance
    assert abs(out.stats.accepted / rules["positions"] - rules["rejection_sampling"]) < 0.06


def test_padding_ids_of_a_bigger_vocabulary_are_never_drafted():
    target = ScriptedBackend(vocab_size=V, seed=0)
    drafter, _ = drafter_for(9, target_vocab=V, draft_vocab=V + 8)  # the draft pads 8 more ids
    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    out = generate(target, drafter, [1, 2, 3], sampling, max_tokens=200, draft_tokens=4,
                   rng=np.random.default_rng(1))
    assert max(out.tokens) < V and out.stats.drafted > 0
