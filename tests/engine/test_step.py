"""The engine's one step record: every step is plan, propose, verify, accept, emit, record, written into one
``Step`` that the drafter observes (exactly once per step) and the stats, the plain baseline and the
controller record; the Drafter interface stays small."""

from dataclasses import replace

import numpy as np
from support.fakes import OracleDrafter, ScriptedBackend, ScriptedTreeBackend

from localspec.backends.base import Capabilities
from localspec.drafters.base import FREE, Drafter, DrafterNeeds, NoDrafter
from localspec.drafters.lookahead.drafter import LookaheadDrafter, LookaheadOptions
from localspec.engine.loop import generate, stream_generate
from localspec.sampling import SamplingParams
from localspec.types import ForwardOut, Step

GREEDY = SamplingParams(temperature=0)
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


def test_the_drafter_interface_has_at_most_ten_members():
    declared = {name for name in [*vars(Drafter), *Drafter.__dict__.get("__annotations__", {})]}
    members = {name for name in declared if not (name.startswith("__") and name.endswith("__"))}
    assert members == {"name", "needs", "begin", "propose", "observe", "end", "costs", "state", "describe", "close"}
    assert len(members) <= 10


class Observing(OracleDrafter):
    """Right for the first two tokens of every draft; keeps a copy of every record it observes."""

    def __init__(self, reference, prompt_len, vocab_size):
        super().__init__(reference, prompt_len, vocab_size, right=2)
        self.seen: list[Step] = []
        self.proposals = 0

    def propose(self, context, max_tokens):
        self.proposals += 1
        return super().propose(context, max_tokens)

    def observe(self, step):
        self.seen.append(replace(step, context=list(step.context), emitted=tuple(step.emitted)))


def test_a_drafter_observes_one_record_per_step_with_what_the_step_did():
    backend = ScriptedBackend(vocab_size=12)
    reference = generate(backend, NoDrafter(), PROMPT, GREEDY, max_tokens=40).tokens
    backend.truncate(0)
    drafter = Observing(reference, len(PROMPT), 12)
    events = list(stream_generate(backend, drafter, PROMPT, GREEDY, max_tokens=40, draft_tokens=4))
    stats = events[-1].stats
    seen = drafter.seen
    assert len(seen) == len(events) == stats.steps == drafter.proposals  # one proposal and one record a step
    assert [s.emitted for s in seen] == [e.tokens for e in events]
    assert [s.accepted for s in seen] == [e.from_draft for e in events]
    assert sum(len(s.draft) for s in seen) == stats.drafted and sum(s.accepted for s in seen) == stats.accepted
    assert tuple(t for s in seen for t in s.emitted) == reference
    context = list(PROMPT)
    for step in seen:
        context += step.emitted
        assert step.context == context  # the context with this step's tokens
        assert step.verdict.tokens[: len(step.emitted)] == step.emitted
        assert step.accepted == min(step.verdict.accepted, len(step.emitted)) <= min(2, len(step.draft))
        assert step.judged == len(step.draft) and step.features is None and step.outputs is None
        assert step.since <= step.start <= step.planned <= step.proposed <= step.verified
        assert step.end == 0.0  # observed before the step's end is taken
    assert max(s.accepted for s in seen) == 2


class HiddenBackend(ScriptedBackend):
    """A scripted model that hands out one feature per cached position: the position itself."""

    capabilities = Capabilities(hidden_states=True)

    def prefill_features(self, tokens, progress=None):
        start = len(self._tokens)
        self.prefill(tokens, progress)
        return np.arange(start, start + len(tokens), dtype=np.float32)[:, None]

    def forward(self, tokens, return_hidden=False):
        start = len(self._tokens)
        out = super().forward(tokens)
        hidden = np.arange(start, start + len(tokens), dtype=np.float32)[:, None] if return_hidden else None
        return ForwardOut(out.rows.numpy(), hidden)


class FeatureFed(OracleDrafter):
    """A drafter fed the target's features (of positions it lacks): records every record's features."""

    needs = DrafterNeeds(hidden_states=True)

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.features: list[tuple[bool, int, list[int]]] = []  # (a step's record, start, positions of the rows)

    def observe(self, step):
        if step.features is not None:
            rows = [int(r) for r in step.features.rows[:, 0]]
            self.features.append((step.verdict is not None, step.features.start, rows))


def test_a_feature_fed_drafter_gets_every_cached_positions_features_once_in_the_records():
    backend = HiddenBackend(vocab_size=12)
    reference = generate(ScriptedBackend(vocab_size=12), NoDrafter(), PROMPT, GREEDY, max_tokens=30).tokens
    drafter = FeatureFed(reference, len(PROMPT), 12, right=1)
    out = generate(backend, drafter, PROMPT, GREEDY, max_tokens=30, draft_tokens=3)
    assert out.tokens == reference
    first, *steps = drafter.features
    assert first == (False, 0, list(range(len(PROMPT) - 1)))  # the prompt's, in a record of features alone
    assert all(from_step for from_step, _, _ in steps) and len(steps) == out.stats.steps
    positions = [p for _, start, rows in drafter.features for p in rows]
    assert all(rows == list(range(start, start + len(rows))) for _, start, rows in drafter.features)
    # every position of the context but the pending one, in order, once (a stop may leave one over at the end)
    assert positions[: len(PROMPT) + len(reference) - 1] == list(range(len(PROMPT) + len(reference) - 1))


def test_lookahead_gets_the_targets_argmax_of_every_verified_node_in_the_record():
    backend = ScriptedTreeBackend(vocab_size=50, order=2, scale=3.0, seed=3)
    drafter = LookaheadDrafter(LookaheadOptions(window=4, ngram=3, guesses=3, context=False), seed=1)
    seen = []
    observe = drafter.observe
    drafter.observe = lambda step: (seen.append((step.draft, step.outputs)), observe(step))
    out = generate(backend, drafter, [1, 2, 3, 4, 5], GREEDY, max_tokens=40, draft_tokens=8)
    assert out.stats.drafter["window_steps"] >= out.stats.steps - 1 and out.stats.accepted > 0
    verified = [(draft, outputs) for draft, outputs in seen if len(draft)]
    assert verified and all(outputs is not None and len(outputs) == len(draft) + 1 for draft, outputs in verified)
    assert all(outputs is None for draft, outputs in seen if not len(draft))


def test_the_default_drafter_costs_nothing_and_holds_no_state():
    drafter = Drafter()
    assert drafter.costs([1, 2]) == FREE and drafter.state is None
    drafter.state = None
    assert drafter.begin([1, 2]) is None and drafter.end() == {} and len(drafter.propose([1, 2], 4)) == 0
