"""Prompt lookup (n-gram) drafting: if the last n tokens occurred before in the prompt or the answer so
far, propose the tokens that followed them then, up to the end of the context. The longest n in
[n_min, n_max] wins; among equal n, the most recent occurrence. An index from n-gram to the position after
its latest occurrence is kept up to date incrementally, so a step costs O(n_max) dictionary look-ups, not a
scan of the context.

The index only knows n <= n_max; the real match is often much longer (a copied line, a function being
edited). It is measured by comparing backwards from the occurrence, up to MAX_MATCH tokens, and sets the
confidence of every proposed token (match_confidence), so the controller can verify a long copy whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from localspec.drafters.base import DEFAULT_TURN, Drafter, Turn, match_confidence
from localspec.errors import ConfigError
from localspec.options import option
from localspec.types import EMPTY_DRAFT, Draft

MAX_MATCH = 64  # the backwards comparison stops here: O(64) per step, and longer is hardly more certain


def match_length(context: Sequence[int], start: int, n: int) -> int:
    """How many tokens before ``start`` equal the context's last ones, given that n of them do (<= MAX_MATCH)."""
    length, end = n, len(context)
    while length < MAX_MATCH and start - length > 0 and context[start - length - 1] == context[end - length - 1]:
        length += 1
    return length


@dataclass(frozen=True)
class NgramOptions:
    min: int = option(2, "shortest n-gram it matches")
    max: int = option(4, "longest n-gram it matches")

    def __post_init__(self) -> None:
        if not 1 <= self.min <= self.max:
            raise ConfigError(f"n-gram sizes need 1 <= min <= max, got min={self.min}, max={self.max}")


def build(target, options: NgramOptions, context) -> NgramDrafter:
    return NgramDrafter(options.min, options.max)


class NgramDrafter(Drafter):
    name = "ngram"

    def __init__(self, n_min: int = NgramOptions.min, n_max: int = NgramOptions.max) -> None:
        NgramOptions(n_min, n_max)  # checks them
        self.n_min, self.n_max = n_min, n_max
        self._index: dict[tuple[int, ...], int] = {}
        self._indexed = 0  # context positions whose preceding n-grams are in the index
        self._matches = 0
        self._match_len_sum = 0

    def begin(self, prompt: Sequence[int], turn: Turn = DEFAULT_TURN) -> None:
        self._index.clear()
        self._indexed = 0
        self._matches = self._match_len_sum = 0

    def _extend(self, context: Sequence[int]) -> None:
        for end in range(max(self._indexed, 1), len(context)):
            for n in range(self.n_min, min(self.n_max, end) + 1):
                self._index[tuple(context[end - n : end])] = end  # n-gram ending before `end` -> `end`
        self._indexed = max(self._indexed, len(context))

    def propose(self, context: Sequence[int], max_tokens: int) -> Draft:
        self._extend(context)
        if max_tokens <= 0:
            return EMPTY_DRAFT
        for n in range(min(self.n_max, len(context) - 1), self.n_min - 1, -1):
            start = self._index.get(tuple(context[-n:]))
            if start is not None:
                length = match_length(context, start, n)
                self._matches += 1
                self._match_len_sum += length
                tokens = context[start : start + max_tokens]
                return Draft.chain(tokens, confidence=[match_confidence(length)] * len(tokens))
        return EMPTY_DRAFT

    def end(self) -> dict:
        mean = self._match_len_sum / self._matches if self._matches else 0.0
        return {"matches": self._matches, "mean_match_len": round(mean, 2)}
