"""Counters of one turn and the figures derived from them. Plain turns fill the same fields."""

from __future__ import annotations

from dataclasses import dataclass, field

from localspec.engine.baseline import PlainSpeed, speedup
from localspec.types import Step


@dataclass(frozen=True)
class TurnView:
    """What a live display shows of a turn: a frozen snapshot of ``TurnStats``, safe to hand to another thread
    (the chat's engine thread posts them; the panels read them)."""

    generated: int
    steps: int
    drafted: int
    accepted: int
    acceptance_rate: float | None
    mean_accepted_length: float
    acceptance_by_position: tuple[float, ...]
    decode_tok_s: float
    prefill_tokens: int
    prefill_tok_s: float
    draft_s: float
    verify_s: float
    speedup: float | None
    plain_tok_s: float | None  # in-session plain decoding near this context length (None: not measured yet)
    plain_steps: int
    plain_age_s: float
    record: dict  # every figure (TurnStats.to_dict), as the saved chat keeps it
    mode: str = "fast"  # TurnStats.mode


@dataclass
class TurnStats:
    prompt_tokens: int = 0  # the whole prompt, cached prefix included
    prefill_tokens: int = 0  # what had to be computed (the prompt minus the reused cache)
    prefill_s: float = 0.0
    generated: int = 0
    decode_s: float = 0.0  # wall time of the generate loop, prefill excluded
    steps: int = 0  # target forward passes while decoding
    drafted: int = 0
    accepted: int = 0
    drafted_at: list[int] = field(default_factory=list)  # drafts that reached position i
    accepted_at: list[int] = field(default_factory=list)  # drafts whose position i was accepted
    draft_s: float = 0.0
    verify_s: float = 0.0  # target forward + verification
    method: str = ""  # the drafter's name
    drafter: dict = field(default_factory=dict)  # the drafter's own figures
    speclen: dict = field(default_factory=dict)  # how K was chosen (fixed, or the controller's figures)
    grammar: dict = field(default_factory=dict)  # structured output: forced tokens, the masks' cost (constraint.py)
    plain: PlainSpeed | None = None  # in-session plain decoding near the current context length
    exact: bool = False  # `--exact` was on (greedy turns: the mechanism below; sampled turns: nothing to do)
    guard_kernels: bool = False  # the exact guard ran batch-invariant kernels (no margin needed)
    guard_margin: float | None = None  # the exact guard's near-tie margin (None: none)
    guard_gaps: list = field(default_factory=list)  # the top-1/top-2 gap of each row it held back
    guard_steps: int = 0  # single-token steps it forced
    guard_s: float = 0.0  # and their time
    # drafts with q: per examined position, P(accept) under min(1, p/q) and under exact matching
    rules: list = field(default_factory=list, repr=False)

    def record(self, step: Step) -> None:
        """One engine step: what it drafted, accepted and emitted, its draft and verify time, the exact guard's
        doing."""
        drafted, accepted = len(step.draft), step.accepted
        self.steps += 1
        self.drafted += drafted
        self.accepted += accepted
        self.generated += len(step.emitted)
        while len(self.drafted_at) < drafted:
            self.drafted_at.append(0)
            self.accepted_at.append(0)
        for i in range(drafted):
            self.drafted_at[i] += 1
            self.accepted_at[i] += i < accepted
        self.draft_s += step.proposed - step.start
        self.verify_s += step.verified - step.proposed
        if step.gap is not None:
            self.guard_gaps.append(step.gap)
        if step.forced:
            self.guard_steps += 1
            self.guard_s += step.end - step.start

    @property
    def mode(self) -> str:
        """Which mode the turn ran, in words: 'fast', or 'exact' and how."""
        if not self.exact:
            return "fast"
        if self.guard_kernels:
            return "exact (batch-invariant kernels)"
        if self.guard_margin is not None:
            return f"exact (near-tie guard, margin {self.guard_margin:g})"
        return "exact (sampled: the model's distribution, as in fast mode)"

    @property
    def acceptance_rate(self) -> float | None:
        return self.accepted / self.drafted if self.drafted else None

    @property
    def mean_accepted_length(self) -> float:
        """tau: tokens emitted per target forward, the bonus/residual token included (as vLLM reports)."""
        return 1.0 + self.accepted / self.steps if self.steps else 0.0

    @property
    def decode_tps(self) -> float:
        return self.generated / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def prefill_tps(self) -> float:
        return self.prefill_tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    @property
    def other_s(self) -> float:
        return max(0.0, self.decode_s - self.draft_s - self.verify_s)

    def acceptance_by_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at, strict=False)]

    @property
    def speedup(self) -> float | None:
        """Over this session's own plain decoding (localspec.engine.baseline); None until that is measured."""
        per_step = self.generated / self.steps if self.steps else 0.0  # tau, less what the guard held back
        return speedup(self.decode_tps, per_step, self.plain)

    def rule_comparison(self) -> dict | None:
        """Mean acceptance probability per examined draft position under both rules (drafts with q)."""
        if not self.rules:
            return None
        n = len(self.rules)
        return {
            "positions": n,
            "rejection_sampling": round(sum(r for r, _ in self.rules) / n, 4),
            "exact_match": round(sum(m for _, m in self.rules) / n, 4),
        }

    def speedup_text(self) -> str:
        """'1.42x vs 11.2 tok/s plain', or '-' while in-session plain decoding is not measured yet."""
        value = self.speedup
        return "-" if value is None else f"{value:.2f}x vs {self.plain.tok_s:.1f} tok/s plain"

    def view(self) -> TurnView:
        plain = self.plain
        return TurnView(
            self.generated,
            self.steps,
            self.drafted,
            self.accepted,
            self.acceptance_rate,
            self.mean_accepted_length,
            tuple(self.acceptance_by_position()),
            self.decode_tps,
            self.prefill_tokens,
            self.prefill_tps,
            self.draft_s,
            self.verify_s,
            self.speedup,
            None if plain is None else plain.tok_s,
            0 if plain is None else plain.steps,
            0.0 if plain is None else plain.age_s(),
            self.to_dict(),
            self.mode,
        )

    def to_dict(self) -> dict:
        rate = self.acceptance_rate
        return {
            "prompt_tokens": self.prompt_tokens,
            "prefill_tokens": self.prefill_tokens,
            "prefill_s": round(self.prefill_s, 4),
            "prefill_tok_s": round(self.prefill_tps, 2),
            "generated_tokens": self.generated,
            "decode_s": round(self.decode_s, 4),
            "decode_tok_s": round(self.decode_tps, 2),
            "steps": self.steps,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": None if rate is None else round(rate, 4),
            "mean_accepted_length": round(self.mean_accepted_length, 3),
            "acceptance_by_position": [round(r, 3) for r in self.acceptance_by_position()],
            "draft_s": round(self.draft_s, 4),
            "verify_s": round(self.verify_s, 4),
            "other_s": round(self.other_s, 4),
            "method": self.method,
            "drafter": dict(self.drafter),
            "speclen": dict(self.speclen),
            "acceptance_rules": self.rule_comparison(),
            "mode": "exact" if self.exact else "fast",
            "grammar": dict(self.grammar) or None,
            "exact_guard": None
            if self.guard_margin is None and not self.guard_kernels
            else {
                "kernels": "batch-invariant" if self.guard_kernels else "default",
                "margin": self.guard_margin,
                "fired": len(self.guard_gaps),
                "gaps": [round(g, 3) for g in self.guard_gaps],
                "forced_steps": self.guard_steps,
                "forced_s": round(self.guard_s, 4),
            },
            "speedup": None if self.speedup is None else round(self.speedup, 3),
            "plain": None if self.plain is None else self.plain.to_dict(),
        }

    def summary(self) -> str:
        rate = self.acceptance_rate
        accept = "-" if rate is None else f"{rate:.0%}"
        guard = (
            f" | exact guard held {len(self.guard_gaps)} near-ties back ({self.guard_s * 1e3:.0f} ms)"
            if self.guard_gaps
            else ""
        )
        return (
            f"{self.generated} tok, {self.decode_tps:.1f} tok/s decode, speedup {self.speedup_text()} | "
            f"prefill {self.prefill_tokens} tok {self.prefill_tps:.0f} tok/s | accepted "
            f"{self.accepted}/{self.drafted} ({accept}), tau {self.mean_accepted_length:.2f} | draft "
            f"{self.draft_s * 1e3:.0f} ms, verify {self.verify_s * 1e3:.0f} ms, other {self.other_s * 1e3:.0f} ms"
            + guard
            + self._grammar_text()
            + f" | {self.mode}"
        )

    def _grammar_text(self) -> str:
        g = self.grammar
        if not g:
            return ""
        forced = f"forced {g['forced_accepted']}/{g['forced_drafted']}"
        return f" | {g['kind']}: {forced}, mask {g['mask_ms_per_token']:.2f} ms/tok"


@dataclass(frozen=True)
class TokenEvent:
    """What one engine step emitted. ``from_draft`` counts the leading tokens that came from accepted
    drafts and ``draft_chars`` the leading characters of ``text`` they make; ``finish_reason`` is set on
    the last event of a turn (stop, length, context)."""

    tokens: tuple[int, ...]
    text: str
    from_draft: int
    stats: TurnStats = field(repr=False)  # the turn's, live: it goes on counting
    finish_reason: str | None = None
    draft_chars: int = 0
    logprobs: tuple | None = None  # engine/logprobs.TokenLogprob per token, when the turn asked for them
