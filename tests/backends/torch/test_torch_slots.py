"""Slots of one torch model whose passes are packed into one (backends/torch/slots.py, engine/fibers.py), on tiny
random decoders: a packed pass gives each slot the rows it would get alone, each slot's greedy answer is the
model's answer alone (plain decoding and a copy drafter), the slots' passes really are packed, and a slot that
fills its share of the cache ends its own answer there, its neighbour's untouched."""

import numpy as np
import pytest
from support.tiny_torch import ARCHS, GREEDY, V, assert_close, tiny

from localspec.drafters.base import NoDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.fibers import Fibers
from localspec.engine.loop import generate
from localspec.errors import ConfigError, ContextOverflow

PROMPTS = [[1, 2, 3, 4, 5, 6, 7, 8] * 3, [9, 10, 11, 12] * 5, [20, 3, 17, 5, 2]]


def together(slots, flush, jobs, max_tokens=30) -> dict:
    """Run ``jobs`` [(slot index, drafter, prompt)] side by side: each job's Completion (or error) by index."""
    fibers, done = Fibers(flush), {}
    for i, (slot, drafter, prompt) in enumerate(jobs):

        def run(i=i, slot=slot, drafter=drafter, prompt=prompt):
            try:
                done[i] = generate(slots[slot], drafter, prompt, GREEDY, max_tokens=max_tokens, draft_tokens=4)
            except ContextOverflow as exc:
                done[i] = exc

        fibers.start(run)
    while fibers.live:
        fibers.step()
    return done


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_a_packed_pass_gives_each_slot_its_rows_alone(arch):
    lone = tiny(arch)
    expected = []
    for prompt in PROMPTS:
        lone.truncate(0)
        lone.prefill(prompt[:-3])
        expected.append(lone.forward(prompt[-3:]).logits)
    owner = tiny(arch)
    slots, flush = owner.slots(3)
    rows = {}

    def run(i):
        slots[i].prefill(PROMPTS[i][:-3])
        rows[i] = slots[i].forward(PROMPTS[i][-3:]).logits

    fibers = Fibers(flush)
    for i in range(3):
        fibers.start(run, i)
    while fibers.live:
        fibers.step()
    for i in range(3):
        assert_close(rows[i], expected[i])
        assert slots[i].cached_tokens == tuple(PROMPTS[i])
    batcher = flush.__self__
    assert batcher.batched >= 2  # the prefills shared a pass, and so did the windows
    assert slots[0].batch_load().sequences == 2 and slots[0].batch_load().tokens == 2  # two others, a row each


def test_slots_answer_as_the_model_alone_with_and_without_drafts():
    lone = tiny("llama-gqa")
    reference = [generate(lone, NoDrafter(), p, GREEDY, max_tokens=30).tokens for p in PROMPTS]
    slots, flush = tiny("llama-gqa").slots(3)
    jobs = [(0, NoDrafter(), PROMPTS[0]), (1, NgramDrafter(1, 4), PROMPTS[1]), (2, NgramDrafter(1, 4), PROMPTS[2])]
    done = together(slots, flush, jobs)
    for i in range(3):
        assert list(done[i].tokens) == list(reference[i]), i
    assert done[1].stats.drafted > 0  # the copy drafter drafted in its slot
    assert flush.__self__.batched > 10


def test_a_full_slot_ends_its_answer_alone_within_its_share():
    reference = generate(tiny("llama-gqa"), NoDrafter(), PROMPTS[2], GREEDY, max_tokens=30).tokens
    slots, flush = tiny("llama-gqa").slots(2)  # 128 positions each
    long = list(np.arange(120) % V)
    done = together(slots, flush, [(0, NoDrafter(), long), (1, NoDrafter(), PROMPTS[2])], max_tokens=30)
    assert done[0].finish_reason == "context" and len(done[0].tokens) < 30
    assert len(slots[0].cached_tokens) <= slots[0].n_ctx == 128
    assert list(done[1].tokens) == list(reference)  # its neighbour's cache never reached into its share


def test_slots_refuse_what_they_cannot_do():
    owner = tiny("llama-gqa")
    with pytest.raises(ConfigError, match="too little"):
        owner.slots(8)  # 32 positions each
    slots, _ = owner.slots(2)
    assert not slots[0].capabilities.tree_attention and not slots[0].capabilities.hidden_states
    with pytest.raises(ConfigError, match="conversation states"):
        slots[0].save_state()


def test_serve_parallel_on_torch_answers_requests_at_once_as_one_at_a_time(tmp_path):
    """The real server and openai client over a tiny Hugging Face folder on the torch backend, `--parallel 2`
    (whether two requests overlap depends on timing here: the packing itself is tested above)."""
    import threading

    from support.server import serve
    from support.tiny_torch import write_hf_checkpoint

    from localspec.apps.cli import build_parser
    from localspec.config import settings_from_args
    from localspec.session import Session

    write_hf_checkpoint(tmp_path, "llama")
    args = build_parser().parse_args(
        ["serve", "--model", str(tmp_path), "--backend", "torch", "--temperature", "0", "--drafter", "ngram"]
    )
    settings = settings_from_args(args)
    worker, running = serve(lambda: Session.open(settings), settings.model, parallel=2)
    try:
        questions = ["hello world hello world hello", "the quick brown fox"]

        def ask(question):
            messages = [{"role": "user", "content": question}]
            reply = running.client().chat.completions.create(model="m", messages=messages, max_tokens=24)
            return reply.choices[0].message.content

        alone = [ask(q) for q in questions]
        answers = {}
        threads = [
            threading.Thread(target=lambda i=i, q=q: answers.__setitem__(i, ask(q))) for i, q in enumerate(questions)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert [answers[0], answers[1]] == alone and all(alone)
    finally:
        running.stop()
        worker.stop()


def test_a_pass_that_fails_ends_the_requests_in_it_and_the_scheduler_goes_on():
    owner = tiny("llama-gqa")
    slots, flush = owner.slots(2)
    packed, failures = owner.model.forward_packed, iter([RuntimeError("out of memory")])

    def once_broken(*args):
        error = next(failures, None)
        if error is not None:
            raise error
        return packed(*args)

    owner.model.forward_packed = once_broken
    fibers, done, errors = Fibers(flush), {}, {}

    def run(i):
        try:
            done[i] = generate(slots[i], NoDrafter(), PROMPTS[i], GREEDY, max_tokens=8).tokens
        except RuntimeError as exc:
            errors[i] = str(exc)

    for i in range(2):
        fibers.start(run, i)
    while fibers.live:
        fibers.step()
    assert errors == {0: "out of memory", 1: "out of memory"}  # both prompts were in the failed pass
    assert len(generate(slots[0], NoDrafter(), PROMPTS[2], GREEDY, max_tokens=8).tokens) == 8  # and slots go on
