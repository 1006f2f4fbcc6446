"""How a drafter picks its token from its own logits under the target's sampler settings, and how sure it is:
shared by the draft model and every head drafter."""

from __future__ import annotations

import numpy as np

from localspec.sampling import SamplingParams, sample

GREEDY = SamplingParams(temperature=0)


def token_probability(logits: np.ndarray, token: int) -> float:
    """The softmax probability of ``token`` under ``logits`` (temperature 1): how sure a head is of it."""
    z = logits - logits.max()
    e = np.exp(z)
    return float(e[token] / e.sum())


def pick_token(logits: np.ndarray, sampling: SamplingParams, rng: np.random.Generator, vocab: int, q_rows: list) -> int:
    """The drafter's token from its logits under the target's sampler settings; at temperature > 0 its
    distribution q (a dense row over the target's vocabulary) is appended to q_rows. Greedy drafts are
    point masses and carry no rows."""
    if sampling.greedy:
        return int(np.argmax(logits))
    ids, p = sampling.distribution(logits)
    q = np.zeros(vocab, dtype=np.float64)
    q[ids] = p
    q_rows.append(q)
    return sample(p, rng, ids)
