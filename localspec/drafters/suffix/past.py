"""The suffix drafter's memory of past answers: the answer store (on disk, per tokenizer) and the global tree
over it. One is shared by every slot's drafter of a `serve --parallel` server (drafters/memory.py): an answer one
slot finishes is there for the next draft of every other, and the cache is held in memory once, not N times.
The slots run on one OS thread and switch only inside the target's forward pass, so no draft sees the tree
half-changed."""

from __future__ import annotations

import sys

from localspec.drafters.suffix.store import AnswerStore
from localspec.drafters.suffix.tree import SuffixTree

REBUILD_AT = 1.5  # the global tree is rebuilt without the evicted answers past this x the store's bound


class PastAnswers:
    def __init__(self, store: AnswerStore | None, max_depth: int) -> None:
        self.store, self.max_depth = store, max_depth
        self.tree: SuffixTree | None = None
        self.users = 1  # the drafters holding it: the tree is freed when the last one closes
        self._rebuild()

    def _rebuild(self) -> None:
        if self.tree is not None:
            self.tree.close()
        self.tree = SuffixTree(self.max_depth)
        self._tree_tokens = 0
        if self.store is not None:
            for tokens in self.store.answers.values():
                self.tree.add_sequence(tokens.tolist())
                self._tree_tokens += len(tokens)

    def keep(self, answer: list[int]) -> None:
        """The answer joins the tree and the store, which is saved (a failed save is said, not raised)."""
        if self.store is None or not answer:
            return
        self.store.add(answer)
        if self._tree_tokens + len(answer) > REBUILD_AT * self.store.max_tokens:
            self._rebuild()  # drop the answers the store evicted (~0.25 s for 200k tokens)
        else:  # evicted answers may stay in the tree a while: their drafts are verified like any other
            self.tree.add_sequence(answer)
            self._tree_tokens += len(answer)
        try:
            self.store.save()
        except OSError as exc:  # a full or read-only disk must not end the chat
            print(f"localspec: could not save the suffix cache: {exc}", file=sys.stderr)

    def join(self) -> PastAnswers:
        self.users += 1
        return self

    def leave(self) -> None:
        self.users -= 1
        if self.users == 0 and self.tree is not None:
            self.tree.close()
            self.tree = None
