"""A drafter that proposes random tokens: useless on purpose. It is the floor `localspec bench` and the
speculation-length controller are judged against (speculation must never cost much even then)."""

from __future__ import annotations

import numpy as np

from localspec.drafters.base import Drafter
from localspec.types import EMPTY_DRAFT, Draft


class RandomDrafter(Drafter):
    name = "random"

    def __init__(self, vocab_size: int, seed: int | None = None) -> None:
        self.vocab_size, self.rng = vocab_size, np.random.default_rng(seed)

    def propose(self, context, max_tokens) -> Draft:
        if max_tokens <= 0:
            return EMPTY_DRAFT
        return Draft.chain(self.rng.integers(0, self.vocab_size, size=max_tokens).tolist())


def build(target, options, context) -> RandomDrafter:
    return RandomDrafter(target.vocab_size if target is not None else 32000, context.seed)
