"""A smaller model of the same family drafts for the target (`--drafter draft --draft-model NAME|PATH`).

It drafts autoregressively with its own KV cache and reports its distributions q (the same sampler
settings as the target's, applied to its own logits), so verification can accept with min(1, p/q) and
resample from the residual. Its cache follows the target's context lazily: each proposal cuts the draft
cache back to what it shares with the context (the accepted prefix) and feeds only what is new, usually
the target's bonus/residual token; after steps without drafting it catches up in one batched prefill.
"""
from __future__ import annotations

import time
from typing import Optional, Sequence

import numpy as np

from localspec.backends.base import Backend
from localspec.drafters.base import Drafter
from localspec.sampling import SamplingParams, sample
from localspec.types import Draft, common_prefix

GREEDY = SamplingParams(temperature=0)


class DraftModelDrafter(Drafter):
    name = "draft"

    def __init__(self, draft: Backend, shared_vocab: int, target_vocab: int, seed: Optional[int] = None) -> None:
        self.draft, self.shared, self.target_vocab = draft, shared_vocab, target_vocab
        self.rng = np.random.default_rng(seed)
        self.catchup_tokens = 0  # tokens fed in batched catch-ups this turn (after steps without drafting)
        self.catchup_s = 0.0  # time of the last call's catch-up, if any

    def propose(self, context: Sequence[int], max_tokens: int, hidden=None) -> Draft:
        sampling = self.sampling or GREEDY
        self.catchup_s = 0.0
        keep = min(common_prefix(self.draft.cached_tokens, context), len(context) - 1)
        self.draft.truncate(keep)
        new = list(context[keep:])
        if len(new) > 2:  # a gap (steps without drafting, or a new turn): one batched prefill, no logits
            t0 = time.perf_counter()
            self.draft.prefill(new[:-1])
            self.catchup_s = time.perf_counter() - t0
            self.catchup_tokens += len(new) - 1
            new = new[-1:]
        row = self.draft.forward(new).logits[-1]
        tokens: list[int] = []
        rows: list[np.ndarray] = []
        for i in range(max_tokens):
            # ids past the shared range are padding of the bigger vocabulary
            token = pick_token(row[:self.shared], sampling, self.rng, self.target_vocab, rows)
            tokens.append(token)
            if i + 1 < max_tokens:
                row = self.draft.forward([token]).logits[-1]
        return Draft.chain(tokens, np.stack(rows) if rows else None)

    def end(self) -> None:
        pass

    def figures(self) -> dict:
        figures = {"draft_model": self.draft.model_name,
                   "draft_memory_mb": round(self.draft.memory_bytes() / 2**20, 1),
                   "catchup_tokens": self.catchup_tokens}
        self.catchup_tokens = 0
        return figures

    def close(self) -> None:
        self.draft.close()


def pick_token(logits: np.ndarray, sampling: SamplingParams, rng: np.random.Generator, vocab: int,
               q_rows: list) -> int:
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
