"""The suffix trie of ``_suffixtree.c`` in plain Python: the fallback where the C extension could not be
compiled (a Windows or macOS machine without a compiler). The same nodes, lazy leaves, counts and drafting
rule, step for step, so that it drafts exactly what the compiled trie drafts (tests/drafters/suffix/test_suffix.py runs
every trie test on both and compares them on random corpora); confidences are computed in float32 as the C
code computes them. It is slower: an append walks up to max_depth suffixes in Python (tens of microseconds
a token), so a large cache of past answers takes seconds to load. The rules are documented once, in the
C file; the comments here only say where Python differs in form.
"""

from __future__ import annotations

import numpy as np

SEP = -1
_F32 = np.float32


class PyTrie:
    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        # node v: token[v], count[v], pos[v] (where its newest occurrence continues), children[v] (token -> node)
        self.token, self.count, self.pos, self.children = [SEP], [0], [0], [{}]
        self.corpus: list[int] = []
        self.seq_start = 0
        self.active = [(0, 0)] * max_depth  # per suffix start % max_depth: (deepest node known, its depth)

    # -- building ---------------------------------------------------------------------------------------
    def _lazy(self, v: int) -> bool:
        """A node that occurs once and continues in the corpus."""
        return self.count[v] == 1 and not self.children[v]

    def _new_child(self, v: int, token: int, pos: int) -> int:
        c = len(self.token)
        self.token.append(token)
        self.count.append(1)
        self.pos.append(pos)
        self.children.append({})
        self.children[v][token] = c
        return c

    def _add_occurrence(self, v: int, depth: int, token: int, pos: int) -> None:
        c = self.children[v].get(token)
        if c is None:
            self._new_child(v, token, pos)
            return
        if self._lazy(c) and depth + 1 < self.max_depth:
            old = self.pos[c]  # push the lazy leaf's one earlier occurrence down a level
            if old < len(self.corpus) and self.corpus[old] != SEP:
                self._new_child(c, self.corpus[old], old + 1)
        self.count[c] += 1
        self.pos[c] = pos

    def append(self, token: int) -> None:
        corpus, depth_cap = self.corpus, self.max_depth
        p = len(corpus)
        corpus.append(token)
        if token == SEP:
            self.seq_start = len(corpus)
            return
        for s in range(max(p - depth_cap + 1, self.seq_start), p + 1):
            slot = s % depth_cap
            v, dv = (0, 0) if s == p else self.active[slot]
            want = p - s
            while dv < want:
                c = self.children[v].get(corpus[s + dv])
                if c is None:
                    break
                v, dv = c, dv + 1
            self.active[slot] = (v, dv)
            if dv < want or (v != 0 and self.count[v] < 2):
                continue
            if v == 0:
                self.count[0] += 1
            self._add_occurrence(v, dv, token, p + 1)

    # -- matching and drafting ----------------------------------------------------------------------------
    def _walk(self, pattern: list[int]) -> tuple[bool, tuple[int, int, int] | None]:
        """(whether the pattern occurs followed by a token, (node, depth, corpus position) or None where the
        C code returns before writing them)."""
        v = d = 0
        m = len(pattern)
        while d < m:
            c = self.children[v].get(pattern[d])
            if c is None:
                break
            v, d = c, d + 1
            if self._lazy(v):
                break
        p = -1
        if d < m:
            if v == 0 or not self._lazy(v):
                return False, None
            p = self.pos[v]
            for want in pattern[d:]:
                if p >= len(self.corpus) or self.corpus[p] != want:
                    return False, None
                p += 1
            d = m
        elif v != 0 and self._lazy(v):
            p = self.pos[v]
        if p >= 0:
            return p < len(self.corpus) and self.corpus[p] != SEP, (v, d, p)
        return bool(self.children[v]), (v, d, p)

    def _longest_match(self, tokens: list[int], max_len: int) -> tuple[int, tuple[int, int, int] | None]:
        lo, hi = 0, min(len(tokens), max_len)
        while lo < hi:
            mid = lo + (hi - lo + 1) // 2
            if self._walk(tokens[len(tokens) - mid :])[0]:
                lo = mid
            else:
                hi = mid - 1
        return lo, self._walk(tokens[len(tokens) - lo :])[1] if lo > 0 else None

    def draft(self, ctx, max_tokens: int, min_prob: float, factor: float, offset: float):
        """(tokens, confidences, match length): st_draft's rule."""
        depth_cap = self.max_depth
        ctx = [int(t) for t in ctx]
        m, state = self._longest_match(ctx, depth_cap - 1)
        wanted = _F32(factor) * _F32(m) + _F32(offset)
        budget = 0 if not m or not wanted > 0 else max_tokens if wanted >= max_tokens else int(wanted)
        if budget <= 0:
            return (), (), m
        room = min(budget, depth_cap // 2)
        if m > depth_cap - room:
            state = self._walk(ctx[len(ctx) - (depth_cap - room) :])[1] or state
        v, d, p = state
        conf, floor = _F32(1.0), _F32(min_prob)
        out: list[int] = []
        probs: list[float] = []
        while len(out) < budget:
            if p >= 0:  # one occurrence: follow the corpus
                if p >= len(self.corpus) or self.corpus[p] == SEP:
                    break
                token, p = self.corpus[p], p + 1
            elif d == depth_cap:  # re-match within the draft
                found, state = self._longest_match(out, depth_cap // 2)
                if found == 0:
                    break
                v, d, p = state
                continue
            else:
                best, step = self._likeliest(v, conf)
                if best is None or step < floor:
                    break
                conf, v, d, token = step, best, d + 1, self.token[best]
                if self._lazy(v):
                    p = self.pos[v]
            out.append(token)
            probs.append(float(conf))
        return tuple(out), tuple(probs), m

    def _likeliest(self, v: int, conf):
        """v's most frequent continuation (ties: the lower token) and its path confidence, in float32 over
        the occurrences that a token followed; (None, None) for a node without continuations."""
        kids = self.children[v]
        if not kids:
            return None, None
        best = min(kids.values(), key=lambda c: (-self.count[c], self.token[c]))
        followed = sum(self.count[c] for c in kids.values())
        return best, conf * _F32(self.count[best]) / _F32(followed)

    def count_of(self, pattern) -> int:
        """How often ``pattern`` occurs (st_count)."""
        v = 0
        for d, want in enumerate(pattern):
            if v != 0 and self._lazy(v):
                p = self.pos[v]
                for rest in pattern[d:]:
                    if p >= len(self.corpus) or self.corpus[p] != rest:
                        return 0
                    p += 1
                return 1
            v = self.children[v].get(int(want))
            if v is None:
                return 0
        return self.count[v]

    @property
    def corpus_len(self) -> int:
        return len(self.corpus)

    @property
    def node_count(self) -> int:
        return len(self.token)

    def memory_bytes(self) -> int:
        """An estimate: Python objects per node and per corpus token."""
        return 200 * len(self.token) + 8 * len(self.corpus)
