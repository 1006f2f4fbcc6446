"""Lookahead decoding (Fu et al. 2024): no draft model and no training. Each step verifies, in one tree:

- the *verification branch*: up to ``guesses`` n-grams from a pool that start with the pending token, and
- the *lookahead branch*: a Jacobi window (jacobi_window.py) whose cells the same forward improves, and
  whose completed n-grams fill the pool.

Both go into one prefix tree (equal paths are one node, so a pool n-gram that agrees with the window costs
nothing twice), listed by depth with the pool's most recent n-gram first: that branch is the tree's main
chain, which the controller judges. The window's worth shows only in later steps, so the tree is verified
whole or not at all (``Draft.whole``). Any branch may be accepted, the window's included; the tokens are
point masses (one per distinct path), so verification keeps the target's output exactly (verify.py).

The pool also takes the n-grams of the prompt and of the emitted answer (``context``, on by default): the
paper's pool holds the window's n-grams only, but the text's own are the right ones wherever it repeats.
The pool lives as long as the drafter (a chat), the window one turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.drafters.base import DEFAULT_TURN, Drafter, DrafterNeeds, Turn
from localspec.drafters.lookahead.jacobi_window import JacobiWindow
from localspec.errors import ConfigError
from localspec.options import option
from localspec.types import EMPTY_DRAFT, Draft, Step, common_prefix

POOL_CONFIDENCE = 0.5  # a pool n-gram's tokens: the controller learns what they are worth
WINDOW_CONFIDENCE = 0.1  # a window guess's tokens (only on the main chain when the pool has nothing)
MAX_LEAVES = 63  # the tree's leaves (a llama.cpp sequence each; backends/llama_cpp.py MAX_BRANCHES)


@dataclass(frozen=True)
class LookaheadOptions:
    window: int = option(5, "positions ahead the Jacobi window guesses in parallel (W)")
    ngram: int = option(4, "n-gram size N: the window keeps N - 1 rows, a pool n-gram drafts N - 1 tokens")
    guesses: int = option(5, "pool n-grams verified per step (G)")
    context: bool = option(True, "pool the n-grams of the prompt and the answer too", flag=None)

    def __post_init__(self) -> None:
        if self.window < 1 or self.guesses < 0:
            raise ConfigError(f"lookahead needs window >= 1 and guesses >= 0, got {self.window}, {self.guesses}")
        if self.ngram < 2:
            raise ConfigError(f"lookahead ngram must be at least 2, got {self.ngram}")
        if self.window + self.guesses > MAX_LEAVES:
            raise ConfigError(
                f"lookahead window + guesses must be at most {MAX_LEAVES} (one tree leaf each), "
                f"got {self.window} + {self.guesses}"
            )

    @property
    def depth(self) -> int:
        """The window's deepest cell: the draft depth (--draft-tokens) that verifies all of it."""
        return self.window + self.ngram - 2


def build(target, options: LookaheadOptions, context) -> LookaheadDrafter:
    return LookaheadDrafter(options, context.seed)


class NgramPool:
    """n-grams by first token: the most recent ``per_key`` continuations of each, newest first."""

    def __init__(self, per_key: int) -> None:
        self.per_key = max(per_key, 1)
        self._by_first: dict[int, list[tuple[int, ...]]] = {}

    def add(self, gram: Sequence[int]) -> None:
        first, rest = int(gram[0]), tuple(int(t) for t in gram[1:])
        known = self._by_first.setdefault(first, [])
        if rest in known:
            known.remove(rest)
        known.insert(0, rest)
        del known[self.per_key :]

    def get(self, first: int, n: int) -> list[tuple[int, ...]]:
        return self._by_first.get(first, [])[:n]

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_first.values())


def prefix_tree(paths: Sequence[tuple[int, ...]]) -> tuple[list[int], list[int], dict[tuple[int, ...], int]]:
    """(tokens, parents, node of each path) of the tree whose nodes are the distinct prefixes of ``paths``,
    listed by depth and, within a depth, in the order the paths named them (so the first path is the main
    chain as far as it goes)."""
    order: dict[tuple[int, ...], None] = {}
    for path in paths:
        for end in range(1, len(path) + 1):
            order.setdefault(path[:end], None)
    nodes = sorted(order, key=len)  # a stable sort: first-named first within a depth
    index = {prefix: i for i, prefix in enumerate(nodes)}
    parents = [index[prefix[:-1]] if len(prefix) > 1 else -1 for prefix in nodes]
    return [prefix[-1] for prefix in nodes], parents, index


class LookaheadDrafter(Drafter):
    name = "lookahead"
    # the engine hands it the target's argmax of every verified row, in the step record (observe)
    needs = DrafterNeeds(tree_attention=True, outputs=True)

    def __init__(self, options: LookaheadOptions = LookaheadOptions(), seed: int | None = None) -> None:
        self.options = options
        self.pool = NgramPool(options.guesses)
        self.window = JacobiWindow(options.window, options.ngram - 1, np.random.default_rng(seed))
        self._indexed: list[int] = []  # the context whose n-grams are in the pool
        self._cells: dict[int, tuple[int, int]] = {}  # node of the last proposal -> its window cell
        self._moved: int | None = None  # positions the window moved in the last verified step (None: not verified)
        self._recent: Sequence[int] = ()
        self._reset_figures()

    def _reset_figures(self) -> None:
        self._steps = self._window_steps = self._candidates = self._harvested = 0

    def describe(self) -> str:
        o = self.options
        return f"window {o.window}, n-gram {o.ngram}, {o.guesses} guesses (depth {o.depth})"

    def begin(self, prompt: Sequence[int], turn: Turn = DEFAULT_TURN) -> None:
        self.window.reset(prompt)
        del self._indexed[common_prefix(self._indexed, prompt) :]  # a new turn may not continue the last one
        self._index(prompt)
        self._cells, self._moved = {}, None
        self._reset_figures()

    def _index(self, context: Sequence[int]) -> None:
        """Pool the n-grams of the context that were not pooled yet (context option); within a turn the
        context only grows past what was indexed."""
        if not self.options.context:
            return
        n = self.options.ngram
        for i in range(max(len(self._indexed) - n + 1, 0), len(context) - n + 1):
            self.pool.add(context[i : i + n])
        self._indexed.extend(context[len(self._indexed) :])

    def propose(self, context: Sequence[int], max_tokens: int) -> Draft:
        if max_tokens <= 0:  # a step without a window: nothing to catch up on (the next proposal pools the context)
            return EMPTY_DRAFT
        self._index(context)
        self._recent = context[-256:]
        self._cells = {}
        candidates = self.pool.get(int(context[-1]), self.options.guesses)
        cells = self.window.paths()
        tokens, parents, node = prefix_tree([*candidates, *(path for _, path in cells)])
        self._cells = {node[path]: cell for cell, path in cells}
        on_pool = {node[c[:end]] for c in candidates for end in range(1, len(c) + 1)}
        confidence = [POOL_CONFIDENCE if i in on_pool else WINDOW_CONFIDENCE for i in range(len(tokens))]
        self._steps += 1
        self._candidates += len(candidates)
        return Draft(tuple(tokens), tuple(parents), confidence=tuple(confidence), whole=True)

    def observe(self, step: Step) -> None:
        """The target's argmax after every node of the verified draft, when there was one, moves the window
        on (``_iterate``); then it follows the context past the tokens the step emitted."""
        if step.outputs is not None:
            self._iterate(step.draft, step.outputs)
        self.window.advance(len(step.emitted) - (self._moved or 0), self._recent)
        self._moved, self._cells = None, {}

    def _iterate(self, draft: Draft, argmax: np.ndarray) -> None:
        """The target's argmax after every node of the verified ``draft`` (row i + 1: after node i), taken
        before the verdict: one Jacobi iteration of the window, its n-grams into the pool."""
        if not self._cells:
            return
        predicted = {cell: int(argmax[i + 1]) for i, cell in self._cells.items() if i < len(draft)}
        grams, self._moved = self.window.step(predicted)
        for gram in grams:
            self.pool.add(gram)
        self._window_steps += 1
        self._harvested += len(grams)

    def end(self) -> dict:
        return {
            "window_steps": self._window_steps,
            "mean_candidates": round(self._candidates / self._steps, 2) if self._steps else 0.0,
            "ngrams_harvested": self._harvested,
            "pool_ngrams": len(self.pool),
        }
