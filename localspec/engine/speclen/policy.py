"""How many draft tokens to verify each step: a fixed K, or a controller that picks K from what it measures.

The controller maximises expected tokens per second. For a draft of L tokens (a chain) with conditional
acceptance a_1, a_2, ... (a_i: token i is accepted given that 1..i-1 were),

    E(L) = 1 + sum_{i<=L} prod_{j<=i} a_j          tokens emitted by the step (bonus/residual included)
    T(L) = overhead + draft(L) + verify(L + 1)       seconds the step takes

and it picks the L with the largest E(L) / T(L); L = 0 is plain decoding. Everything on the right is
measured in this session: the times by the cost model (costs.py: verify(n) per window size n, draft(k) as
a fitted line, the per-step overhead), a_i by the acceptance estimator (acceptance.py: from recent
outcomes, per confidence of the token).

Window sizes that were never measured are tried only out of an exploration budget: the estimated time an
exploring step loses against the best known length is paid from 1% of decode time.

Two kinds of drafter are handled differently:
- cheap ones (n-gram, suffix: microseconds per call) always propose; the controller then decides how much
  of the proposal to verify. When it verifies nothing, the proposal is kept as a *shadow* that the
  acceptance estimator compares with the tokens the target emits next. So a useless drafter costs a
  dictionary lookup.
- costly ones (a draft model) are only run when the plan says they pay, and a draft model that has to
  catch up on the context first (after steps without drafting, or a new prompt) only when the catch-up
  pays back within PAYBACK_TOKENS tokens. If they could not pay even with every token accepted, they are
  not run at all; otherwise a probe step now and then keeps the acceptance estimate honest. A probe is
  paid from the exploration budget, its catch-up included, so a costly drafter that does not pay is fed
  (nearly) nothing. Before a costly drafter has drafted, its own figure (``Drafter.costs``'
  per_token, timed at load) stands in for the measured draft cost; a drafter of unknown cost is first asked for a
  short draft.

Beside other sequences (`serve --parallel`: every slot's window in one forward pass) a window is priced as
the batch it joins: with B other tokens from S other sequences in the pass (their prompt tokens, and one token
per window: the others' drafts left out, backends/llama_cpp/slots.py), the controller maximises the
pass's tokens, (E(L) + S) / T_B(L) with T_B(L) = overhead + draft(L) + verify(L + 1 + B) — a draft token
then costs what it adds to a shared pass, which on a CPU is about a lone step, so drafting narrows or stops
under load and comes back when the sequence runs alone. A shared pass's size and time teach the curve as a lone
window of as many tokens would (measured: a pass of several sequences costs what one sequence's window of as many
tokens costs, benchmarks/batched_cost.py), so a slot that never runs alone has a curve too.

A drafter chain (`--drafter suffix+draft`: a copy drafter and a model drafter) has two members, each with
its own acceptance estimate and draft line. Every step the copy drafter proposes (it is free); then
``choose`` weighs that proposal's best rate against the model drafter's plan and runs the model only when its
expected tokens per second are higher. A copy that was not used is shadowed, so both keep learning.
"""

from __future__ import annotations

from collections.abc import Sequence

from localspec.engine.speclen.acceptance import DECAY, AcceptanceEstimator
from localspec.engine.speclen.costs import CostModel, DraftLine
from localspec.types import Draft, Step

MAX_K = 64  # `--draft-tokens auto` verifies up to this many draft tokens in one window
MARGIN = 1.05  # estimates are noisy and a wasted verify costs up to several steps: speculate on clear gains
CHEAP = 0.05  # a drafter whose largest draft costs under this share of a single step is "cheap"
FIRST_WINDOW = 4  # with nothing measured yet, verify at most this many tokens
EXPLORE_SHARE = 0.01  # exploration may lose at most this share of decode time (estimated)...
EXPLORE_CAP_S = 1.0  # ...saved up to this many seconds
EXPLORE_GAIN = 1.25  # and only on a length that would beat the best by this factor were its window one step
PAYBACK_TOKENS = 64  # a costly drafter's catch-up must be won back within this many tokens
PROBE_K = 2  # a probe of a costly drafter that does not pay (yet) drafts this many tokens
# a whole draft (lookahead) is judged by the tokens its steps emitted, which its main chain does not show (the
# window pays in later steps): starting from this many per step, worth this many steps
WHOLE_PRIOR, WHOLE_WEIGHT = 2.0, 8.0


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

    def share(self, tokens: int, sequences: int, pass_tokens: int = 0, pass_s: float = 0.0) -> None:
        """A fixed K is what the user asked, alone or beside others."""

    def plan(self, cap: int, catchup_s: float = 0.0) -> int:
        return cap

    def chain(self, cost_per_token: float | None) -> None:
        pass

    def choose(self, copy: Draft, cap: int, catchup_s: float = 0.0) -> int:
        """A chain at fixed K takes the copy whenever there is one, else asks the model (llama-server's rule)."""
        return 0 if len(copy) else cap

    def trim(self, draft: Draft, draft_s: float, sizes: Sequence[int] | None = None, whole: bool = False) -> int:
        return len(draft)

    def record(self, step: Step) -> None:
        """Nothing to learn."""

    def reset_drafter(self) -> None:
        pass

    def costs(self) -> dict:
        return {}

    def swap_costs(self, saved: dict) -> None:
        pass

    def figures(self) -> dict:
        return {"mode": "fixed", "k": self.max_k}


class AdaptiveK:
    """Picks K each step (0 <= K <= max_k) to maximise expected tokens per second; see the module doc.
    ``cost`` is what steps cost on this machine (kept across drafters), ``acceptance`` what the current
    drafter's tokens are expected to pass."""

    adaptive = True

    def __init__(self, max_k: int = MAX_K) -> None:
        self.max_k = max_k
        self.cost = CostModel(max_k)
        self._budget = 0.0  # seconds exploration may still lose
        self._explored, self._explore_spent = 0, 0.0
        self.load = (0, 0)  # the other sequences' tokens and count in the forward pass this step joins
        self.reset_drafter()

    @property
    def label(self) -> str:
        return f"adaptive K<={self.max_k}"

    # -- state of the current drafter -----------------------------------------------------------------
    def reset_drafter(self) -> None:
        """A new drafter: forget its acceptance and draft cost (the machine's verify costs stay)."""
        self.cost.reset_drafter()
        self._members = [_Member(AcceptanceEstimator(self.max_k), self.cost.line)]
        self._use(0)
        self._asked = 0  # tokens the last plan asked the drafter for
        self._probing = False
        self._copy: Draft | None = None  # a chain's copy proposal this step, while the model drafts
        self._model_steps = 0  # steps a chain's model drafter drafted, this turn
        self._whole = [WHOLE_PRIOR * WHOLE_WEIGHT, WHOLE_WEIGHT]  # decayed tokens and steps of whole drafts
        self._whole_step = False  # this step verifies a whole draft
        self.begin_turn()

    def begin_turn(self, cost_per_token: float | None = 0.0) -> None:
        """cost_per_token: the drafter's own figure for a drafted token, used until drafting is timed
        (0: a lookup; None: unknown)."""
        self._use(0)
        self._copy, self._probing = None, False  # a step cut short (Ctrl-C, an error) leaves nothing behind
        self.cost.draft_hint = cost_per_token
        for member in self._members:
            member.acceptance.begin_turn()
        self._chosen: list[int] = []
        self._model_steps = 0

    def chain(self, cost_per_token: float | None) -> None:
        """The drafter is a chain: its model drafter (of that cost per drafted token, as begin_turn's) is
        the second member, kept across turns."""
        if len(self._members) == 1:
            self._members.append(_Member(AcceptanceEstimator(self.max_k), DraftLine()))
        self._members[1].line.hint = cost_per_token

    def _use(self, i: int) -> None:
        """Plan, trim and record for member i from now on."""
        self._member = self._members[i]
        self.acceptance = self._member.acceptance
        self.cost.line = self._member.line

    # -- estimates --------------------------------------------------------------------------------------
    def acceptance_profile(self) -> list[float]:
        """Estimated conditional acceptance of draft positions 1..max_k (index 0 unused)."""
        return self.acceptance.profile()

    def draft_acceptance(self, draft: Draft) -> list[float]:
        """Estimated conditional acceptance of each token of a proposal (index 0 unused)."""
        return self.acceptance.of_draft(draft)

    def expected_tokens(self, accept_all: bool = False, acceptance: list[float] | None = None) -> list[float]:
        """E(k) for k = 0..len(acceptance) - 1 (default: by position, k = 0..max_k)."""
        return self.acceptance.expected_tokens(accept_all, acceptance)

    def verify_cost(self, n: int) -> float | None:
        """Seconds for a forward of n positions (see CostModel.verify)."""
        return self.cost.verify(n)

    def draft_cost(self, k: int, line: tuple[float, float] | None = None) -> float:
        return self.cost.draft(k, line)

    def rates(self, top: int, draft_s: float | None = None, accept_all: bool = False) -> list[float]:
        """Expected tokens per second for k = 0..top by position alone (the plan, before a draft exists)."""
        if not self.cost.timed:
            return [0.0] * (top + 1)
        expected = self.acceptance.expected_tokens(accept_all)
        times = self.cost.step_times(top, draft_s, extra=self.load[0])
        return [(e + self.load[1]) / t for e, t in zip(expected, times, strict=False)]

    def _cheap(self, cap: int) -> bool:
        single = self.cost.verify(1)
        return single is not None and self.cost.draft(cap) < CHEAP * single

    # -- the three calls of a step ----------------------------------------------------------------------
    def share(self, tokens: int, sequences: int, pass_tokens: int = 0, pass_s: float = 0.0) -> None:
        """The step joins a forward pass holding ``tokens`` of ``sequences`` other sequences (see the doc). The
        last shared pass (``pass_tokens`` in all, ``pass_s`` seconds) times the cost curve at its size, as a
        lone window of as many tokens would: a slot that never runs alone learns its costs too, instead of
        verifying drafts blindly for want of a curve. A pass bigger than any window (a prompt's chunk) is left out."""
        self.load = (tokens, sequences)
        if sequences and 0 < pass_tokens <= 2 * (self.max_k + 1) and pass_s > 0:
            self.cost.time_pass(pass_tokens, pass_s)

    def plan(self, cap: int, catchup_s: float = 0.0) -> int:
        """How many tokens to ask the drafter for; catchup_s: what the drafter would first spend catching
        up on the context. A chain is always asked (its copy drafter is free): ``choose`` decides."""
        chain = len(self._members) > 1
        self._asked = min(cap, self.max_k) if chain else self._plan(min(cap, self.max_k), catchup_s)
        return self._asked

    def _plan(self, cap: int, catchup_s: float, probe: bool = True) -> int:
        if cap <= 0:
            return 0
        if self.cost.draft_unknown:
            return min(cap, FIRST_WINDOW)  # a drafter of unknown cost: a short first call times it
        if not self.cost.timed:  # nothing measured yet: trim decides; a costly drafter waits for a plain step
            return cap if self.cost.draft(cap) == 0.0 else 0
        if self._cheap(cap):
            return cap  # proposing is (nearly) free: trim decides
        rates = self.rates(cap)
        best = _argmax(rates)
        if best > 0 and (1 / rates[0] - 1 / rates[best]) * PAYBACK_TOKENS >= catchup_s:
            return best
        self._member.never_pays = max(self.rates(cap, accept_all=True)) <= rates[0]
        if self._member.never_pays or not probe:
            return 0
        return self._probe(min(cap, PROBE_K), catchup_s)

    def choose(self, copy: Draft, cap: int, catchup_s: float = 0.0) -> int:
        """A chain's step: 0 to verify the copy drafter's proposal ``copy``, else how many tokens to ask the
        model drafter for (catchup_s: what it would first spend catching up). The model runs when the tokens
        per second its plan expects beat the copy's best (plain decoding included); it is probed only when
        the copy would not speculate."""
        if len(self._members) < 2:
            return 0
        copy_rate, copy_k = self._best_rate(copy)
        self._use(1)
        k = self._plan(min(cap, self.max_k), catchup_s, probe=copy_k == 0)
        if k and not self._probing and self.cost.timed and not self.cost.draft_unknown:
            planned = self.rates(k)[k]
            rate = planned / (1 + catchup_s * planned / PAYBACK_TOKENS)  # the catch-up paid over PAYBACK_TOKENS
            k = k if rate > copy_rate else 0
        if k == 0:
            self._use(0)
            return 0
        self._asked, self._copy = k, copy
        self._model_steps += 1
        return k

    def _best_rate(self, draft: Draft) -> tuple[float, int]:
        """(tokens per second, length) of the best verify of a free proposal, by the current member's
        estimates; length 0 is plain decoding."""
        if not self.cost.timed:
            return 0.0, len(draft)
        _, _, rates = self._draft_rates(draft.prefix(self.max_k), 0.0)
        best = _argmax(rates)
        return rates[best], best

    def _draft_rates(
        self, draft: Draft, draft_s: float, sizes: Sequence[int] | None = None
    ) -> tuple[list[float], list[float], list[float]]:
        """E(k), T(k) and their ratio for verifying k = 0..len(draft) tokens of a proposal, by the current
        member's acceptance of its tokens (draft_s: drafting time already spent; sizes[k]: the tokens a cut
        at k verifies, for a tree judged by its main chain)."""
        expected = self.acceptance.expected_tokens(acceptance=self.acceptance.of_draft(draft))
        times = self.cost.step_times(len(draft), draft_s, sizes, extra=self.load[0])
        return expected, times, [(e + self.load[1]) / t for e, t in zip(expected, times, strict=False)]

    def _probe(self, k: int, catchup_s: float) -> int:
        """A short draft to re-measure acceptance, if what it loses against a plain step should every token
        be rejected (the catch-up included) fits the exploration budget; else 0."""
        times = self.cost.step_times(k, None)
        loss = catchup_s + max(0.0, times[k] - times[0])
        if loss > self._budget:
            return 0
        self._budget -= loss
        self._explored += 1
        self._explore_spent += loss
        self._probing = True
        return k

    def trim(self, draft: Draft, draft_s: float, sizes: Sequence[int] | None = None, whole: bool = False) -> int:
        """How much of the proposal to verify, its drafting time already spent. ``draft`` is a chain (a
        tree's main chain) and ``sizes[k]`` the tokens verified when it is cut at k (default k: a chain);
        ``whole``: a tree verified whole or not at all (any k > 0 verifies all of it)."""
        draft = draft.prefix(self.max_k)
        self.acceptance.propose(draft)
        self._whole_step = False
        if whole and len(draft) and self.cost.timed and not self._probing:
            return self._trim_whole(draft, draft_s, sizes)
        if not len(draft) or self._probing:
            self._probing = False
            return len(draft)
        if not self.cost.timed:
            return min(len(draft), FIRST_WINDOW)
        expected, times, rates = self._draft_rates(draft, draft_s, sizes)
        # a shared pass measures no window: nothing to explore there
        best = _argmax(rates) if self.load[0] else self._explore(expected, times, _argmax(rates), sizes)
        if best == 0:
            self.acceptance.shadow(draft)
        return best

    def _trim_whole(self, draft: Draft, draft_s: float, sizes: Sequence[int]) -> int:
        """A whole draft: verified when the tokens such steps emit (the better of what its main chain
        promises and what they emitted so far) beat plain decoding over the cost of all its tokens."""
        expected, times, _ = self._draft_rates(draft, draft_s, sizes)
        tokens, steps = self._whole
        if max(expected[-1], tokens / steps) / times[-1] >= MARGIN / times[0]:
            self._whole_step = True
            return len(draft)
        self.acceptance.shadow(draft)
        return 0

    def _explore(self, expected: list[float], times: list[float], best: int, sizes: Sequence[int] | None) -> int:
        """The most promising length whose window was not measured yet, if what it is expected to lose
        against `best` fits the exploration budget; else `best`. Only lengths that could clearly beat `best`
        were their window as cheap as a single step are worth measuring (a useless drafter explores nothing)."""
        bar = EXPLORE_GAIN * expected[best] / times[best] * times[0]
        untried = [k for k in range(1, len(expected)) if not self._measured(k, sizes) and expected[k] > bar]
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

    def _measured(self, k: int, sizes: Sequence[int] | None) -> bool:
        """Whether verifying k tokens of a proposal was timed (a tree: whether any tree was)."""
        return self.cost.measured(k + 1) if sizes is None else self.cost.tree_timed

    def record(self, step: Step) -> None:
        """The step's outcome (engine/loop.py): ``step.judged`` draft tokens went to the target (a tree: its
        depth), as many of them passed as the verdict accepted, ``step.emitted`` is what the step output; the
        forward took ``step.draft`` and the pending token (a chain, or a tree). A position the exact guard held
        back counts as not accepted: the window yields nothing there, which is what the plan has to expect
        (counting only the positions it let through made a draft model look right 90% of the time where 3% of
        its tokens came through, and the controller drafted 64 at a time)."""
        verified, emitted, step_s, draft = step.judged, step.emitted, step.step_s, step.draft
        self._chosen.append(verified)
        if not self.load[0]:  # a shared pass's time is the batch's, not this window's
            self.cost.record(len(draft) + 1, self._asked, step.drafting_s, step.verify_s, step_s, not draft.is_chain)
        self._budget = min(EXPLORE_CAP_S, self._budget + EXPLORE_SHARE * step_s)
        self.acceptance.record(verified, min(step.verdict.accepted, verified), emitted, step.verdict.target_p)
        if self._whole_step:
            self._whole = [DECAY * self._whole[0] + len(emitted), DECAY * self._whole[1] + 1]
            self._whole_step = False
        if self._copy is not None:  # the model drafted: the copy's proposal is compared with the output
            copy = self._members[0].acceptance
            copy.propose(self._copy)
            if len(self._copy):
                copy.shadow(self._copy.prefix(self.max_k))
            copy.record(0, 0, emitted)
            self._copy = None
        self._use(0)

    # -- the measured curve across sessions -----------------------------------------------------------
    def costs(self) -> dict:
        """What to persist: seconds and measurement count per window size."""
        return self.cost.to_dict()

    def swap_costs(self, saved: dict) -> None:
        """Plan on another verify-cost curve (``saved``, possibly empty) from now on: the kernels changed."""
        self.cost.swap(saved)

    def load_costs(self, saved: dict) -> None:
        """Start from an earlier session's curve (see CostModel.load)."""
        self.cost.load(saved)

    def figures(self) -> dict:
        chosen = self._chosen
        out = {
            "mode": "adaptive",
            "max_k": self.max_k,
            "mean_k": round(sum(chosen) / len(chosen), 3) if chosen else None,
            "max_verified": max(chosen, default=0),
            "plain_steps": sum(1 for k in chosen if k == 0),
            **self.acceptance.figures(),
            **self.cost.figures(),
            "explore_steps": self._explored,
            "explore_ms": round(self._explore_spent * 1e3, 1),
        }
        if len(self._members) > 1:
            model = self._members[1].acceptance
            out["model_steps"] = self._model_steps
            out["model_acceptance_estimate"] = model.figures()["acceptance_estimate"]
            out["model_draft_ms_per_token"] = round(self._members[1].line.fit()[1] * 1e3, 3)
        if self._member.never_pays:
            out["note"] = "the drafter cannot pay on this machine even if every token were accepted"
        return out


class _Member:
    """What the controller knows of one drafter (of a chain's two): its acceptance and its draft cost."""

    def __init__(self, acceptance: AcceptanceEstimator, line: DraftLine) -> None:
        self.acceptance, self.line = acceptance, line
        self.never_pays = False  # it could not pay even with every token accepted


def _argmax(values: list[float]) -> int:
    """The best k; speculating (k > 0) must beat plain decoding (k = 0) by MARGIN, not just by noise."""
    best = max(range(len(values)), key=values.__getitem__)
    return best if best == 0 or values[best] >= MARGIN * values[0] else 0


def make_policy(draft_tokens, curve: dict | None = None) -> FixedK | AdaptiveK:
    """`--draft-tokens`: an int fixes K; 'auto' (or 'auto:N' for a different maximum) is the controller, which
    starts from ``curve`` (a cost curve measured on this machine in earlier sessions: CostCache.load) if given."""
    policy = _policy(draft_tokens)
    if curve and isinstance(policy, AdaptiveK):
        policy.load_costs(curve)
    return policy


def _policy(draft_tokens) -> FixedK | AdaptiveK:
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
