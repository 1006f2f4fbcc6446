"""Drafting from a head fed the target's features: EAGLE's heads on every backend (drafters/eagle/) and MiMo's
MTP layer on torch (drafters/mtp/torch_head.py).

Each call first feeds the head the target's features of the newly verified positions (slot j of the head's
cache holds the pair (token j+1, feature j)), then drafts from the head's prediction after the last one.

Chain: k tokens, each picked under the target's sampler settings from the head's logits, with their q rows,
so verification is rejection sampling with the residual. Rejected positions leave the head's cache because
the next call only counts, and overwrites from, what was verified.

Tree (EAGLE-2's dynamic tree, when the backend has tree attention): the `width` best tokens after the last
feature start the tree; at each further depth the `width` leaves with the highest path probability (the
product of the head's probabilities along the path) are expanded in one batched head call, with tree
attention over the head's cache (each node sees the context and its own ancestors), each adding its `width`
best children; finally the `nodes` best-scoring tokens of all form the draft. A tree's tokens are point
masses chosen by the head, so verification tries children in order against the residual (exact). The head
runs the expansion (``head.tree(base)``: torch by an attention mask over its cache, llama.cpp by a sequence
per expanded node) and ranks its outputs (``head.top``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from localspec.drafters.base import DEFAULT_TURN, Drafter, DrafterNeeds, Turn, check_fit
from localspec.drafters.feature_feed import FeatureFeed, FedByFeatures
from localspec.drafters.picking import GREEDY, pick_token
from localspec.errors import ConfigError
from localspec.types import EMPTY_DRAFT, Draft

TREE_WIDTH = 4  # children per expanded node and expanded nodes per depth
TREE_SLOTS = 256  # head cache slots past the context for a drafted tree (a tree has at most half as many nodes)


class FeatureHeadDrafter(FedByFeatures, Drafter):
    """Chains or trees from a head fed the target's features (the head: ``make_head()``, built once the target
    and the tree shape are checked)."""

    name = "eagle"
    # fed the target's features of the layers its head reads (chains; a tree-drafting one needs tree attention)
    needs = DrafterNeeds(hidden_states=True, feature_layers=True)

    def __init__(
        self, target, make_head: Callable, seed: int | None = None, tree_nodes: int = 0, tree_width: int = TREE_WIDTH
    ) -> None:
        if tree_nodes:
            self.needs = DrafterNeeds(hidden_states=True, feature_layers=True, tree_attention=True)
        check_fit(target, self)
        if tree_nodes < 0 or tree_width < 1 or tree_nodes > TREE_SLOTS // 2:
            raise ConfigError(f"--eagle-tree must be 0 (chains) or 1..{TREE_SLOTS // 2} nodes, got {tree_nodes}")
        self.head = make_head()
        self.target = target
        target.set_feature_layers(self.head.feature_layers)
        self.target_vocab = target.vocab_size
        self.tree_nodes, self.tree_width = tree_nodes, tree_width
        self.rng = np.random.default_rng(seed)
        self.sampling = GREEDY  # the target's sampler settings, this turn's
        self.rows = FeatureFeed()  # slot j of the head's cache: (token j+1, feature j)
        self._last = None  # the head's output after the last fed position
        self._trees = self._tree_tokens = 0

    def describe(self) -> str:
        shape = f"trees of {self.tree_nodes}" if self.tree_nodes else "chains"
        return f"{head_summary(self.head)}, {shape}"

    def begin(self, prompt: Sequence[int], turn: Turn = DEFAULT_TURN) -> None:
        """A new turn keeps the head's cache for the part of the conversation that did not change: slot j
        (token j+1, feature j) stays valid while tokens 0..j+1 are the same."""
        self.sampling = turn.sampling
        self.target.set_feature_layers(self.head.feature_layers)  # another drafter may have switched them
        self._catch_up()  # what the last turn handed over belongs to its context
        self.rows.keep(prompt, lookahead=1)
        self._last = None

    def propose(self, context: Sequence[int], max_tokens: int) -> Draft:
        if max_tokens <= 0:
            return EMPTY_DRAFT
        catchup = self._catch_up()
        if self._last is None:
            return EMPTY_DRAFT.with_catchup(catchup)
        draft = self._tree(max_tokens) if self.tree_nodes else self._chain(max_tokens)
        return draft.with_catchup(catchup)

    def _put(self, context: Sequence[int], rows: np.ndarray, end: int) -> int:
        """Feature rows [n, F] of positions end.. into the head's cache, paired with tokens end+1.."""
        self.head.lo = self.rows.first
        n = min(len(rows), len(context) - 1 - end)
        if n <= 0:
            return 0
        out = self.head.step(context[end + 1 : end + 1 + n], self.head.fuse(rows[:n]), end)
        self._last = out[-1:]
        return n

    def _chain(self, k: int) -> Draft:
        sampling = self.sampling
        tokens, rows_q, out, at = [], [], self._last, self.rows.end
        for i in range(k):
            token = pick_token(self.head.logits(out)[0], sampling, self.rng, self.target_vocab, rows_q)
            tokens.append(token)
            if i + 1 < k:
                out = self.head.step([token], out, at + i)[-1:]
        return Draft.chain(tokens, np.stack(rows_q) if rows_q else None)

    def _tree(self, depth: int) -> Draft:
        head, width = self.head, self.tree_width
        depth = min(depth, head.max_tree_depth(width))  # the head's cache has room for so many expanded nodes
        base = self.rows.end  # the slot (and position) the pending token's pair will take
        values, indices = head.top(self._last, width)
        tokens = [int(t) for t in indices[0]]
        parents, depths = [-1] * width, [1] * width
        scores = [float(v) for v in values[0]]
        outs: dict[int, object] = {}  # expanded node -> the head's output after it
        frontier, tree = list(range(width)), head.tree(base)
        try:
            for d in range(1, depth):
                inputs = [self._last if parents[node] < 0 else outs[parents[node]] for node in frontier]
                out = tree.step([tokens[node] for node in frontier], inputs, frontier, parents, base + d - 1)
                values, indices = head.top(out, width)
                candidates = []
                for r, node in enumerate(frontier):
                    outs[node] = out[r : r + 1]
                    for value, token in zip(values[r].tolist(), indices[r].tolist(), strict=False):
                        tokens.append(int(token))
                        parents.append(node)
                        depths.append(d + 1)
                        scores.append(scores[node] + min(value, 0.0))
                        candidates.append(len(tokens) - 1)
                frontier = sorted(candidates, key=lambda i: -scores[i])[:width]
        finally:
            tree.end()
        # the best-scoring tokens; a child never scores above its parent, so every parent is kept too
        keep = sorted(range(len(tokens)), key=lambda i: (-scores[i], depths[i]))[: self.tree_nodes]
        keep.sort(key=lambda i: (depths[i], -scores[i]))
        index = {old: new for new, old in enumerate(keep)}
        self._trees += 1
        self._tree_tokens += len(keep)
        return Draft(tuple(tokens[i] for i in keep), tuple(-1 if parents[i] < 0 else index[parents[i]] for i in keep))

    def close(self) -> None:
        close = getattr(self.head, "close", None)
        if close is not None:
            close()

    def end(self) -> dict:
        out = {"eagle_positions_fed": self.rows.fed, "eagle_head": head_summary(self.head)}
        if self._trees:
            out["mean_tree_tokens"] = round(self._tree_tokens / self._trees, 2)
        return out


def head_summary(head) -> str:
    if head is None:
        return ""
    return f"EAGLE-{head.version} head" + (f" (layers {head.feature_layers})" if head.version == 3 else "")
