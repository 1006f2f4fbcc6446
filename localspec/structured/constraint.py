"""One answer under a grammar: llguidance's matcher over the model's vocabulary, as the engine uses it.

- ``rows(out, draft)``: the verify rows restricted to what the grammar allows after each node's path (masked
  before the sampler: the answer is the target's distribution renormalised over the allowed tokens, the
  argmax of the allowed ones at T = 0). A row's mask is computed only when verification visits it.
- ``cut(draft)``: a point-mass chain (n-gram, suffix, forced tokens) stops before its first token the grammar
  forbids; that token would be rejected (p = 0) and a point mass's residual is p itself, so the cut changes
  nothing but the window's cost. Drafts with q are verified whole: with a masked p and the drafter's own q,
  min(1, p/q) and the residual max(0, p - q) stay exact, where cutting them would not.
- ``forced()``: the tokens the grammar allows no alternative to (the grammar drafter proposes them).
- ``commit(tokens)``: the emitted tokens move the matcher on (it is never moved by drafts: validation and
  masks consume and roll back).

The grammar's work per token is bounded, so that no grammar can stall the engine thread: llguidance's own
limits (``LIMITS``: Earley items and lexer fuel per mask, items per parser row) and a time budget
(``TOKEN_BUDGET_S``) for one row's mask and for the matcher's move per token. An ambiguous grammar's cost grows with
the answer (measured: ``x: x x | x x x | "a" | "b" | ""`` takes 29 ms per token after 180 tokens and 0.36 s
after 400, where llguidance's row limit alone would stop it, 33 s in); past either bound the answer ends with a
``GrammarError`` that says so. A JSON schema's mask costs 10-30 µs.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

import numpy as np

from localspec.errors import ConfigError, GrammarError
from localspec.rows import Rows
from localspec.structured.grammar import Grammar
from localspec.types import Draft

LIMITS = {"step_max_items": 50_000, "step_lexer_fuel": 200_000, "max_items_in_row": 2_000}  # llguidance's defaults
TOKEN_BUDGET_S = 0.25  # the most one row's mask, or the matcher's move per token, may take (CPU seconds)
LIMIT_ERROR = re.compile(r"Too many items|max is \d+|fuel|limit \d+", re.IGNORECASE)  # llguidance's limit errors


class Constraint:
    def __init__(self, grammar: Grammar, tokenizer, vocab_size: int, limits: dict | None = None) -> None:
        import llguidance

        self.grammar, self.vocab_size = grammar, vocab_size
        bounds = llguidance.LLParserLimits(**{**LIMITS, **(limits or {})})
        self.matcher = llguidance.LLMatcher(tokenizer, grammar.text, log_level=0, limits=bounds)
        if self.matcher.is_error():
            raise ConfigError(f"the {grammar.kind} grammar cannot be used: {self.matcher.get_error()}")
        self._eos = set(tokenizer.eos_tokens)
        self._bits = np.zeros((tokenizer.vocab_size + 31) // 32, dtype=np.int32)
        self.masks, self.mask_s = 0, 0.0  # rows masked this answer and the seconds their masks took
        self.forced_drafted = self.forced_accepted = 0  # the grammar drafter's forced tokens (drafters/grammar.py)
        self.committed = 0  # tokens the matcher moved past

    def allowed(self, path: Sequence[int] = ()) -> np.ndarray:
        """Which tokens (bool per logit column) the grammar allows after the committed answer and ``path``."""
        started, cpu, m = time.perf_counter(), time.thread_time(), self.matcher
        if path and not m.consume_tokens(list(path)):
            self._check(time.thread_time() - cpu)  # past its limits: a GrammarError
            raise RuntimeError(f"path {list(path)} is not allowed by the grammar (validate drafts first)")
        try:
            m.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
            self._check(time.thread_time() - cpu)
        finally:
            if path and not m.is_error():
                m.rollback(len(path))
        bits = np.unpackbits(self._bits.view(np.uint8), bitorder="little")[: self.vocab_size]
        if bits.shape[0] < self.vocab_size:  # logit columns past the tokenizer's vocabulary: never allowed
            bits = np.pad(bits, (0, self.vocab_size - bits.shape[0]))
        self.masks, self.mask_s = self.masks + 1, self.mask_s + time.perf_counter() - started
        return bits.astype(bool)

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many leading ``tokens`` the grammar allows (nothing is consumed)."""
        return self.matcher.validate_tokens(list(tokens)) if tokens else 0

    def cut(self, draft: Draft) -> Draft:
        """A point-mass chain up to its first token the grammar forbids (see the module doc). Trees are left
        whole: their forbidden nodes are rejected like any other, and verification only ever computes the
        masks of nodes it accepted, which the grammar allowed."""
        if not draft.is_chain or draft.q is not None or not len(draft):
            return draft
        return draft.prefix(self.valid_prefix(draft.tokens))

    def forced(self) -> list[int]:
        """The tokens the grammar forces next (none may be chosen instead), without consuming them."""
        return list(self.matcher.compute_ff_tokens())

    def commit(self, tokens: Sequence[int]) -> None:
        """Move the matcher past emitted ``tokens`` (an end of generation last: a finished grammar has stopped
        the matcher, which then takes nothing more, and needs none)."""
        tokens, cpu = list(tokens), time.thread_time()
        ends = bool(tokens) and tokens[-1] in self._eos
        ok = self.matcher.consume_tokens(tokens[:-1] if ends else tokens)
        if ok and ends and not self.matcher.is_stopped():
            ok = self.matcher.consume_tokens(tokens[-1:])
        self._check((time.thread_time() - cpu) / max(len(tokens), 1))
        if not ok:
            raise RuntimeError(f"the grammar refused emitted tokens: {self._error()}")
        self.committed += len(tokens)

    def _check(self, seconds: float) -> None:
        """End the answer where the grammar's work (one mask, or one token's move: this thread's CPU seconds)
        went past its bounds (see the module doc). Any other error of the matcher is a bug, not the user's."""
        error = self._error() if self.matcher.is_error() else ""
        if LIMIT_ERROR.search(error):
            why = f"it went past llguidance's limits ({error})"
        elif seconds > TOKEN_BUDGET_S:
            why = f"one token took {1e3 * seconds:.1f} ms of grammar work (the bound is {1e3 * TOKEN_BUDGET_S:g} ms)"
        else:
            return
        raise GrammarError(
            f"the {self.grammar.kind} grammar became too costly to follow after {self.committed} tokens: {why}; "
            "simplify it (an ambiguous rule such as `x: x x | ...` grows with the answer: write it as a repetition)"
        )

    def _error(self) -> str:
        lines = [line for line in self.matcher.get_error().splitlines() if line.strip()]
        return lines[0].strip() if lines else "no reason given"

    def figures(self, generated: int) -> dict:
        """The turn's grammar figures for its stats: what was constrained, forced tokens drafted and accepted,
        the masks' cost per generated token."""
        return {
            "kind": self.grammar.kind,
            "forced_drafted": self.forced_drafted,
            "forced_accepted": self.forced_accepted,
            "masks": self.masks,
            "mask_ms_per_token": round(1e3 * self.mask_s / max(generated, 1), 3),
        }

    @property
    def finished(self) -> bool:
        return self.matcher.is_stopped()

    def rows(self, rows: Rows, draft: Draft) -> Rows:
        return MaskedRows(rows, self, draft)


class MaskedRows:
    """Verify rows with each row's logits restricted to what the grammar allows after its node's path."""

    def __init__(self, rows: Rows, constraint: Constraint, draft: Draft) -> None:
        self.inner, self.constraint, self.draft = rows, constraint, draft
        self.shape = rows.shape
        self._masks: dict[int, np.ndarray] = {}

    def __len__(self) -> int:
        return len(self.inner)

    def mask(self, i: int) -> np.ndarray:
        if i not in self._masks:
            self._masks[i] = self.constraint.allowed(self._path(i))
        return self._masks[i]

    def _path(self, i: int) -> list[int]:
        """The draft tokens before row i: node i - 1 and its ancestors."""
        path, node = [], i - 1
        while node >= 0:
            path.append(self.draft.tokens[node])
            node = self.draft.parents[node]
        return path[::-1]

    def candidates(self, i: int, sampler) -> tuple[np.ndarray, np.ndarray]:
        return sampler.distribution(self.inner.row(i), allowed=self.mask(i))

    def row(self, i: int) -> np.ndarray:
        return np.where(self.mask(i), self.inner.row(i), -np.inf).astype(np.float32)

    def argmax(self) -> np.ndarray:
        return np.array([int(np.argmax(self.row(i))) for i in range(len(self))])

    def top_gaps(self, index: list[int]) -> np.ndarray:
        from localspec.rows import top_gaps

        return top_gaps(np.stack([self.row(i) for i in index])) if index else np.zeros(0)

    def numpy(self) -> np.ndarray:
        return np.stack([self.row(i) for i in range(len(self))])


def special_token(tokenizer, ids: Sequence[int]) -> int | None:
    """The token of ``ids`` (a text's tokens, its special tokens parsed) when it is one token that
    ``tokenizer`` (an llguidance LLTokenizer) holds special, else None (several tokens, or one a grammar sees
    as text)."""
    one = len(ids) == 1 and 0 <= ids[0] < tokenizer.vocab_size
    return ids[0] if one and tokenizer.is_special_token(ids[0]) else None
