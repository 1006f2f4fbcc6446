"""The speedup's baseline: this session's own plain steps near the current context length, shown only
once there are enough of them, and never above what the tokens per step allow."""

import pytest
from support.fakes import OracleDrafter, ScriptedBackend, TimedBackend, plain_step

from localspec.drafters.base import NoDrafter
from localspec.engine.baseline import EPS, MIN_STEPS, PlainBaseline, speedup
from localspec.engine.loop import generate, stream_generate
from localspec.sampling import SamplingParams
from localspec.types import EMPTY_DRAFT

GREEDY = SamplingParams(temperature=0)


def test_no_baseline_until_enough_plain_steps_near_this_context_length(virtual_clock):
    plain = PlainBaseline()
    for i in range(MIN_STEPS - 1):
        plain.record(plain_step(100 + i, 0.01))
    assert plain.at(110) is None
    plain.record(plain_step(115, 0.5))  # one stray slow step
    assert plain.at(110).steps == MIN_STEPS and plain.at(110).tok_s == pytest.approx(100.0)  # left out
    assert plain.at(200) is None  # steps at 100-115 say nothing about a context twice as long
    for _ in range(MIN_STEPS):
        plain.record(plain_step(200, 0.02))
    assert plain.at(210).tok_s == pytest.approx(50.0) and plain.at(210).steps == MIN_STEPS


def test_the_speedup_is_capped_by_the_tokens_per_step():
    fake = PlainBaseline()
    for _ in range(MIN_STEPS):
        fake.record(plain_step(10, 1.0))  # a plain step that took a second: a busy machine
    assert speedup(50.0, 2.0, fake.at(10)) == pytest.approx(2.0 * (1 + EPS))
    assert speedup(1.5, 2.0, fake.at(10)) == pytest.approx(1.5)
    assert speedup(50.0, 2.0, None) is None


class EveryOther(OracleDrafter):
    """Right drafts on every other step; nothing on the rest (those are plain steps)."""

    calls = 0

    def propose(self, context, max_tokens):
        self.calls += 1
        return super().propose(context, max_tokens) if self.calls % 2 else EMPTY_DRAFT


def test_slow_first_steps_cannot_inflate_the_speedup(virtual_clock):
    """The first 12 forwards run 20x slow (the machine was busy at load). The speedup stays '-' until 16
    plain steps are measured, never shows more than tau allows, and ends at the true ratio."""
    step, calls = 0.01, []

    def window(n):
        calls.append(n)
        return step * (20 if len(calls) <= 12 else 1) * (1 + 0.05 * (n - 1))

    prompt = [1, 2, 3]
    reference = generate(ScriptedBackend(vocab_size=12), NoDrafter(), prompt, GREEDY, max_tokens=400).tokens
    target = TimedBackend(virtual_clock, window, 0.0, vocab_size=12)
    drafter = EveryOther(reference, len(prompt), 12)
    shown = []
    for event in stream_generate(target, drafter, prompt, GREEDY, max_tokens=400, draft_tokens=4):
        s = event.stats
        shown.append((s.steps, s.speedup, s.mean_accepted_length))
    first = next(i for i, (_, value, _) in enumerate(shown) if value is not None)
    assert first >= 2 * MIN_STEPS - 2  # every other step is plain: 16 of them take ~32 steps
    assert all(value <= tau * (1 + EPS) + 1e-9 for _, value, tau in shown[first:])
    final = event.stats
    true = final.decode_tps * step  # tokens per second over a plain step's speed (a step costs `step`)
    assert final.speedup == pytest.approx(true, rel=0.03)
    assert final.to_dict()["plain"]["steps"] >= MIN_STEPS
