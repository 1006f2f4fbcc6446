"""How many draft tokens to verify each step: a fixed K, or a controller that picks K from what it measures.

The controller maximises expected tokens per second. For a draft of L tokens (a chain) with conditional
acceptance a_1, a_2, ... (a_i: position i is accepted given that 1..i-1 were),

    E(L) = 1 + sum_{i<=L} prod_{j<=i} a_j          tokens emitted by the step (bonus/residual included)
    T(L) = overhead + draft(L) + verify(L + 1)       seconds the step takes

and it picks the L with the largest E(L) / T(L); L = 0 is plain decoding. Everything on the right is
measured in this session: verify(n) per window size n (it differs per machine: on this CPU 5 positions
cost 2.8 single steps, on a GPU about 1), draft(k) as a fitted line, the per-step overhead, and a_i from
recent outcomes (exponentially decayed, so it follows the conversation).

Two kinds of drafter are handled differently:
- cheap ones (n-gram, suffix: microseconds per call) always propose; the controller then decides how much
  of the proposal to verify. When it verifies nothing, the proposal is kept as a *shadow* and compared
  with the tokens the target emits next, which for a point-mass draft is an unbiased sample of its
  acceptance (P(target emits x) = p(x) = P(accept x)). So a useless drafter costs a dictionary lookup.
- costly ones (a draft model) are only run when the plan says they pay. If they could not pay even with
  every token accepted, they are not run at all; otherwise a probe step now and then (at doubling
  intervals, reset each turn) keeps the acceptance estimate honest.
"""
from __future__ import annotations

from typing import Optional, Sequence

from localspec.types import Draft

DECAY = 0.9  # per observation of a position: ~10 recent outcomes dominate its acceptance estimate
PRIOR_ACCEPT, PRIOR_WEIGHT = 0.5, 2.0  # position 1 with no data is a coin flip worth two observations
COST_EMA = 0.2  # weight of the newest timing in the running averages
PRIOR_SLOPE = 0.5  # below the smallest measured window, each position costs half a single step
TURN_CARRY = 0.25  # share of the acceptance evidence that carries over into the next turn
MARGIN = 1.05  # estimates are noisy and a wasted verify costs up to several steps: speculate on clear gains
CHEAP = 0.05  # a drafter whose largest draft costs under this share of a single step is "cheap"
EXPLORE_EVERY = 16  # proposals between exploring steps, which verify the least-measured window size...
EXPLORE_NEAR = 0.9  # ...among those estimated within this factor of the best length's rate
PROBE_FIRST, PROBE_MAX = 16, 256  # steps between probes of a costly drafter that does not pay


class FixedK:
    """Always draft (up to) K tokens and verify all of them: `--draft-tokens K`."""

    adaptive = False

    def __init__(self, k: int) -> None:
        self.max_k = k

    @property
    def label(self) -> str:
        return f"K={self.max_k}"

    def begin_turn(self) -> None:
        pass

    def plan(self, cap: int) -> int:
        return cap

    def trim(self, draft: Draft, draft_s: float) -> int:
        return len(draft)

    def record(self, verified: int, accepted: int, emitted: Sequence[int], draft_s: float, verify_s: float,
               step_s: float) -> None:
        pass

    def reset_drafter(self) -> None:
        pass

    def figures(self) -> dict:
        return {"mode": "fixed", "k": self.max_k}


class AdaptiveK:
    """Picks K each step (0 <= K <= max_k) to maximise expected tokens per second; see the module doc."""

    adaptive = True

    def __init__(self, max_k: int = 8) -> None:
        self.max_k = max_k
        self._verify: dict[int, float] = {}  # window size n -> running mean seconds
        self._verify_n: dict[int, int] = {}  # how often each size was measured
        self._overhead: Optional[float] = None  # per-step seconds outside draft and verify
        self.reset_drafter()

    @property
    def label(self) -> str:
        return f"adaptive K<={self.max_k}"

    # -- state of the current drafter -----------------------------------------------------------------
    def reset_drafter(self) -> None:
        """A new drafter: forget its acceptance and draft cost (the machine's verify costs stay)."""
        self._seen = [0.0] * (self.max_k + 1)  # decayed counts per position (index 1..max_k)
        self._hits = [0.0] * (self.max_k + 1)
        self._fit = [0.0] * 5  # decayed sums for draft(k) = a + b k: n, k, kk, t, kt
        self._full: Optional[Draft] = None  # the last proposal, before trimming
        self._asked = 0  # tokens the last plan asked the drafter for
        self._shadow: list[int] = []  # an unverified point-mass proposal being compared with the output
        self._shadow_pos = 0
        self._never_pays = self._probing = False
        self._steps = 0
        self.begin_turn()
        self._chosen: list[int] = []

    def begin_turn(self) -> None:
        # a new turn may be a different kind of text: what the last one taught counts for less
        self._seen = [TURN_CARRY * s for s in self._seen]
        self._hits = [TURN_CARRY * h for h in self._hits]
        self._shadow, self._shadow_pos = [], 0
        self._probe_every, self._since_probe = PROBE_FIRST, PROBE_FIRST  # probe on the first step
        self._chosen = []

    # -- estimates --------------------------------------------------------------------------------------
    def acceptance_profile(self) -> list[float]:
        """Estimated conditional acceptance of draft positions 1..max_k (index 0 unused). A position with
        few observations leans on the one before it (drafts rarely get better further out)."""
        out, prior = [1.0], PRIOR_ACCEPT
        for i in range(1, self.max_k + 1):
            prior = (self._hits[i] + prior * PRIOR_WEIGHT) / (self._seen[i] + PRIOR_WEIGHT)
            out.append(prior)
        return out

    def expected_tokens(self, accept_all: bool = False) -> list[float]:
        """E(k) for k = 0..max_k."""
        profile = self.acceptance_profile()
        out, total, chain = [1.0], 1.0, 1.0
        for i in range(1, self.max_k + 1):
            chain *= 1.0 if accept_all else profile[i]
            total += chain
            out.append(total)
        return out

    def verify_cost(self, n: int, known: Optional[list[int]] = None) -> Optional[float]:
        """Seconds for a forward of n positions: measured, else interpolated between measured sizes. Past
        the largest measured size it is optimistic (no dearer than that size), so a bigger window that
        might pay gets tried and measured instead of being ruled out by a guess; below the smallest it
        assumes PRIOR_SLOPE single steps per position."""
        if n in self._verify:
            return self._verify[n]
        known = sorted(self._verify) if known is None else known  # callers asking for many sizes sort once
        if not known:
            return None
        lo = [m for m in known if m < n]
        hi = [m for m in known if m > n]
        if lo and hi:
            a, b = lo[-1], hi[0]
            return self._verify[a] + (self._verify[b] - self._verify[a]) * (n - a) / (b - a)
        if lo:
            return self._verify[lo[-1]]
        near = hi[0]
        return self._verify[near] * (1 + PRIOR_SLOPE * (n - 1)) / (1 + PRIOR_SLOPE * (near - 1))

    def draft_cost(self, k: int, line: Optional[tuple[float, float]] = None) -> float:
        if k == 0:
            return 0.0
        a, b = self._draft_line() if line is None else line
        return max(0.0, a + b * k)

    def _draft_line(self) -> tuple[float, float]:
        """(intercept, slope) of drafting time against k, from the decayed sums."""
        n, sk, skk, st, skt = self._fit
        if n < 0.5:
            return 0.0, 0.0
        var = skk / n - (sk / n) ** 2
        if var > 1e-9:
            b = (skt / n - sk / n * st / n) / var
            return st / n - b * sk / n, b
        return 0.0, (st / sk if sk else 0.0)  # every measured call drafted the same k: no intercept

    def rates(self, top: int, draft_s: Optional[float] = None, accept_all: bool = False) -> list[float]:
        """Expected tokens per second for k = 0..top (draft_s: drafting time already spent)."""
        if not self._verify:
            return [0.0] * (top + 1)
        expected = self.expected_tokens(accept_all)
        overhead = self._overhead or 0.0
        known = sorted(self._verify)
        line = self._draft_line()
        out = []
        for k in range(top + 1):
            drafting = self.draft_cost(k, line) if draft_s is None else draft_s
            out.append(expected[k] / max(overhead + drafting + self.verify_cost(k + 1, known), 1e-9))
        return out

    def _cheap(self, cap: int) -> bool:
        single = self.verify_cost(1)
        return single is None or self.draft_cost(cap) < CHEAP * single

    # -- the three calls of a step ----------------------------------------------------------------------
    def plan(self, cap: int) -> int:
        """How many tokens to ask the drafter for."""
        self._asked = self._plan(cap)
        return self._asked

    def _plan(self, cap: int) -> int:
        if cap <= 0:
            return 0
        if self._cheap(cap) or not self._verify:
            return cap  # proposing is (nearly) free, or nothing is measured yet: trim decides
        rates = self.rates(cap)
        best = _argmax(rates)
        if best > 0:
            self._probe_every = PROBE_FIRST
            return best
        self._never_pays = max(self.rates(cap, accept_all=True)) <= rates[0]
        if self._never_pays:
            return 0
        self._since_probe += 1
        if self._since_probe < self._probe_every:
            return 0
        self._since_probe, self._probe_every = 0, min(PROBE_MAX, self._probe_every * 2)
        self._probing = True
        return min(cap, 2)

    def trim(self, draft: Draft, draft_s: float) -> int:
        """How much of the proposal to verify, its drafting time already spent."""
        self._full = draft
        if not len(draft) or not self._verify or self._probing:
            self._probing = False
            return len(draft)
        rates = self.rates(len(draft), draft_s)
        best = _argmax(rates)
        self._steps += 1
        if self._steps % EXPLORE_EVERY == 0:
            # now and then the least-measured of the lengths estimated close to the best: one noisy first
            # timing must not rule a size out for good, and acceptance further out stays known
            near = [k for k in range(1, len(draft) + 1) if rates[k] >= EXPLORE_NEAR * rates[best]]
            if near:
                best = min(near, key=lambda k: (self._verify_n.get(k + 1, 0), -k))
        if best == 0 and draft.q is None and not self._shadow:
            self._shadow, self._shadow_pos = list(draft.tokens), 0
        return best

    def record(self, verified: int, accepted: int, emitted: Sequence[int], draft_s: float, verify_s: float,
               step_s: float) -> None:
        """The step's outcome: `verified` draft tokens went to the target, `accepted` of them passed,
        `emitted` is what the step output; times in seconds."""
        self._chosen.append(verified)
        n = verified + 1
        count = self._verify_n[n] = self._verify_n.get(n, 0) + 1
        old = self._verify.get(n, verify_s)
        if count > 3:
            verify_s = min(verify_s, 2 * old)  # a stray slow step (the collector, another process) is clipped
        self._verify[n] = old + max(COST_EMA, 1 / count) * (verify_s - old)  # a plain mean until it settles
        rest = max(0.0, step_s - draft_s - verify_s)
        self._overhead = rest if self._overhead is None else self._overhead + COST_EMA * (rest - self._overhead)
        if self._asked:
            self._fit_draft(self._asked, draft_s)
        for i in range(1, verified + 1):
            if i > accepted + 1:
                break
            self._observe(i, i <= accepted)
        full = self._full
        if full is not None and full.q is None and 0 < verified == accepted < len(full) and len(emitted) > verified:
            # every verified token passed and the target's own next token is free evidence for the
            # proposal's next position (it equals it with exactly that position's acceptance probability)
            self._observe(verified + 1, emitted[verified] == full.tokens[verified])
        self._full = None
        if verified == 0:
            self._follow_shadow(emitted)
        else:
            self._shadow = []

    def _follow_shadow(self, emitted: Sequence[int]) -> None:
        for token in emitted:
            if not self._shadow:
                return
            pos = self._shadow_pos
            hit = token == self._shadow[pos]
            self._observe(pos + 1, hit)
            self._shadow_pos += 1
            if not hit or self._shadow_pos >= len(self._shadow):
                self._shadow, self._shadow_pos = [], 0

    def _observe(self, i: int, hit: bool) -> None:
        if i > self.max_k:
            return
        self._seen[i] = DECAY * self._seen[i] + 1.0
        self._hits[i] = DECAY * self._hits[i] + float(hit)

    def _fit_draft(self, k: int, seconds: float) -> None:
        f = self._fit
        if f[0] >= 3:  # a stray slow call (a page fault, the collector) must not make a drafter look costly
            seconds = min(seconds, 3 * self.draft_cost(k) + 1e-4)
        for j, value in enumerate((1.0, k, k * k, seconds, k * seconds)):
            f[j] = DECAY * f[j] + value

    def figures(self) -> dict:
        chosen = self._chosen
        out = {"mode": "adaptive", "max_k": self.max_k,
               "mean_k": round(sum(chosen) / len(chosen), 3) if chosen else None,
               "plain_steps": sum(1 for k in chosen if k == 0),
               "acceptance_estimate": [round(a, 3) for a in self.acceptance_profile()[1:]],
               "verify_ms": {n: round(s * 1e3, 2) for n, s in sorted(self._verify.items())}}
        if self._never_pays:
            out["note"] = "the drafter cannot pay on this machine even if every token were accepted"
        return out


def _argmax(values: list[float]) -> int:
    """The best k; speculating (k > 0) must beat plain decoding (k = 0) by MARGIN, not just by noise."""
    best = max(range(len(values)), key=values.__getitem__)
    return best if best == 0 or values[best] >= MARGIN * values[0] else 0


def make_policy(draft_tokens) -> "FixedK | AdaptiveK":
    """`--draft-tokens`: an int fixes K; 'auto' (or 'auto:N' for a different maximum) is the controller."""
    from localspec.errors import ConfigError
    if isinstance(draft_tokens, (FixedK, AdaptiveK)):
        return draft_tokens
    text = str(draft_tokens).strip().lower()
    if text.startswith("auto"):
        max_k = text.partition(":")[2] or "8"
        if not max_k.isdigit() or int(max_k) < 1:
            raise ConfigError(f"--draft-tokens auto:N needs a whole N >= 1, got {draft_tokens!r}")
        return AdaptiveK(int(max_k))
    try:
        k = int(text)
    except ValueError:
        raise ConfigError(f"--draft-tokens takes a whole number >= 1 or 'auto', got {draft_tokens!r}") from None
    if k < 1:
        raise ConfigError(f"--draft-tokens must be at least 1 (or 'auto'), got {k}")
    return FixedK(k)
