"""Speculative sampling (Leviathan et al. 2023; Chen et al. 2023) in the papers' notation.

p: the target's distribution at a position (after the shared sampler), q: the drafter's. Draft token x is
accepted with probability min(1, p(x) / q(x)); at the first rejection the target's token is drawn from
norm(max(0, p - q)); when every draft token is accepted a bonus token is drawn from the last row of p.
The emitted tokens are then distributed exactly as the target's own samples.

A draft without q (n-gram, suffix) is a point mass: q(x) = 1, so x is accepted with probability p(x) and
the residual is p with x removed. That is what drawing the target's own token y ~ p and accepting x iff
y = x gives: P(accept) = p(x), and a rejected x leaves y distributed as p without x. So point-mass drafts
are verified that way, with the draw for the answer's t-th token taken from stream t (sampling.Streams):
the answer is then the target's own sample for the seed, whatever was drafted. (For drafts with q,
exact matching would accept only sum p*q instead of sum min(p, q): those keep the min(1, p/q) rule.)
Greedy decoding is temperature 0 of the same code: p is a point mass on the argmax, so a draft token is
accepted iff it is the argmax, and the residual is the argmax.
"""

from __future__ import annotations

import numpy as np

from localspec.rows import Rows, as_rows
from localspec.sampling import SamplingParams, Streams, sample
from localspec.types import Draft, Verdict


def verify_draft(
    draft: Draft,
    target_logits: np.ndarray | Rows,
    sampler: SamplingParams,
    rng: np.random.Generator | Streams,
    rules: list | None = None,
) -> Verdict:
    """``target_logits`` (a numpy array, or rows kept where the backend computed them: rows.py) has
    len(draft) + 1 rows: row 0 is the target's prediction after the pending token,
    row i + 1 its prediction after draft token i (after the pending token and that token's ancestors).

    A chain is a tree whose tokens each have one child. At every node the children are tried in draft
    order: child x is accepted with probability min(1, p(x) / q(x)); on rejection p becomes the residual
    norm(max(0, p - q)) and the next child is tried against it. When no child is accepted the target's
    token is drawn from what is left of p (the full row when the node has no children: the bonus token).
    With point-mass children (distinct tokens, q = None) each rejection removes the token from p, so the
    output is distributed exactly as the target's own sample; children with q rows must be independent
    draws from their q for the same to hold (a chain's single child always is).

    ``rules``, when given and the draft has q, collects per examined position the acceptance probability
    of this rule, sum min(p, q), next to that of exact matching (draw from q, draw from p, accept if
    equal), sum p * q: the two rules compared on the same drafts.

    ``rng``: one generator for every draw, or ``Streams`` giving each depth of the walk its own."""
    rows = as_rows(target_logits)
    if len(rows) != len(draft) + 1:
        raise ValueError(f"need {len(draft) + 1} rows of target logits, got {len(rows)}")
    children: dict[int, list[int]] = {}
    for i, parent in enumerate(draft.parents):
        children.setdefault(parent, []).append(i)
    accepted: list[int] = []
    path: list[int] = []
    target_p: list[float] = []  # point-mass drafts: p of the token the walk reached at each depth
    node = -1
    while True:
        ids, p = rows.candidates(node + 1, sampler)
        draws = rng.at(len(accepted)) if isinstance(rng, Streams) else rng
        kids = children.get(node, ())
        if draft.q is None:
            if kids:
                target_p.append(sum(_p_of(ids, p, draft.tokens[c]) for c in kids))  # P(some child)
            child, token = _point_mass(draft, kids, ids, p, draws)
        else:
            child, token = _with_q(draft, kids, ids, p, draws, rules)
        if child is None:  # no child accepted: ``token`` is the target's
            return Verdict(len(draft), len(accepted), (*accepted, token), tuple(path), target_p=tuple(target_p))
        accepted.append(draft.tokens[child])
        path.append(child)
        node = child


def _p_of(ids: np.ndarray, p: np.ndarray, x: int) -> float:
    """p(x) of a sparse distribution (0 where x is not a candidate)."""
    return float(p[ids == x].sum())


def _point_mass(draft: Draft, kids, ids: np.ndarray, p: np.ndarray, draws) -> tuple[int | None, int | None]:
    """(the child equal to the target's own draw y ~ p, None), or (None, y)."""
    y = sample(p, draws, ids)
    for child in kids:
        if draft.tokens[child] == y:
            return child, None
    return None, y


def _with_q(draft: Draft, kids, ids: np.ndarray, p: np.ndarray, draws, rules) -> tuple[int | None, int | None]:
    """Children tried in order with min(1, p(x)/q(x)), p turning into the residual after each rejection:
    (the accepted child, None), or (None, a token drawn from what is left of p)."""
    for child in kids:
        x = draft.tokens[child]
        p_x = _p_of(ids, p, x)
        q_x = float(draft.q[child, x])
        if rules is not None:
            q = draft.q[child, ids]
            rules.append((float(np.minimum(p, q).sum()), float((p * q).sum())))
        if draws.random() * q_x < p_x:  # u < p(x)/q(x), written without a division
            return child, None
        p = _residual(ids, p, draft.q[child, ids], x)
    return None, sample(p, draws, ids)


def _residual(ids: np.ndarray, p: np.ndarray, q: np.ndarray | None, x: int) -> np.ndarray:
    """norm(max(0, p - q)) after rejecting x (q None: a point mass on x, so p without x)."""
    r = np.where(ids == x, 0.0, p) if q is None else np.maximum(p - q, 0.0)
    total = r.sum()
    # p == q up to rounding cannot reject (min(1, p/q) = 1); this guards the float edge case only.
    return r / total if total > 0 else p
