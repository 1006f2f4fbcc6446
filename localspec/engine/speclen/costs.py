"""What a step costs on this machine: verify(n) for a window of n positions, draft(k) for k drafted tokens
and the per-step overhead, all measured in this session (or loaded from an earlier one).

verify(n) is kept per window size n — the whole curve, which on CPUs is neither linear nor monotone
(llama.cpp's repacked kernels make 16 positions cheaper than 12 on this box) and on a GPU is nearly flat.
draft(k) is a fitted line (the current drafter's: forgotten when it changes), and the overhead is what a step
spends outside drafting and verifying.

Window sizes that were never measured are estimated pessimistically (the mean per-token slope so far), so
the policy tries them only out of its exploration budget (policy.py). The measured curve is persisted per
model file, backend, build and threads (localspec/cost_cache.py) in the format of ``CostModel.to_dict``, so
the next start begins where this one ended.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from localspec.engine.speclen.acceptance import DECAY  # the draft line forgets at the acceptance estimates' rate

COST_EMA = 0.2  # weight of the newest timing in the running averages...
# ...and of one below them: a forward costs at least what it is timed at (another process, the collector, a page
# fault only ever add), so the averages follow the floor and a stray slow step fades
COST_DOWN = 0.5
PRIOR_SLOPE = 0.5  # below the smallest measured window, each position costs half a single step
MIN_SLOPE = 0.1  # past the largest measured window, each position costs at least this share of a step
MEASURED = 2  # a window size timed this often counts as measured; below it, trying it is exploration
# (a size loaded from an earlier session counts as timed once: a promising one is tried again)
CURVE_EVERY = 16  # timings between rebuilds of the interpolated cost curve
SPIKE = 1.25  # a first timing of a window size above this many times the per-position cost of a smaller one is clipped
TREE_RATIO = (0.5, 20.0)  # bounds of one timing's tree / chain cost ratio (a stray slow step is clipped)


class CostModel:
    """Seconds a step takes: a verify window of n positions, a draft of k tokens, and the rest of the step."""

    def __init__(self, max_k: int) -> None:
        self.max_k = max_k
        self._verify: dict[int, float] = {}  # window size n -> running mean seconds
        self._verify_n: dict[int, int] = {}  # how often each size was measured
        self._curve: list[float] | None = None  # verify(n) for n = 0..max_k + 1 (see curve)
        self._curve_age = 0
        self._overhead: float | None = None  # per-step seconds outside draft and verify
        self._loaded = 0  # window sizes whose cost came from an earlier session
        self._unconfirmed: set[int] = set()  # loaded sizes not timed in this session yet
        self._as_loaded: dict[int, float] = {}  # their seconds as loaded (what is saved of them: see to_dict)
        self._rescale_pending = False  # the first timing of a loaded size is still to rescale the others
        self.line = DraftLine()  # the current drafter's cost of drafting
        # a tree of n tokens over a chain of n: llama.cpp verifies a tree as several sequences and decodes an
        # accepted side branch again, so the same tokens cost more as a tree (not persisted; None: untimed)
        self._tree_factor: float | None = None

    def reset_drafter(self) -> None:
        """A new drafter: forget its draft cost (the machine's verify costs stay)."""
        self.line = DraftLine()

    @property
    def draft_hint(self) -> float | None:
        return self.line.hint

    @draft_hint.setter
    def draft_hint(self, value: float | None) -> None:
        self.line.hint = value

    # -- what is known ----------------------------------------------------------------------------------
    @property
    def timed(self) -> bool:
        """Whether any window size was timed (or loaded) yet."""
        return bool(self._verify)

    def measured(self, n: int) -> bool:
        """Whether window size n was timed often enough that trying it is no longer exploration."""
        return self._verify_n.get(n, 0) >= MEASURED

    @property
    def tree_timed(self) -> bool:
        return self._tree_factor is not None

    @property
    def draft_unknown(self) -> bool:
        """Nothing is known of what drafting costs: it was never timed and the drafter gave no figure."""
        return self.line.unknown

    # -- estimates --------------------------------------------------------------------------------------
    def verify(self, n: int) -> float | None:
        """Seconds for a forward of n positions: measured, else interpolated between measured sizes. Below
        the smallest measured size each position costs PRIOR_SLOPE single steps; past the largest, the mean
        per-position slope so far (at least MIN_SLOPE of a step) — a guess on the dear side, so a big
        window is tried out of the exploration budget rather than on faith. A size loaded from an earlier
        session and not timed in this one is believed no dearer than this session's timings put it (see
        _believed)."""
        if not self._verify:
            return None
        if n in self._verify and n not in self._unconfirmed:
            return self._verify[n]
        if self._curve is not None and n < len(self._curve):
            return self._curve[n]
        return self._believed(n, sorted(self._verify), sorted(set(self._verify) - self._unconfirmed))

    def _believed(self, n: int, known: list[int], timed: list[int]) -> float:
        """verify(n) from the sizes ``known`` (those ``timed`` in this session among them). A loaded size not
        timed again is taken at the lower of its saved cost and what this session's timings interpolate for it:
        a size saved too dear (timed beside another process) would never be tried and corrected, one believed
        too cheap is tried and its timing corrects it. (One timed size says nothing of the curve's slope.)"""
        if n not in self._verify:
            return self._estimate(n, known)
        if n not in self._unconfirmed or len(timed) < 2:
            return self._verify[n]
        return min(self._verify[n], self._estimate(n, timed))

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

    def curve(self) -> list[float]:
        """verify(n) for n = 0..max_k + 1. Measured sizes are kept current by every timing; the estimates
        between and past them are rebuilt when a new size is measured and every CURVE_EVERY timings (they
        move little, and rebuilding costs more than the rest of a step's planning)."""
        if self._curve is None:
            known, timed = sorted(self._verify), sorted(set(self._verify) - self._unconfirmed)
            self._curve = [0.0] + [self._believed(n, known, timed) for n in range(1, self.max_k + 2)]
            self._curve_age = 0
        return self._curve

    def draft(self, k: int, line: tuple[float, float] | None = None) -> float:
        """Seconds for drafting k tokens (line: the draft line, if already at hand)."""
        return self.line.seconds(k, line)

    def draft_line(self) -> tuple[float, float]:
        return self.line.fit()

    def step_times(
        self, top: int, draft_s: float | None, sizes: Sequence[int] | None = None, extra: int = 0
    ) -> list[float]:
        """Estimated seconds of a step verifying k = 0..top tokens (draft_s: drafting time already spent;
        sizes[k]: the tokens verified at k, for a tree cut at depth k; extra: other sequences' tokens in the
        same forward pass)."""
        curve, overhead = self.curve(), self._overhead or 0.0
        if sizes is None and not extra:
            verify = curve[1 : top + 2]
        elif sizes is None:
            verify = [self.verify(n + 1 + extra) for n in range(top + 1)]
        else:
            tree = self._tree_factor or 1.0
            verify = [self.verify(n + 1 + extra) * (tree if n else 1.0) for n in sizes[: top + 1]]
        if draft_s is not None:
            return [overhead + draft_s + c for c in verify]
        line = self.draft_line()
        return [overhead + self.draft(k, line) + verify[k] for k in range(top + 1)]

    # -- timings ----------------------------------------------------------------------------------------
    def record(
        self, window: int, drafted: int, draft_s: float, verify_s: float, step_s: float, tree: bool = False
    ) -> None:
        """A step's timings: a verify window of `window` positions (a tree of that many when `tree`), after
        asking the drafter for `drafted` tokens (0: it was not run); seconds. A tree's timing teaches the tree
        factor, never the chain curve."""
        if tree:
            self._time_tree(window, verify_s)
        else:
            self._time_window(window, verify_s)
        rest = max(0.0, step_s - draft_s - verify_s)
        self._overhead = rest if self._overhead is None else self._overhead + COST_EMA * (rest - self._overhead)
        if drafted:
            self.line.record(drafted, draft_s)

    def _time_tree(self, n: int, seconds: float) -> None:
        chain = self.verify(n)
        if not chain:
            return
        ratio = min(max(seconds / chain, TREE_RATIO[0]), TREE_RATIO[1])
        old = self._tree_factor
        self._tree_factor = ratio if old is None else old + COST_EMA * (ratio - old)

    def time_pass(self, n: int, seconds: float) -> None:
        """A forward pass of n tokens shared with other sequences took ``seconds``: the window of n's timing
        (the step's drafting and overhead are the slot's own, not the pass's)."""
        self._time_window(n, seconds)

    def _time_window(self, n: int, seconds: float) -> None:
        if self._rescale_pending and n in self._unconfirmed:
            self._rescale_loaded(seconds / self._verify[n])
        confirmed = n not in self._unconfirmed
        self._unconfirmed.discard(n)
        count = self._verify_n[n] = self._verify_n.get(n, 0) + 1
        if count <= 3:  # a size's first timings (the first window of a size costs more; another process may run):
            # a slow one would price the size out, and it would never be retried
            seconds = min(seconds, self._ceiling(n))
        old = self._verify.get(n, seconds)
        if count > 3:
            seconds = min(seconds, 2 * old)  # a stray slow step (the collector, another process) is clipped
        # a loaded size's first timing that comes in cheaper replaces it (the saved one may have run beside
        # another process); a dearer one is averaged with it
        weight = (COST_DOWN if confirmed else 1.0) if seconds < old else COST_EMA
        self._verify[n] = old + max(weight, 1 / count) * (seconds - old)  # a plain mean until it settles
        self._curve_age += 1
        if self._curve is None or count == 1 or self._curve_age >= CURVE_EVERY or n >= len(self._curve):
            self._curve = None
        else:
            self._curve[n] = self._verify[n]

    def _ceiling(self, n: int) -> float:
        """The most a first timing of window n is believed: SPIKE times the nearest smaller settled size's cost
        scaled by the positions (batching makes a window cheaper per position than smaller ones, apart from
        kernel switches of a few tens of percent). No bound before a smaller size has settled."""
        settled = [m for m in self._verify if m < n and self._verify_n.get(m, 0) > 3]
        if not settled:
            return float("inf")
        m = max(settled)
        return SPIKE * self._verify[m] * n / m

    # -- the measured curve across sessions -----------------------------------------------------------
    def to_dict(self) -> dict:
        """What to persist: seconds and measurement count per window size. A loaded size this session did not
        time is saved as it was loaded, not as the session's rescaling believed it: saved scaled, loaded and
        scaled down again by the next session's first timing, sizes a machine rarely verifies drifted lower
        session after session (a cost file on a 2-core EPYC held 226 ms for 65 positions, which take 780)."""
        verify = {n: self._as_loaded[n] if n in self._unconfirmed else s for n, s in self._verify.items()}
        return {
            "verify_s": {str(n): s for n, s in sorted(verify.items())},
            "count": {str(n): self._verify_n[n] for n in sorted(self._verify)},
        }

    def swap(self, saved: dict) -> None:
        """Plan on another verify-cost curve (``saved``, possibly empty) from now on: the kernels changed."""
        self._verify, self._verify_n, self._curve, self._loaded = {}, {}, None, 0
        self._unconfirmed, self._rescale_pending, self._as_loaded = set(), False, {}
        self.load(saved)

    def load(self, saved: dict) -> None:
        """Start from an earlier session's curve. Each size counts as timed once: new timings soon outweigh it
        if the machine changed, and a promising size is tried again out of the exploration budget, so a size
        saved too dear (timed while another process ran) is not ruled out for good. Each size is believed up to
        SPIKE times the lowest cost per position of the sizes below it, as first timings are."""
        rate = None  # the lowest seconds per position of the sizes kept so far (ascending)
        for key, seconds in sorted(saved.get("verify_s", {}).items(), key=lambda item: int(item[0])):
            n = int(key)
            if n not in self._verify and seconds > 0:
                if rate is not None:  # a curve saved with a stray slow timing in it would keep pricing that size out
                    seconds = min(seconds, SPIKE * rate * n)
                self._verify[n], self._verify_n[n] = float(seconds), MEASURED - 1
                self._as_loaded[n] = float(seconds)
                self._unconfirmed.add(n)
                self._rescale_pending = True
                self._loaded += 1
                rate = seconds / n if rate is None else min(rate, seconds / n)
        self._curve = None

    def _rescale_loaded(self, ratio: float) -> None:
        """The first new timing of a loaded size: the machine may be idler than when the curve was saved. Its
        shape is kept, its level follows downwards: every size not timed again yet is scaled by the ratio
        (at most halved, one timing is noisy), so a window that looked dear under load is not ruled out for
        good. Never upwards: a slower first timing is more likely another process than a slower machine, and a
        curve scaled up by it, saved and loaded again ratchets up session after session (seen on this box:
        8 positions saved at 401 ms after three busy bench runs and 698 ms after a fourth, where 236 was due).
        A machine that did get slower shows it in the sizes it uses; a size priced too cheap is tried, and
        its first timing corrects it."""
        ratio = min(max(ratio, 0.5), 1.0)
        for m in self._unconfirmed:
            self._verify[m] *= ratio
        self._rescale_pending = False
        self._curve = None

    def figures(self) -> dict:
        """The measured curve in milliseconds, and how many of its sizes came from an earlier session."""
        return {
            "verify_ms": {n: round(s * 1e3, 2) for n, s in sorted(self._verify.items())},
            "costs_loaded": self._loaded,
            "tree_cost_factor": None if self._tree_factor is None else round(self._tree_factor, 2),
        }


class DraftLine:
    """What one drafter's drafting costs: seconds = a + b k for k drafted tokens, fitted to its timed calls
    (decayed, so it follows the drafter), and its own figure until then."""

    def __init__(self, hint: float | None = 0.0) -> None:
        # the drafter's own figure for a drafted token, used until drafting is timed (0: a lookup; None: unknown)
        self.hint = hint
        self._sums = [0.0] * 5  # decayed sums: n, k, kk, t, kt

    @property
    def unknown(self) -> bool:
        """Nothing is known of what drafting costs: it was never timed and the drafter gave no figure."""
        return self._sums[0] < 0.5 and self.hint is None

    def seconds(self, k: int, line: tuple[float, float] | None = None) -> float:
        """Seconds for drafting k tokens (line: the fitted line, if already at hand)."""
        if k == 0:
            return 0.0
        a, b = self.fit() if line is None else line
        return max(0.0, a + b * k)

    def fit(self) -> tuple[float, float]:
        """(intercept, slope) of drafting time against k, from the decayed sums."""
        n, sk, skk, st, skt = self._sums
        if n < 0.5:
            return 0.0, self.hint or 0.0
        var = skk / n - (sk / n) ** 2
        if var > 1e-9:
            b = (skt / n - sk / n * st / n) / var
            return st / n - b * sk / n, b
        return 0.0, (st / sk if sk else 0.0)  # every measured call drafted the same k: no intercept

    def record(self, k: int, seconds: float) -> None:
        f = self._sums
        if f[0] >= 3:  # a stray slow call (a page fault, the collector) must not make a drafter look costly
            seconds = min(seconds, 3 * self.seconds(k) + 1e-4)
        for j, value in enumerate((1.0, k, k * k, seconds, k * seconds)):
            f[j] = DECAY * f[j] + value
