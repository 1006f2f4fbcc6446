"""Drafter chains (COPY+MODEL): on a simulated machine the controller verifies the copy drafter's proposal
where the text repeats and asks the model drafter on new text; the output stays the target's; each member
sees the records of its own drafts only; the names are checked."""

import numpy as np
import pytest
from support.draft_machine import GPU_SHAPE, machine
from support.fakes import ScriptedBackend, TimedBackend

from localspec.drafters.base import DEFAULT_TURN, Costs, Drafter, NoDrafter, Turn
from localspec.drafters.chain import ChainDrafter
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.table import DrafterSetup, chain_members
from localspec.engine.loop import generate
from localspec.engine.speclen import AdaptiveK, FixedK
from localspec.errors import ConfigError
from localspec.sampling import SamplingParams
from localspec.types import Draft, Features, Step

GREEDY = SamplingParams(temperature=0)
V = 16
PROMPT = [(i * 7) % V for i in range(200)]
COPY_SPANS = ((0, 60), (150, 210))  # answer positions where the text repeats something earlier


class SpanCopyDrafter(Drafter):
    """A copy drafter that knows the answer: inside COPY_SPANS it proposes the rest of the span with a
    long match's confidence, elsewhere nothing (no match). It records who drafted each step it saw."""

    name = "spancopy"

    def __init__(self, reference):
        self.reference = list(reference)
        self.steps: list[tuple[int, int, int]] = []  # (answer position, tokens it drafted (0: none), emitted)

    def propose(self, context, max_tokens) -> Draft:
        done = len(context) - len(PROMPT)
        for start, end in COPY_SPANS:
            if start <= done < end:
                tokens = self.reference[done : min(end, done + max_tokens)]
                return Draft.chain(tokens, confidence=tuple([0.97] * len(tokens)))
        return Draft()

    def begin(self, prompt, turn=DEFAULT_TURN):
        self._done = 0

    def observe(self, step: Step) -> None:
        self.steps.append((self._done, len(step.draft), len(step.emitted)))
        self._done += len(step.emitted)


class NoisyDraft(TimedBackend):
    """The target's logits plus noise: a draft model that agrees with the target most of the time."""

    def logits_after(self, context):
        noise = np.random.default_rng(abs(hash((99, *context[-2:]))) % 2**32).normal(size=self.vocab_size)
        return super().logits_after(context) + 1.5 * noise


def gpu_turn(clock, drafter_for, policy=None):
    """A 300-token greedy answer on a GPU-like machine (a window costs about a step, the draft model a
    twentieth of one) where the draft model is the target's logits plus noise: (completion, seconds, draft
    backend)."""
    window = machine(0.01, GPU_SHAPE)
    if policy is None:
        policy = AdaptiveK()
        sizes = (1, 2, 3, 5, 9, 17, 33, 65)
        policy.load_costs({"verify_s": {str(n): window(n) for n in sizes}, "count": {str(n): 9 for n in sizes}})
    target = TimedBackend(clock, window, 0.0025, vocab_size=V, seed=0)
    draft = NoisyDraft(clock, machine(0.0005, GPU_SHAPE), 0.00005, vocab_size=V, seed=0)
    model = DraftModelDrafter(draft, V, V, seed=1)
    draft.prefilled.clear()
    draft.forward_calls.clear()
    start = clock.now
    out = generate(target, drafter_for(model), PROMPT, GREEDY, max_tokens=300, draft_tokens=policy)
    return out, clock.now - start, draft


def reference():
    return generate(ScriptedBackend(vocab_size=V, seed=0), NoDrafter(), PROMPT, GREEDY, max_tokens=300).tokens


def in_copy(position):
    return any(start <= position < end for start, end in COPY_SPANS)


def test_chain_takes_the_copy_on_repeats_and_the_model_on_new_text(virtual_clock):
    truth = reference()
    copy = SpanCopyDrafter(truth)
    out, seconds, draft = gpu_turn(virtual_clock, lambda model: ChainDrafter(copy, model))
    assert out.tokens == truth
    copied = sum(n for pos, drafted, n in copy.steps if in_copy(pos) and drafted)
    assert copied >= 0.8 * sum(end - start for start, end in COPY_SPANS), "a repeat comes from the free copy"
    model_steps = out.stats.speclen["model_steps"]
    prose_steps = sum(1 for pos, _, _ in copy.steps if not in_copy(pos))
    assert model_steps >= 0.8 * prose_steps, "on new text the draft model drafts"
    assert model_steps <= prose_steps + 3, "the draft model is hardly run inside a repeat"
    _, model_s, _ = gpu_turn(virtual_clock, lambda model: model)
    _, copy_s, _ = gpu_turn(virtual_clock, lambda model: SpanCopyDrafter(truth))
    assert seconds < min(model_s, copy_s), "the chain beats each of its members alone"


def test_at_a_fixed_k_the_chain_takes_the_copy_whenever_there_is_one(virtual_clock):
    truth = reference()
    copy = SpanCopyDrafter(truth)
    out, _, draft = gpu_turn(virtual_clock, lambda model: ChainDrafter(copy, model), FixedK(8))
    assert out.tokens == truth
    assert all((drafted > 0) == in_copy(pos) for pos, drafted, _ in copy.steps)
    assert draft.fed() > 0


class Recorder(Drafter):
    def __init__(self, name, draft, per_token=0.0):
        self.name, self.draft_, self.per_token, self.seen = name, draft, per_token, []

    def propose(self, context, max_tokens):
        return self.draft_

    def observe(self, step):
        self.seen.append((len(step.draft), step.accepted, tuple(step.emitted), step.features))

    def costs(self, context):
        return Costs(self.per_token, 0.0)


class Pick:
    """A controller stand-in that answers choose() from a script."""

    def __init__(self, script):
        self.script, self.hint = list(script), None

    def chain(self, cost_per_token):
        self.hint = cost_per_token

    def choose(self, copy, cap, catchup_s=0.0):
        return self.script.pop(0)


def emitted(context, draft, accepted, tokens):
    """The record of a step that verified ``draft``, accepted ``accepted`` of it and emitted ``tokens``."""
    context.extend(tokens)
    features = Features(len(context) - len(tokens) - 1, np.zeros((accepted + 1, 2)))
    return Step(context, draft=draft, accepted=accepted, emitted=list(tokens), features=features)


def test_each_member_sees_its_own_steps_and_the_others_as_undrafted_steps():
    copy, model = Recorder("c", Draft.chain([1, 2, 3])), Recorder("m", Draft.chain([4, 5]), per_token=0.02)
    chain = ChainDrafter(copy, model)
    policy = Pick([0, 2])
    chain.begin([0], Turn(policy=policy))
    assert policy.hint == 0.02 and chain.name == "c+m"
    context = [0]
    first = chain.propose(context, 4)
    assert first.tokens == (1, 2, 3)
    step = emitted(context, first, 2, (1, 2, 9))
    chain.observe(step)
    second = chain.propose(context, 4)
    assert second.tokens == (4, 5)
    later = emitted(context, second, 2, (4, 5, 6))
    chain.observe(later)
    assert copy.seen == [(3, 2, (1, 2, 9), step.features), (0, 0, (4, 5, 6), later.features)]
    assert model.seen == [(0, 0, (1, 2, 9), step.features), (2, 2, (4, 5, 6), later.features)]


def test_a_draft_model_in_a_chain_keeps_its_sync_point_on_copied_steps():
    draft = ScriptedBackend(vocab_size=V, seed=3)
    model = DraftModelDrafter(draft, V, V, seed=1)
    chain = ChainDrafter(Recorder("c", Draft.chain([1, 2])), model)
    context = [5, 6, 7]
    chain.begin(context, Turn(policy=Pick([0])))
    chain.observe(emitted(context, chain.propose(context, 4), 2, (1, 2, 3)))
    assert model.costs(context).catchup_s > 0, "the copied tokens are not in the draft cache"


def test_chain_names():
    assert [k.name for k in chain_members("suffix+draft")] == ["suffix", "draft"]
    assert [k.name for k in chain_members("ngram+eagle")] == ["ngram", "eagle"]
    for bad in ("draft+suffix", "suffix+ngram", "suffix+draft+eagle", "suffix+", "suffix+random"):
        with pytest.raises(ConfigError, match="COPY\\+MODEL"):
            chain_members(bad)
    with pytest.raises(ConfigError, match="unknown drafter"):
        chain_members("sufix")


def test_a_chain_member_that_cannot_be_built_says_why(tmp_path):
    with pytest.raises(ConfigError, match="draft-model"):  # no draft model known for this target
        DrafterSetup().build("suffix+draft", ScriptedBackend(vocab_size=V), cache_dir=str(tmp_path))
