"""How many draft tokens to verify each step: a fixed K, or a controller that picks K from what it measures.

The controller maximises expected tokens per second. For a draft of L tokens (a chain) with conditional
acceptance a_1, a_2, ... (a_i: token i is accepted given that 1..i-1 were),

    E(L) = 1 + sum_{i<=L} prod_{j<=i} a_j          tokens emitted by the step (bonus/residual included)
    T(L) = overhead + draft(L) + verify(L + 1)       seconds the step takes

and it picks the L with the largest E(L) / T(L); L = 0 is plain decoding. Everything on the right is
measured in this session: verify(n) per window size n — the whole curve, which on CPUs is neither linear
nor monotone (llama.cpp's repacked kernels make 16 positions cheaper than 12 on this box) and on a GPU is
nearly flat —, draft(k) as a fitted line, the per-step overhead, and a_i from recent outcomes
(exponentially decayed, so it follows the conversation).

a_i is learnt per *confidence* of the token, not only per position: a drafter says how sure it is of each
token (a 40-token suffix match versus a 3-token one, an n-gram match's length, a draft model's q), and the
controller keeps acceptance per (confidence bucket, position band). So a long confident copy is verified
64 tokens at a time while a weak guess in the same turn is verified short or not at all. Drafts without a
confidence are judged by position alone.

Window sizes that were never measured are estimated pessimistically (the mean per-token slope so far) and
tried only out of an exploration budget: the estimated time an exploring step loses against the best
known length is paid from 1% of decode time. The measured curve is persisted per model file, backend,
build and threads (localspec/cost_cache.py), so the next start begins where this one ended.

Two kinds of drafter are handled differently:
- cheap ones (n-gram, suffix: microseconds per call) always propose; the controller then decides how much
  of the proposal to verify. When it verifies nothing, the proposal is kept as a *shadow* and compared
  with the tokens the target emits next, which for a point-mass draft is an unbiased sample of its
  acceptance (P(target emits x) = p(x) = P(accept x)). So a useless drafter costs a dictionary lookup.
- costly ones (a draft model) are only run when the plan says they pay, and a draft model that has to
  catch up on the context first (after steps without drafting, or a new prompt) only when the catch-up
  pays back within PAYBACK_TOKENS tokens. If they could not pay even with every token accepted, they are
  not run at all; otherwise a probe step now and then keeps the acceptance estimate honest. A probe is
  paid from the exploration budget, its catch-up included, so a costly drafter that does not pay is fed
  (nearly) nothing. Before a costly drafter has drafted, its own figure (``Drafter.cost_per_token``,
  timed at load) stands in for the measured draft cost; a drafter of unknown cost is first asked for a
  short draft.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from localspec.types import Draft

MAX_K = 64  # `--draft-tokens auto` verifies up to this many draft tokens in one window
DECAY = 0.9  # per step that observes an estimate: ~10 recent steps dominate it
PRIOR_ACCEPT, PRIOR_WEIGHT = 0.5, 2.0  # position 1 with no data is a coin flip worth two observations
COST_EMA = 0.2  # weight of the newest timing in the running averages
PRIOR_SLOPE = 0.5  # below the smallest measured window, each position costs half a single step
MIN_SLOPE = 0.1  # past the largest measured window, each position costs at least this share of a step
TURN_CARRY = 0.25  # share of the acceptance evidence that carries over into the next turn
MARGIN = 1.05  # estimates are noisy and a wasted verify costs up to several steps: speculate on clear gains
CHEAP = 0.05  # a drafter whose largest draft costs under this share of a single step is "cheap"
FIRST_WINDOW = 4  # with nothing measured yet, verify at most this many tokens
MEASURED = 2  # a window size timed this often counts as measured; below it, trying it is exploration
EXPLORE_SHARE = 0.01  # exploration may lose at most this share of decode time (estimated)...
EXPLORE_CAP_S = 1.0  # ...saved up to this many seconds
EXPLORE_GAIN = 1.25  # and only on a length that would beat the best by this factor were its window one step
CURVE_EVERY = 16  # timings between rebuilds of the interpolated cost curve
PAYBACK_TOKENS = 64  # a costly drafter's catch-up must be won back within this many tokens
PROBE_K = 2  # a probe of a costly drafter that does not pay (yet) drafts this many tokens
# Confidence buckets (upper edges); a drafter's confidence is in [0, 1] (see Draft.confidence).
CONFIDENCE_EDGES = (0.2, 0.35, 0.5, 0.6, 0.7, 0.8, 0.87, 0.92, 0.96)


def band(position: int) -> int:
    """Position bands 1, 2, 3-4, 5-8, 9-16, ...: acceptance changes along a draft, ever slower."""
    return (position - 1).bit_length()


def bucket(confidence: float) -> int:
    return bisect_right(CONFIDENCE_EDGES, confidence)


class FixedK:
    """Always draft (up to) K tokens and verify all of them: `--draft-tokens K`."""

    adaptive = False

    def __init__(self, k: int) -> None:
        self.max_k = k

    @property
    def label(self) -> str:
        return f"K={self.max_k}"

    def begin_turn(self, cost_per_token: float | None = 0.0) -> None:
        pass

    def plan(self, cap: int, catchup_s: float = 0.0) -> int:
        return cap

    def trim(self, draft: Draft, draft_s: float) -> int:
        return len(draft)

    def record(
        self, verified: int, accepted: int, emitted: Sequence[int], draft_s: float, verify_s: float, step_s: float
    ) -> None:
        pass

    def reset_drafter(self) -> None:
        pass

    def costs(self) -> dict:
        return {}

    def swap_costs(self, saved: dict) -> None:
        pass

    def figures(self) -> dict:
        return {"mode": "fixed", "k": self.max_k}


class AdaptiveK:
    """Picks K each step (0 <= K <= max_k) to maximise expected tokens per second; see the module doc."""

    adaptive = True

    def __init__(self, max_k: int = MAX_K) -> None:
        self.max_k = max_k
        self._bands = [0] + [band(i) for i in range(1, max_k + 1)]  # position -> band, looked up per token
        self._verify: dict[int, float] = {}  # window size n -> running mean seconds
        self._verify_n: dict[int, int] = {}  # how often each size was measured
        self._curve: list[float] | None = None  # verify_cost(n) for n = 0..max_k + 1 (see _cost_curve)
        self._curve_age = 0
        self._overhead: float | None = None  # per-step seconds outside draft and verify
        self._loaded = 0  # window sizes whose cost came from an earlier session
        self._stale: set[int] = set()  # loaded sizes, until the first timing of this session rescales them
        self._budget = 0.0  # seconds exploration may still lose
        self._explored, self._explore_spent = 0, 0.0
        self.reset_drafter()

    @property
    def label(self) -> str:
        return f"adaptive K<={self.max_k}"

    # -- state of the current drafter -----------------------------------------------------------------
    def reset_drafter(self) -> None:
        """A new drafter: forget its acceptance and draft cost (the machine's verify costs stay)."""
        self._seen = [0.0] * (self.max_k + 1)  # decayed counts per position (index 1..max_k)
        self._hits = [0.0] * (self.max_k + 1)
        n_bands = band(self.max_k) + 1
        # decayed counts per confidence bucket and position band
        self._cseen = [[0.0] * n_bands for _ in range(len(CONFIDENCE_EDGES) + 1)]
        self._chits = [[0.0] * n_bands for _ in range(len(CONFIDENCE_EDGES) + 1)]
        self._step_obs: dict[tuple[int, int], list[int]] = {}  # this step's (bucket, band) -> [seen, hits]
        self._fit = [0.0] * 5  # decayed sums for draft(k) = a + b k: n, k, kk, t, kt
        self._full: Draft | None = None  # the last proposal, before trimming
        self._full_conf: tuple[float, ...] | None = None  # and its tokens' confidence
        self._asked = 0  # tokens the last plan asked the drafter for
        self._shadow: Draft | None = None  # an unverified point-mass proposal being compared with the output
        self._shadow_pos = 0
        self._never_pays = self._probing = False
        self.begin_turn()
        self._chosen: list[int] = []

    def begin_turn(self, cost_per_token: float | None = 0.0) -> None:
        """cost_per_token: the drafter's own figure for a drafted token, used until drafting is timed
        (0: a lookup; None: unknown)."""
        self._draft_hint = cost_per_token
        # a new turn may be a different kind of text: what the last one taught counts for less
        self._seen = [TURN_CARRY * s for s in self._seen]
        self._hits = [TURN_CARRY * h for h in self._hits]
        self._cseen = [[TURN_CARRY * s for s in row] for row in self._cseen]
        self._chits = [[TURN_CARRY * h for h in row] for row in self._chits]
        self._shadow, self._shadow_pos = None, 0
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

    def _bucket_row(self, b: int, first: float) -> list[float]:
        """Acceptance per position band for confidence bucket b; a band with few observations leans on the
        band before it, the first band on the position-1 estimate of all drafts (``first``)."""
        out, prior = [], first
        for seen, hits in zip(self._cseen[b], self._chits[b], strict=False):
            prior = (hits + prior * PRIOR_WEIGHT) / (seen + PRIOR_WEIGHT)
            out.append(prior)
        return out

    def draft_acceptance(self, draft: Draft) -> list[float]:
        """Estimated conditional acceptance of each token of a proposal (index 0 unused)."""
        profile = self.acceptance_profile()
        confidence = draft.token_confidence()
        if confidence is None:
            return [1.0] + [profile[min(i, self.max_k)] for i in range(1, len(draft) + 1)]
        rows: dict[int, list[float]] = {}
        out = [1.0]
        bands = self._bands
        for i, c in enumerate(confidence, 1):
            b = bisect_right(CONFIDENCE_EDGES, c)
            row = rows.get(b)
            if row is None:
                row = rows[b] = self._bucket_row(b, profile[1])
            out.append(row[bands[i]])
        return out

    def expected_tokens(self, accept_all: bool = False, acceptance: list[float] | None = None) -> list[float]:
        """E(k) for k = 0..len(acceptance) - 1 (default: by position, k = 0..max_k)."""
        profile = acceptance if acceptance is not None else self.acceptance_profile()
        out, total, chain = [1.0], 1.0, 1.0
        for a in profile[1:]:
            chain *= 1.0 if accept_all else a
            total += chain
            out.append(total)
        return out

    def verify_cost(self, n: int) -> float | None:
        """Seconds for a forward of n positions: measured, else interpolated between measured sizes. Below
        the smallest measured size each position costs PRIOR_SLOPE single steps; past the largest, the mean
        per-position slope so far (at least MIN_SLOPE of a step) — a guess on the dear side, so a big
        window is tried out of the exploration budget rather than on faith."""
        if not self._verify:
            return None
        if n in self._verify:
            return self._verify[n]
        if self._curve is not None and n < len(self._curve):
            return self._curve[n]
        return self._estimate(n, sorted(self._verify))

    def _estimate(self, n: int, known: list[int]) -> float:
        v = self._verify
        j = bisect_right(known, n)
        if 0 < j < len(known):
            a, b = known[j - 1], known[j]
            return v[a] + (v[b] - v[a]) * (n - a) / (b - a)
        low = known[0]
        single = v[1] if 1 in v else v[low] / (1 + PRIOR_SLOPE * (low - 1))
        if j == 0:
            return single * (1 + PRIOR_SLOPE * (n - 1))
        top = known[-1]
        slope = max((v[top] - single) / (top - 1) if top > 1 else PRIOR_SLOPE * single, MIN_SLOPE * single)
        return v[top] + slope * (n - top)

    def _cost_curve(self) -> list[float]:
        """verify_cost(n) for n = 0..max_k + 1. Measured sizes are kept current by every timing; the
        estimates between and past them are rebuilt when a new size is measured and every CURVE_EVERY
        timings (they move little, and rebuilding costs more than the rest of a step's planning)."""
        if self._curve is None:
            known = sorted(self._verify)
            self._curve = [0.0] + [self._verify.get(n) or self._estimate(n, known) for n in range(1, self.max_k + 2)]
            self._curve_age = 0
        return self._curve

    def draft_cost(self, k: int, line: tuple[float, float] | None = None) -> float:
        if k == 0:
            return 0.0
        a, b = self._draft_line() if line is None else line
        return max(0.0, a + b * k)

    def _draft_line(self) -> tuple[float, float]:
        """(intercept, slope) of drafting time against k, from the decayed sums."""
        n, sk, skk, st, skt = self._fit
        if n < 0.5:
            return 0.0, self._draft_hint or 0.0
        var = skk / n - (sk / n) ** 2
        if var > 1e-9:
            b = (skt / n - sk / n * st / n) / var
            return st / n - b * sk / n, b
        return 0.0, (st / sk if sk else 0.0)  # every measured call drafted the same k: no intercept

    def _times(self, top: int, draft_s: float | None) -> list[float]:
        """Estimated seconds of a step verifying k = 0..top tokens (draft_s: drafting time already spent)."""
        curve, overhead = self._cost_curve(), self._overhead or 0.0
        if draft_s is not None:
            return [overhead + draft_s + c for c in curve[1 : top + 2]]
        line = self._draft_line()
        return [overhead + self.draft_cost(k, line) + curve[k + 1] for k in range(top + 1)]

    def rates(self, top: int, draft_s: float | None = None, accept_all: bool = False) -> list[float]:
        """Expected tokens per second for k = 0..top by position alone (the plan, before a draft exists)."""
        if not self._verify:
            return [0.0] * (top + 1)
        expected = self.expected_tokens(accept_all)
        return [e / t for e, t in zip(expected, self._times(top, draft_s), strict=False)]

    def _cheap(self, cap: int) -> bool:
        single = self.verify_cost(1)
        return single is not None and self.draft_cost(cap) < CHEAP * single

    # -- the three calls of a step ----------------------------------------------------------------------
    def plan(self, cap: int, catchup_s: float = 0.0) -> int:
        """How many tokens to ask the drafter for; catchup_s: what the drafter would first spend catching
        up on the context."""
        self._asked = self._plan(min(cap, self.max_k), catchup_s)
        return self._asked

    def _plan(self, cap: int, catchup_s: float) -> int:
        if cap <= 0:
            return 0
        if self._fit[0] < 0.5 and self._draft_hint is None:
            return min(cap, FIRST_WINDOW)  # a drafter of unknown cost: a short first call times it
        if not self._verify:  # nothing measured yet: trim decides; a costly drafter waits for a plain step
            return cap if self.draft_cost(cap) == 0.0 else 0
        if self._cheap(cap):
            return cap  # proposing is (nearly) free: trim decides
        rates = self.rates(cap)
        best = _argmax(rates)
        if best > 0 and (1 / rates[0] - 1 / rates[best]) * PAYBACK_TOKENS >= catchup_s:
            return best
        self._never_pays = max(self.rates(cap, accept_all=True)) <= rates[0]
        if self._never_pays:
            return 0
        return self._probe(min(cap, PROBE_K), catchup_s)

    def _probe(self, k: int, catchup_s: float) -> int:
        """A short draft to re-measure acceptance, if what it loses against a plain step should every token
        be rejected (the catch-up included) fits the exploration budget; else 0."""
        times = self._times(k, None)
        loss = catchup_s + max(0.0, times[k] - times[0])
        if loss > self._budget:
            return 0
        self._budget -= loss
        self._explored += 1
        self._explore_spent += loss
        self._probing = True
        return k

    def trim(self, draft: Draft, draft_s: float) -> int:
        """How much of the proposal to verify, its drafting time already spent."""
        draft = draft.prefix(self.max_k)
        self._full, self._full_conf = draft, draft.token_confidence()
        if not len(draft) or self._probing:
            self._probing = False
            return len(draft)
        if not self._verify:
            return min(len(draft), FIRST_WINDOW)
        expected = self.expected_tokens(acceptance=self.draft_acceptance(draft))
        times = self._times(len(draft), draft_s)
        rates = [e / t for e, t in zip(expected, times, strict=False)]
        best = _argmax(rates)
        best = self._explore(expected, times, best)
        if best == 0 and draft.q is None and self._shadow is None:
            self._shadow, self._shadow_pos = draft, 0  # a point mass: its confidence is draft.confidence
        return best

    def _explore(self, expected: list[float], times: list[float], best: int) -> int:
        """The most promising length whose window was not measured yet, if what it is expected to lose
        against `best` fits the exploration budget; else `best`. Only lengths that could clearly beat `best`
        were their window as cheap as a single step are worth measuring (a useless drafter explores nothing)."""
        bar = EXPLORE_GAIN * expected[best] / times[best] * times[0]
        untried = [k for k in range(1, len(expected)) if self._verify_n.get(k + 1, 0) < MEASURED and expected[k] > bar]
        if not untried:
            return best
        k = max(untried, key=lambda k: expected[k] / times[k])
        loss = max(0.0, times[k] - expected[k] * times[best] / expected[best])
        if k == best or loss > self._budget:
            return best
        self._budget -= loss
        self._explored += 1
        self._explore_spent += loss
        return k

    def record(
        self, verified: int, accepted: int, emitted: Sequence[int], draft_s: float, verify_s: float, step_s: float
    ) -> None:
        """The step's outcome: `verified` draft tokens went to the target, `accepted` of them passed,
        `emitted` is what the step output; times in seconds. A position the exact guard held back counts
        as not accepted: the window yields nothing there, which is what the plan has to expect (counting
        only the positions it let through made a draft model look right 90% of the time where 3% of its
        tokens came through, and the controller drafted 64 at a time)."""
        self._chosen.append(verified)
        self._time_window(verified + 1, verify_s)
        rest = max(0.0, step_s - draft_s - verify_s)
        self._overhead = rest if self._overhead is None else self._overhead + COST_EMA * (rest - self._overhead)
        self._budget = min(EXPLORE_CAP_S, self._budget + EXPLORE_SHARE * step_s)
        if self._asked:
            self._fit_draft(self._asked, draft_s)
        full, conf = self._full, self._full_conf
        for i in range(1, min(verified, accepted + 1) + 1):
            self._observe(i, i <= accepted, conf[i - 1] if conf else None)
        if full is not None and full.q is None and 0 < verified == accepted < len(full) and len(emitted) > verified:
            # every verified token passed and the target's own next token is free evidence for the
            # proposal's next position (it equals it with exactly that position's acceptance probability)
            self._observe(verified + 1, emitted[verified] == full.tokens[verified], conf[verified] if conf else None)
        self._full = None
        if verified == 0:
            self._follow_shadow(emitted)
        else:
            self._shadow = None
        self._flush_observations()

    def _time_window(self, n: int, seconds: float) -> None:
        if n in self._stale:
            self._rescale_loaded(seconds / self._verify[n])
        count = self._verify_n[n] = self._verify_n.get(n, 0) + 1
        old = self._verify.get(n, seconds)
        if count > 3:
            seconds = min(seconds, 2 * old)  # a stray slow step (the collector, another process) is clipped
        self._verify[n] = old + max(COST_EMA, 1 / count) * (seconds - old)  # a plain mean until it settles
        self._curve_age += 1
        if self._curve is None or count == 1 or self._curve_age >= CURVE_EVERY or n >= len(self._curve):
            self._curve = None
        else:
            self._curve[n] = self._verify[n]

    def _follow_shadow(self, emitted: Sequence[int]) -> None:
        for token in emitted:
            shadow = self._shadow
            if shadow is None:
                return
            pos = self._shadow_pos
            hit = token == shadow.tokens[pos]
            self._observe(pos + 1, hit, shadow.confidence[pos] if shadow.confidence else None)
            self._shadow_pos += 1
            if not hit or self._shadow_pos >= len(shadow):
                self._shadow, self._shadow_pos = None, 0

    def _observe(self, i: int, hit: bool, confidence: float | None) -> None:
        if i > self.max_k:
            return
        self._seen[i] = DECAY * self._seen[i] + 1.0
        self._hits[i] = DECAY * self._hits[i] + float(hit)
        if confidence is not None:
            cell = self._step_obs.setdefault((bucket(confidence), band(i)), [0, 0])
            cell[0] += 1
            cell[1] += hit

    def _flush_observations(self) -> None:
        """A (bucket, band) cell decays once per step that observes it, however many of its tokens the step
        saw: a 40-token copy accepted whole is 40 observations, not 40 steps of forgetting."""
        for (b, d), (seen, hits) in self._step_obs.items():
            self._cseen[b][d] = DECAY * self._cseen[b][d] + seen
            self._chits[b][d] = DECAY * self._chits[b][d] + hits
        self._step_obs.clear()

    def _fit_draft(self, k: int, seconds: float) -> None:
        f = self._fit
        if f[0] >= 3:  # a stray slow call (a page fault, the collector) must not make a drafter look costly
            seconds = min(seconds, 3 * self.draft_cost(k) + 1e-4)
        for j, value in enumerate((1.0, k, k * k, seconds, k * seconds)):
            f[j] = DECAY * f[j] + value

    # -- the measured curve across sessions -----------------------------------------------------------
    def costs(self) -> dict:
        """What to persist: seconds and measurement count per window size."""
        return {
            "verify_s": {str(n): s for n, s in sorted(self._verify.items())},
            "count": {str(n): self._verify_n[n] for n in sorted(self._verify)},
        }

    def swap_costs(self, saved: dict) -> None:
        """Plan on another verify-cost curve (``saved``, possibly empty) from now on: the kernels changed."""
        self._verify, self._verify_n, self._curve, self._stale, self._loaded = {}, {}, None, set(), 0
        self.load_costs(saved)

    def load_costs(self, saved: dict) -> None:
        """Start from an earlier session's curve; each size counts as at most MEASURED measurements, so new
        timings soon outweigh it if the machine changed."""
        for key, seconds in saved.get("verify_s", {}).items():
            n, count = int(key), int(saved.get("count", {}).get(key, 1))
            if n not in self._verify and seconds > 0:
                self._verify[n], self._verify_n[n] = float(seconds), min(count, MEASURED)
                self._stale.add(n)
                self._loaded += 1
        self._curve = None

    def _rescale_loaded(self, ratio: float) -> None:
        """The first new timing of a loaded size: the machine may be busier or idler than when the curve was
        saved. Its shape is kept, its level follows: every size not timed again yet is scaled by the ratio
        (bounded, one timing is noisy), so a window that looked dear under load is not ruled out for good."""
        ratio = min(max(ratio, 0.5), 2.0)
        for m in self._stale:
            self._verify[m] *= ratio
        self._stale.clear()
        self._curve = None

    def figures(self) -> dict:
        chosen = self._chosen
        out = {
            "mode": "adaptive",
            "max_k": self.max_k,
            "mean_k": round(sum(chosen) / len(chosen), 3) if chosen else None,
            "max_verified": max(chosen, default=0),
            "plain_steps": sum(1 for k in chosen if k == 0),
            "acceptance_estimate": [round(a, 3) for a in self.acceptance_profile()[1:]],
            "acceptance_by_confidence": self._bucket_figures(),
            "verify_ms": {n: round(s * 1e3, 2) for n, s in sorted(self._verify.items())},
            "costs_loaded": self._loaded,
            "explore_steps": self._explored,
            "explore_ms": round(self._explore_spent * 1e3, 1),
        }
        if self._never_pays:
            out["note"] = "the drafter cannot pay on this machine even if every token were accepted"
        return out

    def _bucket_figures(self) -> dict:
        """{'<=edge': acceptance per position band} for the buckets with evidence."""
        profile = self.acceptance_profile()
        labels = [f"<={e}" for e in CONFIDENCE_EDGES] + [f">{CONFIDENCE_EDGES[-1]}"]
        return {
            labels[b]: [round(a, 3) for a in self._bucket_row(b, profile[1])]
            for b in range(len(labels))
            if sum(self._cseen[b]) > 0.5
        }


def _argmax(values: list[float]) -> int:
    """The best k; speculating (k > 0) must beat plain decoding (k = 0) by MARGIN, not just by noise."""
    best = max(range(len(values)), key=values.__getitem__)
    return best if best == 0 or values[best] >= MARGIN * values[0] else 0


def make_policy(draft_tokens) -> FixedK | AdaptiveK:
    """`--draft-tokens`: an int fixes K; 'auto' (or 'auto:N' for a different maximum) is the controller."""
    from localspec.errors import ConfigError

    if isinstance(draft_tokens, (FixedK, AdaptiveK)):
        return draft_tokens
    text = str(draft_tokens).strip().lower()
    if text.startswith("auto"):
        max_k = text.partition(":")[2] or str(MAX_K)
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
