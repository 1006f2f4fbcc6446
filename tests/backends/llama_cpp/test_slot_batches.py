"""How the Batcher (backends/llama_cpp/slots.py) fills each batch, over the scripted shared cache of
support/slots.py: windows first, then prompts in arrival order, chunked at the batch size; and a request's first
window (its first token) in a batch without another prompt's chunk, as llama-server's first token comes out of
the prompt's own pass."""

import numpy as np
from support.fakes import DistributionDrafter, ScriptedBackend
from support.slots import scripted_slots

from localspec.drafters.base import NoDrafter
from localspec.engine.loop import generate
from localspec.sampling import SamplingParams

GREEDY = SamplingParams(temperature=0)
SAMPLED = SamplingParams(temperature=1.0)


def run_two(short: list[int], long: list[int]):
    """Slot 0 asks ``short``, then slot 1 ``long`` in the same step: each decode's entries."""
    model = ScriptedBackend(vocab_size=6, seed=3)
    slots, context, fibers = scripted_slots(model, 2, n_batch=8)
    done = {}
    for i, prompt in enumerate((short, long)):
        fibers.start(
            lambda i=i, prompt=prompt: done.__setitem__(
                i, generate(slots[i], NoDrafter(), prompt, GREEDY, max_tokens=4)
            )
        )
    while fibers.live:
        fibers.step()
    alone = [
        generate(ScriptedBackend(vocab_size=6, seed=3), NoDrafter(), p, GREEDY, max_tokens=4) for p in (short, long)
    ]
    assert [done[i].tokens for i in range(2)] == [a.tokens for a in alone]
    return context.batches


def test_a_first_window_shares_no_batch_with_another_prompts_chunk():
    batches = run_two([0, 1, 2, 1], [1, 2, 3, 4, 5, 0] * 5)
    # slot 0's prompt (3 tokens before its pending one) arrives first and is prefilled first, beside 5 of slot 1's
    assert batches[0] == [(0, False, 3), (1, False, 5)]
    first = next(i for i, batch in enumerate(batches) if (0, True, 1) in batch)
    assert batches[first] == [(0, True, 1)], "slot 0's first token waited for slot 1's prompt"
    # slot 1's prompt goes on where it left off, beside slot 0's later windows, a batch at a time
    assert batches[first + 1] == [(0, True, 1), (1, False, 7)]
    prompt_tokens = [n for batch in batches for seq, logits, n in batch if seq == 1 and not logits]
    assert sum(prompt_tokens) == 29 and max(prompt_tokens) <= 8


def test_windows_go_first_and_prompts_fill_what_is_left():
    batches = run_two([0, 1, 2, 1, 0, 1, 2], [1, 2, 3, 4, 5, 0] * 4)
    for batch in batches:
        kinds = [logits for _, logits, _ in batch]
        assert kinds == sorted(kinds, reverse=True), "a prompt's chunk before a window"
        assert sum(n for *_, n in batch) <= 8


def test_a_slot_is_told_the_others_tokens_but_not_their_drafts():
    """Each slot prices its draft against the others decoding plainly: a window beside another slot's window of 3
    (its pending token and 2 drafted) is told of 1 token of 1 sequence, so no slot drafts because the others did."""
    model = ScriptedBackend(vocab_size=6, seed=3)
    slots, context, fibers = scripted_slots(model, 2, n_batch=16)
    loads = {0: [], 1: []}
    for i, slot in enumerate(slots):
        forward = slot.forward

        def watched(tokens, return_hidden=False, i=i, slot=slot, forward=forward):
            out = forward(tokens, return_hidden)
            loads[i].append((len(tokens), slot.batch_load()))
            return out

        slot.forward = watched
        drafter, rng = DistributionDrafter(6, k=2), np.random.default_rng(i)
        fibers.start(
            lambda slot=slot, d=drafter, rng=rng: generate(
                slot, d, [0, 1, 2, 1], SAMPLED, max_tokens=4, draft_tokens=2, rng=rng
            )
        )
    while fibers.live:
        fibers.step()
    shared = [b for b in context.batches if [logits for _, logits, _ in b] == [True, True]]
    assert any(n == 3 for b in shared for *_, n in b), "no batch held a drafted window beside another"
    told = {load[:2] for i in loads for _, load in loads[i]}
    assert (1, 1) in told and told <= {(1, 1), (0, 0)}, told  # beside the other's window, or alone
