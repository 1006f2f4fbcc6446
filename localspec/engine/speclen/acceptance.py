"""What the controller learns about how many drafted tokens get accepted.

It estimates the conditional acceptance a_1, a_2, ... of a draft (a_i: token i is accepted given that
1..i-1 were) from recent outcomes, exponentially decayed so that it follows the conversation, and carries
only part of it into the next turn. Everything here belongs to the current drafter: a new one starts afresh.

a_i is learnt per *confidence* of the token, not only per position: a drafter says how sure it is of each
token (a 40-token suffix match versus a 3-token one, an n-gram match's length, a draft model's q), and the
controller keeps acceptance per (confidence bucket, position band). So a long confident copy is verified
64 tokens at a time while a weak guess in the same turn is verified short or not at all. Drafts without a
confidence are judged by position alone.

A proposal the controller verifies nothing of still teaches something: it is kept as a *shadow* and
compared with the tokens the target emits next, which for a point-mass draft is an unbiased sample of its
acceptance (P(target emits x) = p(x) = P(accept x)).

A verbatim copy (a code edit that repeats the file) is accepted token after token, and decayed per-step
counts learn that too slowly to reach the 48-64-token windows that pay most there within a few steps. So
the estimator also keeps the current *run*: how many of the drafter's most confident point-mass tokens
(confidence >= RUN_CONFIDENCE: a unique continuation of a 36-token match, as the suffix tree scores it) were
accepted in a row since the last one was rejected, verified or followed as a shadow. Such a token's
estimate weighs two explanations of the run (copy_acceptance): a copy, whose tokens pass with a rate near 1,
against drafting as usual at its (bucket, band) estimate, under which a long run is a surprise. A token the
target was unlikely to emit (p(x) < RUN_KEEP) ends the run, and the windows fall back to what the buckets say.

Under sampling a copy is still a copy: its tokens pass with the target's probability of them, mostly near 1,
and a rejection is the draw going the other way. So where the verdict hands back the target's p(x) of the
tokens it reached (point-mass drafts: verify.py), the evidence is p(x), the token's acceptance probability,
instead of the 0/1 outcome (the same in expectation, with less noise): the run survives a rejected token the
target gave p >= RUN_KEEP, and the copy's rate is the run's mean p. At temperature 0, p(x) is 1 for an
accepted token and 0 for a rejected one: nothing changes there. In the offline replay
(benchmarks/suffix_replay.py, measured default-kernel curve) this is neutral on recorded answers (within
1%); on a long copy it reaches a 64-token window in 4 steps instead of 8 (tests/engine/test_speclen.py).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from localspec.types import Draft

DECAY = 0.9  # per step that observes an estimate: ~10 recent steps dominate it
PRIOR_ACCEPT, PRIOR_WEIGHT = 0.5, 2.0  # position 1 with no data is a coin flip worth two observations
TURN_CARRY = 0.25  # share of the acceptance evidence that carries over into the next turn
# Confidence buckets (upper edges); a drafter's confidence is in [0, 1] (see Draft.confidence).
CONFIDENCE_EDGES = (0.2, 0.35, 0.5, 0.6, 0.7, 0.8, 0.87, 0.92, 0.96)
RUN_CONFIDENCE = 0.9  # tokens at least this confident make up a run (see the module doc)
RUN_KEEP = 0.5  # a run token the target gave at least this probability continues the run, accepted or not
COPY_PRIOR = 0.01  # the prior chance that a confident run is a verbatim copy rather than ordinary drafting


def band(position: int) -> int:
    """Position bands 1, 2, 3-4, 5-8, 9-16, ...: acceptance changes along a draft, ever slower."""
    return (position - 1).bit_length()


def copy_acceptance(run: int, usual: float, passed: float | None = None) -> float:
    """A confident token's acceptance after ``run`` such tokens were accepted in a row, where tokens like it
    are usually accepted with probability ``usual``: a mixture of two explanations of the run. Either the
    drafter is copying (tokens pass with a rate p near 1: a Jeffreys Beta(1/2, 1/2) prior on p after ``run``
    trials of which ``passed`` (default: all) passed gives (passed + 1/2) / (run + 1)), or it is drafting as
    usual (``usual``, whose chance of such a run is usual ** run). The copy's weight is their posterior odds
    from COPY_PRIOR, so a run that is no surprise at the usual rate (an 80% drafter's 8 in a row) changes
    little, and a long one becomes a copy."""
    plain = (1.0 - COPY_PRIOR) * usual**run
    copy = COPY_PRIOR / (COPY_PRIOR + plain)
    passed = run if passed is None else passed
    return copy * (passed + 0.5) / (run + 1.0) + (1.0 - copy) * usual


def bucket(confidence: float) -> int:
    return bisect_right(CONFIDENCE_EDGES, confidence)


class AcceptanceEstimator:
    """Acceptance of the current drafter's tokens by position, and by (confidence bucket, position band)."""

    def __init__(self, max_k: int) -> None:
        self.max_k = max_k
        self._bands = [0] + [band(i) for i in range(1, max_k + 1)]  # position -> band, looked up per token
        self._seen = [0.0] * (max_k + 1)  # decayed counts per position (index 1..max_k)
        self._hits = [0.0] * (max_k + 1)
        n_bands = band(max_k) + 1
        # decayed counts per confidence bucket and position band
        self._cseen = [[0.0] * n_bands for _ in range(len(CONFIDENCE_EDGES) + 1)]
        self._chits = [[0.0] * n_bands for _ in range(len(CONFIDENCE_EDGES) + 1)]
        self._step_obs: dict[tuple[int, int], list[float]] = {}  # this step's (bucket, band) -> [seen, hits]
        self._full: Draft | None = None  # the last proposal, before trimming
        self._full_conf: tuple[float, ...] | None = None  # and its tokens' confidence
        self._shadow: Draft | None = None  # an unverified point-mass proposal being compared with the output
        self._shadow_pos = 0
        self.run = 0  # confident point-mass tokens accepted in a row (see the module doc)
        self.run_passed = 0.0  # their summed acceptance probability (= run at temperature 0)

    def begin_turn(self) -> None:
        """A new turn may be a different kind of text: what the last one taught counts for less."""
        self._seen = [TURN_CARRY * s for s in self._seen]
        self._hits = [TURN_CARRY * h for h in self._hits]
        self._cseen = [[TURN_CARRY * s for s in row] for row in self._cseen]
        self._chits = [[TURN_CARRY * h for h in row] for row in self._chits]
        self._shadow, self._shadow_pos = None, 0
        self.run, self.run_passed = 0, 0.0  # a new answer: the last one's copy is no evidence for this one's

    # -- estimates --------------------------------------------------------------------------------------
    def profile(self) -> list[float]:
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

    def of_draft(self, draft: Draft) -> list[float]:
        """Estimated conditional acceptance of each token of a proposal (index 0 unused)."""
        profile = self.profile()
        confidence = draft.token_confidence()
        if confidence is None:
            return [1.0] + [profile[min(i, self.max_k)] for i in range(1, len(draft) + 1)]
        rows: dict[int, list[float]] = {}
        out = [1.0]
        bands = self._bands
        run = self.run if draft.q is None else -1  # a draft with q (a model's) is judged by its buckets alone
        rate = self.run_passed / self.run if self.run else 1.0  # the run's mean acceptance so far
        for i, c in enumerate(confidence, 1):
            b = bisect_right(CONFIDENCE_EDGES, c)
            row = rows.get(b)
            if row is None:
                row = rows[b] = self._bucket_row(b, profile[1])
            a = row[bands[i]]
            if run >= 0 and c >= RUN_CONFIDENCE:
                a = copy_acceptance(run + i - 1, a, self.run_passed + (i - 1) * rate)
            out.append(a)
        return out

    def expected_tokens(self, accept_all: bool = False, acceptance: list[float] | None = None) -> list[float]:
        """E(k) for k = 0..len(acceptance) - 1 (default: by position, k = 0..max_k)."""
        profile = acceptance if acceptance is not None else self.profile()
        out, total, chain = [1.0], 1.0, 1.0
        for a in profile[1:]:
            chain *= 1.0 if accept_all else a
            total += chain
            out.append(total)
        return out

    # -- evidence ---------------------------------------------------------------------------------------
    def propose(self, draft: Draft) -> None:
        """The step's proposal, before the controller trims it: what its outcome is compared with."""
        self._full, self._full_conf = draft, draft.token_confidence()

    def shadow(self, draft: Draft) -> None:
        """A proposal of which nothing is verified: follow it in the output, if it is a point mass (its
        confidence is draft.confidence) and no other is being followed."""
        if draft.q is None and self._shadow is None:
            self._shadow, self._shadow_pos = draft, 0

    def record(self, verified: int, accepted: int, emitted: Sequence[int], target_p: Sequence[float] = ()) -> None:
        """The step's outcome: `verified` tokens of the proposal went to the target, `accepted` of them
        passed, `emitted` is what the step output (see AdaptiveK.record); `target_p`: the target's
        probability of each token the verdict reached, where it gave them (Verdict.target_p)."""
        full, conf = self._full, self._full_conf
        point_mass = full is not None and full.q is None
        for i in range(1, min(verified, accepted + 1) + 1):
            p = target_p[i - 1] if point_mass and i <= len(target_p) else None
            self._observe(i, i <= accepted, conf[i - 1] if conf else None, point_mass, p)
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

    def _observe(
        self, i: int, hit: bool, confidence: float | None, point_mass: bool = True, p: float | None = None
    ) -> None:
        """Position i's outcome; ``p``: its acceptance probability, the evidence where known (module doc)."""
        passed = float(hit) if p is None else p
        if point_mass and confidence is not None and confidence >= RUN_CONFIDENCE:
            copying = hit if p is None else p >= RUN_KEEP
            self.run, self.run_passed = (self.run + 1, self.run_passed + passed) if copying else (0, 0.0)
        if i > self.max_k:
            return
        self._seen[i] = DECAY * self._seen[i] + 1.0
        self._hits[i] = DECAY * self._hits[i] + passed
        if confidence is not None:
            cell = self._step_obs.setdefault((bucket(confidence), band(i)), [0, 0.0])
            cell[0] += 1
            cell[1] += passed

    def _flush_observations(self) -> None:
        """A (bucket, band) cell decays once per step that observes it, however many of its tokens the step
        saw: a 40-token copy accepted whole is 40 observations, not 40 steps of forgetting."""
        for (b, d), (seen, hits) in self._step_obs.items():
            self._cseen[b][d] = DECAY * self._cseen[b][d] + seen
            self._chits[b][d] = DECAY * self._chits[b][d] + hits
        self._step_obs.clear()

    def figures(self) -> dict:
        """The acceptance estimate by position, and by confidence for the buckets with evidence."""
        return {
            "acceptance_estimate": [round(a, 3) for a in self.profile()[1:]],
            "acceptance_by_confidence": self._bucket_figures(),
        }

    def _bucket_figures(self) -> dict:
        """{'<=edge': acceptance per position band} for the buckets with evidence."""
        profile = self.profile()
        labels = [f"<={e}" for e in CONFIDENCE_EDGES] + [f">{CONFIDENCE_EDGES[-1]}"]
        return {
            labels[b]: [round(a, 3) for a in self._bucket_row(b, profile[1])]
            for b in range(len(labels))
            if sum(self._cseen[b]) > 0.5
        }
