"""Slots of one llama.cpp context decoded together (backends/llama_cpp/slots.py, engine/fibers.py), on the real
SmolLM2-135M: each slot's greedy answer is the one the model gives alone, with plain decoding, a copy drafter and
trees, up to a near tie (a row whose top two logits are closer than the drift llama.cpp's batched kernels were
measured to cause: a batch of several slots computes each row with other kernels than a lone step); the slots'
passes really share batches; one slot's overflow leaves the others going."""

import pytest
from support.fakes import OracleTreeDrafter

from localspec.backends.llama_cpp.backend import LlamaCppBackend
from localspec.chat.conversation import Conversation
from localspec.drafters.base import NoDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.exact import DEFAULT_MARGIN
from localspec.engine.fibers import Fibers
from localspec.engine.loop import generate, stream_generate
from localspec.errors import ConfigError, ContextOverflow
from localspec.sampling import SamplingParams

pytestmark = pytest.mark.model
GREEDY = SamplingParams(temperature=0)
QUESTIONS = [
    "Write a Python function that returns the factorial of n.",
    "Name three colours of the rainbow.",
    "Repeat after me: one two three four five six seven eight nine ten.",
]


@pytest.fixture(scope="module")
def owner(smollm2_path):
    with LlamaCppBackend(smollm2_path, n_ctx=3072, n_threads=2) as backend:
        yield backend


def alone(backend, prompt) -> tuple[list[int], list[float]]:
    """The model's greedy answer decoding alone, and each token's top-two logit gap."""
    tokens, gaps = [], []
    for event in stream_generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=24, logprobs=2):
        tokens += event.tokens
        gaps += [s.top[0][1] - s.top[1][1] for s in event.logprobs]
    return tokens, gaps


def same_until_a_tie(got, reference) -> bool:
    """``got`` is the reference answer, or leaves it only at a near tie of the reference's."""
    tokens, gaps = reference
    diverged = next((i for i, (a, b) in enumerate(zip(got, tokens, strict=False)) if a != b), None)
    if diverged is None:
        return list(got) == tokens
    return gaps[diverged] < DEFAULT_MARGIN["llama.cpp"]


def prompts(backend) -> list[list[int]]:
    out = []
    for question in QUESTIONS:
        conv = Conversation()
        conv.add("user", question)
        out.append(conv.prompt_tokens(backend, reserve=64))
    return out


def together(slots, flush, jobs) -> dict:
    """Run ``jobs`` [(slot index, drafter, prompt)] side by side: each job's Completion by index."""
    fibers, done = Fibers(flush), {}
    for i, (slot, drafter, prompt) in enumerate(jobs):

        def run(i=i, slot=slot, drafter=drafter, prompt=prompt):
            done[i] = generate(slots[slot], drafter, prompt, GREEDY, max_tokens=24, draft_tokens=4)

        fibers.start(run)
    while fibers.live:
        fibers.step()
    return done


def test_slots_answer_as_the_model_alone_and_share_batches(owner):
    asked = prompts(owner)
    ref = [alone(owner, p) for p in asked]
    slots, flush = owner.slots(3)
    try:
        jobs = [(0, NoDrafter(), asked[0]), (1, NgramDrafter(), asked[1]), (2, NgramDrafter(), asked[2])]
        done = together(slots, flush, jobs)
        assert all(same_until_a_tie(done[i].tokens, ref[i]) for i in range(3))
        assert done[2].stats.accepted > 0, "the copy drafter's drafts were verified in the shared batches"
        batcher = flush.__self__
        assert batcher.batched > 0 and batcher.decodes < sum(d.stats.steps for d in done.values())
        # a second round on the same slots reuses each slot's cached prompt (its own sequence)
        again = together(slots, flush, [(1, NoDrafter(), asked[1]), (0, NoDrafter(), asked[0])])
        assert same_until_a_tie(again[0].tokens, ref[1]) and same_until_a_tie(again[1].tokens, ref[0])
        assert again[1].stats.prefill_tokens < len(asked[0]) - 1 or again[1].stats.prefill_tokens == 0
    finally:
        for slot in slots:
            slot.close()


def test_trees_verify_in_each_slots_own_sequences(owner):
    asked = prompts(owner)[:2]
    ref = [alone(owner, p) for p in asked]
    slots, flush = owner.slots(2)
    try:
        jobs = [(i, OracleTreeDrafter(ref[i][0], len(p), owner.vocab_size, seed=i), p) for i, p in enumerate(asked)]
        done = together(slots, flush, jobs)
        assert all(same_until_a_tie(done[i].tokens, ref[i]) for i in range(2))
        assert all(d.stats.accepted > 0 for d in done.values())
    finally:
        for slot in slots:
            slot.close()


def test_one_slots_overflow_ends_that_answer_alone(owner):
    asked = prompts(owner)
    slots, flush = owner.slots(2)  # 1,536 positions each
    long = asked[0] * 40
    fibers, done, errors = Fibers(flush), {}, {}

    def run(i, prompt):
        try:
            done[i] = generate(slots[i], NoDrafter(), prompt, GREEDY, max_tokens=24).tokens
        except ContextOverflow as exc:
            errors[i] = str(exc)

    fibers.start(run, 0, long)
    fibers.start(run, 1, asked[1])
    while fibers.live:
        fibers.step()
    assert "context" in errors[0] and 0 not in done
    assert same_until_a_tie(done[1], alone(owner, asked[1]))
    for slot in slots:
        slot.close()


def test_slot_counts_that_cannot_work_are_refused(owner):
    with pytest.raises(ConfigError, match="at least 1"):
        owner.slots(0)
    with pytest.raises(ConfigError, match="more sequences"):
        owner.slots(65)


def test_prompts_fill_batches_in_arrival_order_beside_the_windows(owner):
    """Two long prompts at once: the first fills the first batches and is answered first; the second goes on
    where the batch left off; each slot learns what the others put into its last batch."""
    asked = prompts(owner)
    longer = [p[:-1] * (owner.n_batch // len(p) + 2) + p[-1:] for p in asked[:2]]  # over a batch each
    assert all(owner.n_batch < len(p) < owner.n_ctx // 2 - 40 for p in longer)
    ref = [alone(owner, p) for p in longer]
    slots, flush = owner.slots(2)
    try:
        done = together(slots, flush, [(0, NoDrafter(), longer[0]), (1, NoDrafter(), longer[1])])
        assert all(same_until_a_tie(done[i].tokens, ref[i]) for i in range(2))
        assert done[0].stats.prefill_s < done[1].stats.prefill_s, "the first to arrive is prefilled first"
        assert owner.batch_load() == (0, 0, 0, 0.0)
        loads = []
        for i in range(2):  # each slot's steps, and what the other put into each
            slots[i].truncate(0)

        def watch(i=0):
            for _ in stream_generate(slots[0], NoDrafter(), asked[2], GREEDY, max_tokens=12):
                loads.append(slots[0].batch_load())

        fibers = Fibers(flush)
        fibers.start(watch)
        fibers.start(lambda: generate(slots[1], NoDrafter(), asked[1], GREEDY, max_tokens=12))
        while fibers.live:
            fibers.step()
        assert (1, 1) in {load[:2] for load in loads}, "a decode step beside the other slot's: its token, its sequence"
        shared = [load for load in loads if load.sequences]
        assert all(load.pass_tokens >= load.tokens + 1 and load.pass_s > 0 for load in shared)  # the pass as it was
    finally:
        for slot in slots:
            slot.close()
