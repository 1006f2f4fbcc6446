"""Suffix Decoding (Oliaro et al., 2024): model-free drafts from suffix trees.

Two trees: one over this request (prompt + answer so far), one over earlier assistant answers (this chat
and earlier chats, persisted per tokenizer). Each step both propose a draft grown greedily by path
confidence from the longest match of the recent context; the draft with the higher score (sum of
confidences, the expected number of accepted tokens) wins. The draft length also scales with the match
length: budget = min(K, max_spec_factor * match_len + max_spec_offset). Each token's confidence is its path
confidence times match_confidence(match length), which the controller trims the draft by.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from localspec.drafters.base import DEFAULT_TURN, Drafter, Turn, match_confidence
from localspec.drafters.suffix.past import PastAnswers
from localspec.drafters.suffix.store import AnswerStore
from localspec.drafters.suffix.tree import SuffixTree, TreeDraft
from localspec.errors import ConfigError
from localspec.options import option
from localspec.types import EMPTY_DRAFT, Draft, Step


@dataclass(frozen=True)
class SuffixOptions:
    # A draft stops where its path confidence drops below 0.5 (0.3 or Arctic's 0.1 gained only 2-4% tokens per step in
    # the replay below, with more of the extra tokens rejected). The budget is 4 x match length - 2: the controller
    # trims every proposal by its confidence (path confidence x match_confidence), and a larger budget only extends
    # the same greedy chain, so proposing more costs drafting time alone (microseconds) and lets long copies be
    # verified whole. benchmarks/suffix_replay.py (perfect oracle, K=64, tokens per step for factor 4 / 2 / the former
    # 1): constructed code edits 10.9 / 9.7 / 7.4, Qwen2.5-Coder-1.5B's recorded code edits 5.6 / 5.0 / 4.1, its JSON
    # answer 3.5 / 2.7 / 2.1; factor 8 adds only ~6% more, in tokens of low confidence. Offset -2
    # still keeps a 1-token match to a 2-token draft.
    max_depth: int = option(64, "longest context it matches + drafts")
    min_token_prob: float = option(0.5, "stop a draft below this confidence", flag="--suffix-min-prob")
    max_spec_factor: float = option(4.0, "draft at most factor x match length", flag="--suffix-factor")
    max_spec_offset: float = option(
        -2.0, "... plus this many tokens (negative: short matches draft nothing)", flag="--suffix-offset"
    )
    cache_tokens: int = option(200_000, "bound of the cache of past answers on disk (0 turns it off)")
    # where that cache lives (None: localspec's data folder); `localspec bench` gives each method its own
    cache_dir: str | None = option(None, "folder of the cache of past answers", flag=None, toml=False, kind=str)
    # False: answers feed the tree in memory, never the file (`serve --no-persist`)
    persist: bool = option(True, "save answers to the cache of past answers", flag=None, toml=False)

    def __post_init__(self) -> None:
        if self.max_depth < 4:
            raise ConfigError(f"suffix max_depth must be at least 4, got {self.max_depth}")
        if not 0 <= self.min_token_prob <= 1:
            raise ConfigError(f"suffix min_token_prob must be in [0, 1], got {self.min_token_prob}")
        if not 0 <= self.max_spec_factor < math.inf:
            raise ConfigError(f"suffix max_spec_factor must be a number >= 0, got {self.max_spec_factor}")
        if not math.isfinite(self.max_spec_offset):
            raise ConfigError(f"suffix max_spec_offset must be a finite number, got {self.max_spec_offset}")
        if self.cache_tokens < 0:
            raise ConfigError(f"suffix cache_tokens must be >= 0, got {self.cache_tokens}")


def build(target, options: SuffixOptions, context) -> SuffixDrafter:
    """The drafter with the cache of past answers for the target's tokenizer (none without a target)."""
    store = None
    if target is not None and options.cache_tokens > 0:
        directory = Path(options.cache_dir) if options.cache_dir else None
        store = AnswerStore.for_tokenizer(
            target.tokenizer.key(target.vocab_size), options.cache_tokens, directory, options.persist
        )
    return SuffixDrafter(options, store)


class SuffixDrafter(Drafter):
    name = "suffix"

    def __init__(self, params: SuffixOptions = SuffixOptions(), store: AnswerStore | None = None) -> None:
        self.params = params
        self.past = PastAnswers(store, params.max_depth)
        self._closed = False
        self.local_tree: SuffixTree | None = None
        self._indexed = 0
        self._answer: list[int] = []
        self._reset_figures()

    @property
    def store(self) -> AnswerStore | None:
        return self.past.store

    @property
    def global_tree(self) -> SuffixTree:
        return self.past.tree

    def share(self, other: SuffixDrafter) -> None:
        """Draft from ``other``'s past answers (another slot's suffix drafter), and add this one's to them."""
        if other.past is not self.past:
            self.past.leave()
            self.past = other.past.join()

    def _reset_figures(self) -> None:
        self._steps = self._match_sum = 0
        self._wins = {"local": 0, "global": 0}

    def begin(self, prompt: Sequence[int], turn: Turn = DEFAULT_TURN) -> None:
        if self.local_tree is not None:
            self.local_tree.close()
        self.local_tree = SuffixTree(self.params.max_depth)
        self.local_tree.extend(prompt)
        self._indexed = len(prompt)
        self._answer = []
        self._reset_figures()

    def propose(self, context: Sequence[int], max_tokens: int) -> Draft:
        if self.local_tree is None:
            self.begin(context)
        self.local_tree.extend(context[self._indexed :])
        self._indexed = len(context)
        if max_tokens <= 0:
            return EMPTY_DRAFT
        p = self.params
        drafts = {
            "local": self.local_tree.draft(context, max_tokens, p.min_token_prob, p.max_spec_factor, p.max_spec_offset),
            "global": self.global_tree.draft(
                context, max_tokens, p.min_token_prob, p.max_spec_factor, p.max_spec_offset
            ),
        }
        winner = max(drafts, key=lambda name: drafts[name].score)  # ties: the local tree
        best: TreeDraft = drafts[winner]
        self._steps += 1
        self._match_sum += best.match_len
        if best.tokens:
            self._wins[winner] += 1
        weight = match_confidence(best.match_len)
        return Draft.chain(best.tokens, confidence=[p * weight for p in best.probs])

    def observe(self, step: Step) -> None:
        self._answer.extend(step.emitted)

    def end(self) -> dict:
        """The answer joins the global tree (and the cache on disk)."""
        self.past.keep(self._answer)
        self._answer = []
        return self._figures()

    def _figures(self) -> dict:
        return {
            "mean_match_len": round(self._match_sum / self._steps, 2) if self._steps else 0.0,
            "wins_local": self._wins["local"],
            "wins_global": self._wins["global"],
            "global_cache_tokens": self.store.n_tokens if self.store else 0,
            "global_tree_bytes": self.global_tree.memory_bytes(),
        }

    def close(self) -> None:
        if self.local_tree is not None:
            self.local_tree.close()
            self.local_tree = None
        if not self._closed:  # once: the past answers may be another slot's too
            self._closed = True
            self.past.leave()
