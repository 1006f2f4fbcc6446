"""Speculative sampling must reproduce the target's distribution exactly (chi-square on seeded samples).

The scripted backend has known distributions, so the exact probability of every 3-token answer is
computed from the same sampler and compared with what the engine emits with drafts of 2 tokens (so
acceptance, rejection at either position, residual sampling and the bonus token all occur).
"""

import itertools

import numpy as np
import pytest
from fakes import DistributionDrafter, ScriptedBackend, ScriptedTreeBackend, TreeDrafter
from scipy.stats import chisquare

from localspec.drafters.base import NoDrafter
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.loop import generate
from localspec.sampling import SamplingParams

V, N, SAMPLES, PROMPT = 6, 3, 20_000, [0, 1, 2, 1, 0, 1]
SETTINGS = [
    SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=0.7, top_k=0, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=1.5, top_k=3, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=1.0, top_k=0, top_p=0.8, min_p=0.05),
]


def exact_distribution(backend, sampling):
    dist = {}
    for seq in itertools.product(range(V), repeat=N):
        p, ctx = 1.0, list(PROMPT)
        for t in seq:
            p *= sampling.probs(backend.logits_after(ctx))[0, t]
            ctx.append(t)
        dist[seq] = p
    return dist


def chi_square_p(samples, dist):
    cells = sorted(dist, key=dist.get, reverse=True)
    observed = np.array([samples.get(c, 0) for c in cells], dtype=float)
    expected = np.array([dist[c] for c in cells]) * sum(samples.values())
    assert observed[expected == 0].sum() == 0, "emitted a sequence the target gives probability 0"
    big = expected >= 5  # pool rare cells so every expected count is at least 5
    obs = np.append(observed[big], observed[~big & (expected > 0)].sum())
    exp = np.append(expected[big], expected[~big & (expected > 0)].sum())
    keep = exp > 0
    return chisquare(obs[keep], exp[keep] * obs[keep].sum() / exp[keep].sum()).pvalue


def sample_answers(backend, make_drafter, sampling, seed):
    rng = np.random.default_rng(seed)
    counts = {}
    drafter = make_drafter()
    for _ in range(SAMPLES):
        out = generate(backend, drafter, PROMPT, sampling, max_tokens=N, draft_tokens=2, rng=rng)
        counts[out.tokens] = counts.get(out.tokens, 0) + 1
    return counts, drafter


DRAFTERS = {
    "point-mass": lambda: NgramDrafter(1, 2),
    "with-q": lambda: DistributionDrafter(V, k=2),
    # a different scripted model drafts with its own KV cache and q under the same sampler settings
    "draft-model": lambda: DraftModelDrafter(ScriptedBackend(vocab_size=V, scale=1.5, seed=4), V, V, seed=5),
    "plain": NoDrafter,
}


@pytest.mark.parametrize("sampling", SETTINGS, ids=lambda s: f"T{s.temperature}-k{s.top_k}-p{s.top_p}")
@pytest.mark.parametrize("kind", ["point-mass", "with-q", "draft-model"])
def test_speculative_sampling_matches_target_distribution(sampling, kind):
    backend = ScriptedBackend(vocab_size=V, scale=1.5, seed=3)
    counts, drafter = sample_answers(backend, DRAFTERS[kind], sampling, seed=11)
    if kind == "with-q":  # make sure drafts were both accepted and rejected at both positions
        assert {v.accepted for v in drafter.verdicts} >= {0, 1, 2}
    assert chi_square_p(counts, exact_distribution(backend, sampling)) > 1e-3


@pytest.mark.parametrize("sampling", SETTINGS, ids=lambda s: f"T{s.temperature}-k{s.top_k}-p{s.top_p}")
def test_tree_verification_matches_target_distribution(sampling):
    """Trees of point-mass siblings (a draft model's 3 best first tokens, 2 best children each): children
    tried in order against the residual, so later siblings get accepted too, and the output is still
    exactly the target's."""
    backend = ScriptedTreeBackend(vocab_size=V, scale=1.5, seed=3)
    paths = []
    accept = backend.accept_path
    backend.accept_path = lambda path: (paths.append(tuple(path)), accept(path))
    drafter = lambda: TreeDrafter(ScriptedBackend(vocab_size=V, scale=1.5, seed=4), shape=(3, 2))  # noqa: E731
    counts, _ = sample_answers(backend, drafter, sampling, seed=11)
    assert any(p and p[0] > 0 for p in paths) and any(len(p) == 2 for p in paths)  # later siblings, depth 2
    assert chi_square_p(counts, exact_distribution(backend, sampling)) > 1e-3


class LyingDrafter(DistributionDrafter):
    """Claims a uniform q while sampling from its real one: verification is then biased."""

    def propose(self, context, max_tokens, features=None):
        draft = super().propose(context, max_tokens)
        return type(draft).chain(draft.tokens, None if draft.q is None else np.full_like(draft.q, 1 / V))


def test_the_chi_square_check_catches_a_biased_sampler():
    sampling = SETTINGS[0]
    backend = ScriptedBackend(vocab_size=V, scale=1.5, seed=3)
    counts, _ = sample_answers(backend, lambda: LyingDrafter(V, k=2, temperature=0.3), sampling, seed=11)
    assert chi_square_p(counts, exact_distribution(backend, sampling)) < 1e-6


def test_the_chi_square_check_catches_siblings_tried_against_the_full_p(monkeypatch):
    """Trying every sibling against the full p (a fresh draw each, instead of one draw of the target's token
    that at most one sibling can match) over-accepts siblings: the check sees it."""
    import localspec.engine.verify as verify
    from localspec.sampling import sample

    def tried_against_the_full_p(draft, kids, ids, p, draws):
        for child in kids:
            if sample(p, draws, ids) == draft.tokens[child]:
                return child, None
        return None, sample(p, draws, ids)

    monkeypatch.setattr(verify, "_point_mass", tried_against_the_full_p)
    backend = ScriptedTreeBackend(vocab_size=V, scale=1.5, seed=3)
    drafter = lambda: TreeDrafter(ScriptedBackend(vocab_size=V, scale=1.5, seed=4), shape=(3, 2))  # noqa: E731
    counts, _ = sample_answers(backend, drafter, SETTINGS[0], seed=11)
    assert chi_square_p(counts, exact_distribution(backend, SETTINGS[0])) < 1e-6
