"""The chi-square machinery of the distribution tests: the sampler settings, exact answer distributions
of the scripted target, seeded samples through the engine, the sample counts per setting, and the canaries
(deliberately broken verifiers and drafters) that must fail at those counts."""

import itertools

import numpy as np
from scipy.stats import chisquare

import localspec.engine.verify as verify
from localspec.engine.loop import generate
from localspec.sampling import SamplingParams, sample
from support.fakes import ScriptedTreeBackend

SETTINGS = [
    SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=0.7, top_k=0, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=1.5, top_k=3, top_p=1.0, min_p=0.0),
    SamplingParams(temperature=1.0, top_k=0, top_p=0.8, min_p=0.05),
]


V, N, FULL, PROMPT = 6, 3, 20_000, [0, 1, 2, 1, 0, 1]  # vocabulary, answer length, full samples, prompt


PLAN = {
    "point-mass": (1, 3000),
    "with-q": (2, 500),
    "draft-model": (1, 750),
    "tree": (0, 250),
    "lookahead": (1, 3000),  # SETTINGS[:3] only: test_lookahead.py
}


def samples_for(kind: str, sampling: SamplingParams) -> int:
    full, small = PLAN[kind]
    return FULL if sampling is SETTINGS[full] else small


def setting_id(sampling: SamplingParams) -> str:
    return f"T{sampling.temperature}-k{sampling.top_k}-p{sampling.top_p}"


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


def sample_answers(backend, make_drafter, sampling, seed, samples=FULL):
    rng = np.random.default_rng(seed)
    counts = {}
    drafter = make_drafter()
    for _ in range(samples):
        out = generate(backend, drafter, PROMPT, sampling, max_tokens=N, draft_tokens=2, rng=rng)
        counts[out.tokens] = counts.get(out.tokens, 0) + 1
    return counts, drafter


def sample_answers_in_slots(slots, fibers, make_drafter, sampling, seed, samples):
    """``samples`` answers, an equal share per slot, the slots' generations running side by side (each a
    greenlet with a drafter and a generator of its own, as `serve --parallel` runs them): counts per slot."""
    rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(len(slots))]
    counts = [{} for _ in slots]

    def run(slot, rng, mine):
        drafter = make_drafter()
        for _ in range(samples // len(slots)):
            out = generate(slot, drafter, PROMPT, sampling, max_tokens=N, draft_tokens=2, rng=rng)
            mine[out.tokens] = mine.get(out.tokens, 0) + 1

    for slot, rng, mine in zip(slots, rngs, counts, strict=True):
        fibers.start(run, slot, rng, mine)
    while fibers.live:
        fibers.step()
    return counts


def tree_backend(paths: list):
    """The scripted target with tree verification; the accepted paths are appended to ``paths``."""
    backend = ScriptedTreeBackend(vocab_size=V, scale=1.5, seed=3)
    accept = backend.accept_path
    backend.accept_path = lambda path: (paths.append(tuple(path)), accept(path))
    return backend


def residual_without_q(ids, p, q, x):
    """verify._residual, broken: after a rejection the target's token is drawn from p, not norm(max(0, p - q))."""
    return p


def tried_against_the_full_p(draft, kids, ids, p, draws):
    """verify._point_mass, broken: every sibling tried against the full p (a fresh draw each, instead of one
    draw of the target's token that at most one sibling can match) over-accepts siblings; on a chain, a
    rejected token is drawn again from the full p instead of from p without it."""
    for child in kids:
        if sample(p, draws, ids) == draft.tokens[child]:
            return child, None
    return None, sample(p, draws, ids)


def assert_canary_fails(kind, make_backend, make_drafter, broken, settings, monkeypatch):
    """The chi-square check rejects the canary (p < 1e-6) at ``kind``'s SMALL count at each of ``settings``."""
    for name, stand_in in broken.items():
        monkeypatch.setattr(verify, name, stand_in)
    for i in settings:
        assert i != PLAN[kind][0], "the FULL setting needs no proof: it has the most samples"
        backend = make_backend([])
        counts, _ = sample_answers(backend, make_drafter, SETTINGS[i], seed=11, samples=PLAN[kind][1])
        p = chi_square_p(counts, exact_distribution(backend, SETTINGS[i]))
        assert p < 1e-6, (setting_id(SETTINGS[i]), PLAN[kind][1], p)
