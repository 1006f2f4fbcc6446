"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023) in the papers' notation.

p: the target's distribution at a position (after the shared sampler), q: the drafter's. Draft token x is
accepted with probability min(1, p(x) / q(x)); at the first rejection the target's token is drawn from
norm(max(0, p - q)); when every draft token is accepted a bonus token is drawn from the last row of p.
The emitted tokens are then distributed exactly as the target's own samples.

A draft without q (n-gram, suffix) is a point mass: q(x) = 1, so x is accepted with probability p(x) and
the residual is p with x removed. Greedy decoding is temperature 0 of the same code: p is a point mass on
the argmax, so a draft token is accepted iff it is the argmax, and the residual is the argmax.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from localspec.sampling import SamplingParams, sample
from localspec.types import Draft, Verdict


def verify_chain(draft: Draft, target_logits: np.ndarray, sampler: SamplingParams,
                 rng: np.random.Generator, rules: Optional[list] = None) -> Verdict:
    """``target_logits`` has len(draft) + 1 rows: row i is the target's prediction for draft position i
    (row 0 follows the pending token), the last row predicts the token after a fully accepted draft.
    Rows after the first rejection are never looked at.

    ``rules``, when given and the draft has q, collects per examined position the acceptance probability
    of this rule, sum min(p, q), next to that of exact matching (draw from q, draw from p, accept if
    equal), sum p * q: the two rules compared on the same drafts."""
    if target_logits.shape[0] != len(draft) + 1:
        raise ValueError(f"need {len(draft) + 1} rows of target logits, got {target_logits.shape[0]}")
    accepted: list[int] = []
    for i, x in enumerate(draft.tokens):
        ids, p = sampler.distribution(target_logits[i])
        p_x = float(p[ids == x].sum())
        q_x = 1.0 if draft.q is None else float(draft.q[i, x])
        if rules is not None and draft.q is not None:
            q = draft.q[i, ids]
            rules.append((float(np.minimum(p, q).sum()), float((p * q).sum())))
        if rng.random() * q_x < p_x:  # u < p(x)/q(x), written without a division
            accepted.append(x)
            continue
        return Verdict(len(draft), i, (*accepted, _sample_residual(ids, p, draft, i, x, rng)))
    ids, p = sampler.distribution(target_logits[-1])
    return Verdict(len(draft), len(draft), (*accepted, sample(p, rng, ids)))


def _sample_residual(ids: np.ndarray, p: np.ndarray, draft: Draft, i: int, x: int,
                     rng: np.random.Generator) -> int:
    """A draw from norm(max(0, p - q)) at the rejected position."""
    if draft.q is None:  # q is a point mass on x: the residual is p without x
        r = np.where(ids == x, 0.0, p)
    else:
        r = np.maximum(p - draft.q[i, ids], 0.0)  # where p is 0, max(0, p - q) is 0 too
    # p == q up to rounding cannot reject (min(1, p/q) = 1); this guards the float edge case only.
    return sample(r if r.sum() > 0 else p, rng, ids)
