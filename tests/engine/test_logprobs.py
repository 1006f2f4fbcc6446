"""Log-probabilities of speculated tokens are the target's own, read from the verify row that decided each token:
equal to what plain decoding reports, for chains, trees and drafts with q, greedy and sampled."""

import numpy as np
import pytest
from support.fakes import DistributionDrafter, OracleTreeDrafter, ScriptedBackend, ScriptedTreeBackend

from localspec.drafters.base import NoDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.loop import generate, stream_generate
from localspec.sampling import SamplingParams

PROMPT = [1, 2, 3, 1, 2, 3, 1, 2]


def by_hand(backend, context: list[int], tokens, top: int):
    """log-softmax of the scripted model's row after each prefix, computed here without the engine."""
    out = []
    for token in tokens:
        row = backend.logits_after(context).astype(np.float64)
        logp = row - (row.max() + np.log(np.exp(row - row.max()).sum()))
        order = sorted(range(len(row)), key=lambda i: (-logp[i], i))[:top]
        out.append((token, logp[token], [(i, logp[i]) for i in order]))
        context = [*context, token]
    return out


def entries(backend, drafter, sampling, top, seed=3, max_tokens=40):
    events = list(
        stream_generate(backend, drafter, PROMPT, sampling, max_tokens=max_tokens, logprobs=top,
                        draft_tokens=6, rng=np.random.default_rng(seed))
    )  # fmt: skip
    assert all(len(e.logprobs) == len(e.tokens) for e in events)
    return [x for e in events for x in e.logprobs], [t for e in events for t in e.tokens]


def check(backend, found, tokens, top):
    expected = by_hand(backend, list(PROMPT), tokens, top)
    assert [e.token for e in found] == tokens
    for entry, (_, logp, best) in zip(found, expected, strict=True):
        assert entry.logprob == pytest.approx(logp, abs=1e-5)
        assert [t for t, _ in entry.top] == [t for t, _ in best]
        assert [lp for _, lp in entry.top] == pytest.approx([lp for _, lp in best], abs=1e-5)
        assert entry.logprob <= 0 and (not best or entry.top[0][1] >= entry.logprob)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_speculated_tokens_report_the_targets_own_logprobs(temperature):
    backend = ScriptedBackend(vocab_size=12, order=1, scale=3.0)
    sampling = SamplingParams(temperature=temperature)
    found, tokens = entries(backend, NgramDrafter(1, 3), sampling, top=3)
    check(backend, found, tokens, 3)
    plain_backend = ScriptedBackend(vocab_size=12, order=1, scale=3.0)
    plain, plain_tokens = entries(plain_backend, NoDrafter(), sampling, top=3)
    assert plain_tokens == tokens  # the same answer (greedy; sampled: the same seed's streams) ...
    scores = [(e.token, e.logprob, e.top) for e in found]
    assert [(e.token, e.logprob, e.top) for e in plain] == scores  # ... and the same scores
    assert backend.forward_calls != plain_backend.forward_calls  # and speculation did verify windows


def test_tree_branches_report_the_row_of_their_own_branch():
    reference = generate(ScriptedTreeBackend(vocab_size=16), NoDrafter(), PROMPT, SamplingParams(temperature=0),
                         max_tokens=30).tokens  # fmt: skip
    backend = ScriptedTreeBackend(vocab_size=16)
    drafter = OracleTreeDrafter(reference, len(PROMPT), 16, seed=4)  # the right token is often not the first child
    found, tokens = entries(backend, drafter, SamplingParams(temperature=0), top=2, max_tokens=30)
    assert tokens == list(reference)
    check(backend, found, tokens, 2)


def test_drafts_with_q_and_zero_alternatives():
    backend = ScriptedBackend(vocab_size=10, order=2)
    found, tokens = entries(backend, DistributionDrafter(10, 4), SamplingParams(temperature=1.0), top=0)
    check(backend, found, tokens, 0)
    assert all(e.top == () for e in found)


def test_no_logprobs_unless_asked():
    backend = ScriptedBackend(vocab_size=12)
    events = list(stream_generate(backend, NgramDrafter(1, 3), PROMPT, SamplingParams(temperature=0), max_tokens=8))
    assert all(e.logprobs is None for e in events)
