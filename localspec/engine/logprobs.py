"""Log-probabilities of the emitted tokens, read from the verify rows that decided them.

Every emitted token was decided by one row of the target's forward pass: the first by row 0 (after the pending
token), each later one by the row after the accepted draft token before it. That row is the target's own
prediction at that position, so a speculated token's log-probability is what plain decoding would report for
it (up to the float rounding of a batched window; `--exact` makes them equal bit for bit). Reported under the
model's raw distribution, log-softmax of the logits, before temperature and truncation: what OpenAI's
`logprobs` and llama-server's `n_probs` report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.rows import Rows

MAX_TOP = 20  # the most alternatives per token a request may ask for (OpenAI's limit)


@dataclass(frozen=True)
class TokenLogprob:
    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()  # the most likely tokens at that position, most likely first


def step_logprobs(rows: Rows, path: Sequence[int], emitted: Sequence[int], top: int) -> tuple[TokenLogprob, ...]:
    """One entry per emitted token: its log-probability in the row that decided it, with ``top`` alternatives.
    ``path`` is the verdict's accepted draft indices (row ``path[j] + 1`` follows accepted draft token j)."""
    index = [0, *(i + 1 for i in path)]
    return tuple(_entry(rows.row(index[j]), token, top) for j, token in enumerate(emitted))


def _entry(row: np.ndarray, token: int, top: int) -> TokenLogprob:
    logits = row.astype(np.float64)
    peak = logits.max()
    logz = peak + np.log(np.exp(logits - peak).sum())
    best: tuple[tuple[int, float], ...] = ()
    if top > 0:
        k = min(top, len(logits))
        ids = np.argpartition(-logits, k - 1)[:k]
        ids = ids[np.lexsort((ids, -logits[ids]))]  # most likely first, ties by id
        best = tuple((int(i), float(logits[i] - logz)) for i in ids)
    return TokenLogprob(int(token), float(logits[token] - logz), best)
