"""Small immutable records passed between the engine, backends, drafters and the UI."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING

import numpy as np

from localspec.rows import Rows, as_rows

if TYPE_CHECKING:
    from localspec.engine.stats import TurnStats


@dataclass(frozen=True)
class Draft:
    """Tokens a drafter proposes after the current context.

    ``parents[i]`` is the index of token i's parent in this draft (-1: the pending token), so a chain is
    -1, 0, 1, ... .  ``q`` holds one draft distribution per token (rows over the vocabulary); ``None``
    means each token was proposed with certainty (a point mass), as n-gram and suffix drafters do.
    ``confidence`` holds the drafter's own belief in each token, in [0, 1] (a suffix match's path confidence
    and length, an n-gram match's length, a draft model's q of its token); the controller learns how often
    tokens of each confidence are accepted, so a long confident copy is verified whole and a weak guess is
    not. ``None``: the drafter says nothing (every token is judged by its position alone).
    ``whole``: the tree is verified whole or not at all (a lookahead window, whose side branches pay in
    later steps); the controller judges it by its main chain at the cost of all its tokens.
    """

    tokens: tuple[int, ...] = ()
    parents: tuple[int, ...] = ()
    q: np.ndarray | None = None
    confidence: tuple[float, ...] | None = None
    whole: bool = False

    def __post_init__(self) -> None:
        if len(self.parents) != len(self.tokens):
            raise ValueError("Draft.parents must have one entry per token")
        if self.q is not None and self.q.shape[0] != len(self.tokens):
            raise ValueError("Draft.q must have one row per token")
        if self.confidence is not None and len(self.confidence) != len(self.tokens):
            raise ValueError("Draft.confidence must have one entry per token")

    @classmethod
    def chain(cls, tokens, q: np.ndarray | None = None, confidence=None) -> Draft:
        tokens = tuple(int(t) for t in tokens)
        conf = None if confidence is None else tuple(float(c) for c in confidence)
        return cls(tokens, tuple(range(-1, len(tokens) - 1)), q, conf)

    def __len__(self) -> int:
        return len(self.tokens)

    def token_confidence(self) -> tuple[float, ...] | None:
        """The drafter's confidence in each token: its own, else q of the drafted token, else None."""
        if self.confidence is not None or self.q is None:
            return self.confidence
        return tuple(float(self.q[i, t]) for i, t in enumerate(self.tokens))

    @property
    def is_chain(self) -> bool:
        return all(p == i - 1 for i, p in enumerate(self.parents))

    def depths(self) -> list[int]:
        """Depth of every token (1: a child of the pending token); parents come before their children."""
        out: list[int] = []
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ValueError("Draft.parents must point to an earlier token or -1")
            out.append(1 if p < 0 else out[p] + 1)
        return out

    def cut(self, depth: int) -> Draft:
        """The tokens at depth <= ``depth`` (a tree lists tokens by depth, so this is a prefix)."""
        if self.is_chain:
            return self.prefix(depth)
        depths = self.depths()
        n = sum(1 for d in depths if d <= depth)
        if any(d > depth for d in depths[:n]):
            raise ValueError("a tree draft must list its tokens by depth")
        return self.prefix(n)

    def prefix(self, n: int) -> Draft:
        """The first n tokens: a tree still, since parents come before their children."""
        if n >= len(self):
            return self
        return Draft(
            self.tokens[:n],
            self.parents[:n],
            None if self.q is None else self.q[:n],
            None if self.confidence is None else self.confidence[:n],
            self.whole,
        )

    def sizes(self, top: int) -> list[int]:
        """How many tokens are verified when the draft is cut at depth d, for d = 0..top (a whole draft:
        all of them, or none)."""
        if self.whole:
            return [0] + [len(self)] * top
        if self.is_chain:
            return [min(d, len(self)) for d in range(top + 1)]
        per_depth = [0] * (top + 1)
        for d in self.depths():
            if d <= top:
                per_depth[d] += 1
        return list(accumulate(per_depth))

    def main_chain(self) -> Draft:
        """The chain through every token's first child: the drafter's best guess in a tree."""
        if self.is_chain:
            return self
        path, node = [], -1
        for i, p in enumerate(self.parents):
            if p == node:
                path.append(i)
                node = i
        return Draft.chain(
            [self.tokens[i] for i in path],
            None if self.q is None else self.q[path],
            None if self.confidence is None else [self.confidence[i] for i in path],
        )


EMPTY_DRAFT = Draft()


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one draft: how many draft tokens were accepted, then one token sampled by the
    target itself (the residual sample after a rejection, or the bonus token when all were accepted)."""

    drafted: int
    accepted: int
    tokens: tuple[int, ...]  # accepted draft tokens followed by the target's own token
    path: tuple[int, ...] = ()  # indices in the draft of the accepted tokens (a tree's accepted branch)
    held: bool = False  # the target's own token was left to a single-token step (localspec/engine/exact.py)

    @property
    def next_token(self) -> int:
        return self.tokens[-1]


class ForwardOut:
    """Logits (float32, one row per token passed to forward) and optional hidden states. ``rows`` serves
    the logits where the backend keeps them (localspec/rows.py); ``logits`` is the whole numpy array."""

    __slots__ = ("hidden", "rows")

    def __init__(self, logits: np.ndarray | Rows, hidden: np.ndarray | None = None) -> None:
        self.rows, self.hidden = as_rows(logits), hidden

    @property
    def logits(self) -> np.ndarray:
        return self.rows.numpy()


@dataclass(frozen=True)
class Features:
    """The target's features (hidden states of its feature layers, concatenated per token) of context
    positions ``start``, ``start + 1``, ...: one row of ``rows`` each. The engine hands them to a drafter
    that needs hidden states (EAGLE) after the prefill and after every verified step."""

    start: int
    rows: np.ndarray


@dataclass(frozen=True)
class TokenEvent:
    """What one engine step emitted. ``from_draft`` counts the leading tokens that came from accepted
    drafts and ``draft_chars`` the leading characters of ``text`` they make; ``finish_reason`` is set on
    the last event of a turn (stop, length, context)."""

    tokens: tuple[int, ...]
    text: str
    from_draft: int
    stats: TurnStats = field(repr=False)
    finish_reason: str | None = None
    draft_chars: int = 0


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences (slice compares run in C)."""
    n = min(len(a), len(b))
    a, b = list(a[:n]), list(b[:n])
    if a == b:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo
