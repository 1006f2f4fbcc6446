"""Small records passed between the engine, backends, drafters and the UI: immutable, but for ``Step``, which
the engine fills in as a step goes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import NamedTuple

import numpy as np

from localspec.rows import Rows, as_rows


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
    ``catchup_s``: of the time the proposal took, the seconds the drafter spent catching up on the context
    rather than drafting (a draft model after steps without drafting, a head taking several positions'
    features); the controller leaves them out of what drafting costs.
    """

    tokens: tuple[int, ...] = ()
    parents: tuple[int, ...] = ()
    q: np.ndarray | None = None
    confidence: tuple[float, ...] | None = None
    whole: bool = False
    catchup_s: float = 0.0

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

    def with_catchup(self, seconds: float) -> Draft:
        """This draft, ``seconds`` of its proposal spent catching up (see ``catchup_s``)."""
        return replace(self, catchup_s=seconds) if seconds else self

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
            self.catchup_s,
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
    # a point-mass draft's tokens the walk reached (the accepted ones, then the first rejected one where there
    # was one): the target's probability of each, its acceptance probability (engine/speclen/acceptance.py)
    target_p: tuple[float, ...] = ()

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
    that needs hidden states (EAGLE) in its step records (``Step.features``): the prompt's after the prefill,
    then those of the positions every step cached."""

    start: int
    rows: np.ndarray


@dataclass(slots=True)
class Step:
    """One engine step, as it went: the one record the drafter observes (``Drafter.observe``) and the
    controller (speclen), the turn's stats and the plain-speed baseline record. The engine fills it in as the
    step goes (plan, propose, verify, accept, emit); the drafter sees it after the emit, before ``end``. A
    record of ``features`` alone hands a feature-fed drafter the prompt's features after the prefill.

    Times are ``time.perf_counter`` readings."""

    context: list[int]  # the turn's context with this step's tokens (the engine's own list: it grows on)
    since: float = 0.0  # when the step before ended (or the prefill): a plain step's wall time counts from here
    start: float = 0.0  # the step began: the controller plans
    planned: float = 0.0  # it asked the drafter for so many tokens
    proposed: float = 0.0  # the drafter proposed
    verified: float = 0.0  # the target verified the window and its cache kept what the verdict decided
    end: float = 0.0  # the tokens were emitted and the drafter observed them
    catchup_s: float = 0.0  # of the proposal's time, what the drafter spent catching up (Draft.catchup_s)
    draft: Draft = EMPTY_DRAFT  # the window's draft tokens as verified (after the controller's and the room's cuts)
    judged: int = 0  # the depth the controller judged the window by (a tree's depth, a whole draft's main chain)
    verdict: Verdict | None = None  # what verification decided (None: a record of features only)
    emitted: Sequence[int] = ()  # the tokens the step emitted: the verdict's, up to an end, a stop or the length
    accepted: int = 0  # how many of them came from the draft
    outputs: np.ndarray | None = None  # the target's argmax after the pending token and each draft node (needs.outputs)
    features: Features | None = None  # the target's features of the positions this step cached (needs.hidden_states)
    gap: float | None = None  # the exact guard's top-1/top-2 gap of the row it held back (None: it held none)
    forced: bool = False  # a single-token step the exact guard forced (it held a row back the step before)

    @property
    def drafting_s(self) -> float:
        """What drafting cost: planning and proposing, less a one-off catch-up."""
        return self.proposed - self.start - self.catchup_s

    @property
    def verify_s(self) -> float:
        """The target's forward, verification and the cache's cut."""
        return self.verified - self.proposed

    @property
    def step_s(self) -> float:
        """The whole step, less a one-off catch-up."""
        return self.end - self.start - self.catchup_s

    def undrafted(self) -> Step:
        """The step as a drafter that did not draft it sees it (a chain's other member): the same tokens
        emitted and features, no draft."""
        return replace(self, draft=EMPTY_DRAFT, judged=0, verdict=None, accepted=0, outputs=None)


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


@dataclass(frozen=True)
class FimTokens:
    """A code model's fill-in-the-middle tokens: the prefix, suffix and middle markers, and where the model has
    them, the repository and file-separator markers of repo-level prompts."""

    pre: int
    suf: int
    mid: int
    rep: int | None = None
    sep: int | None = None


class BatchLoad(NamedTuple):
    """What a slot's last forward pass held beside its own tokens (Backend.batch_load, `serve --parallel`)."""

    tokens: int = 0  # the other sequences' tokens, each window counted as its pending token alone
    sequences: int = 0  # the other sequences
    pass_tokens: int = 0  # every token the pass held, drafts and prompt chunks included
    pass_s: float = 0.0  # the seconds the pass took (the forward and its rows, not the waiting)

    @classmethod
    def of_pass(cls, entries: Sequence[tuple[int, bool]], seconds: float) -> list[BatchLoad]:
        """Each sequence's load in one pass of ``entries`` (a sequence's tokens, and whether they are a verify
        window). The others' windows count as their pending token alone: each slot prices its own draft
        against the others decoding plainly, so that no slot drafts because the others did (each seeing the
        others' windows as a big pass its drafts add little to, they all drafted ever wider at a few percent
        acceptance: 9 against 17 tok/s plain, 2 slots, measured). The pass's size and seconds are as they were:
        they teach the slot's cost curve (a pass of n tokens of several sequences costs what one sequence's
        window of n costs, benchmarks/batched_cost.py)."""
        plain = sum(1 if window else n for n, window in entries)  # the pass were every window undrafted
        total, others = sum(n for n, _ in entries), len(entries) - 1
        return [cls(plain - (1 if window else n), others, total, seconds) for n, window in entries]
