"""Exact per slot, batched: the chi-square of test_distribution.py with two and four generations side by side
(`serve --parallel`), each a greenlet whose forward passes the real Batcher joins into shared batches over a
scripted cache (support/slots.py). The batch is small (8 tokens), so prompts are chunked across batches and
several slots' windows share one; each slot has its own drafter and generator. Every slot's answers, and all
of them pooled, must follow the target's distribution; and the canaries — a broken verifier and a batch that
hands a slot another slot's rows — must fail at the same counts.
"""

import pytest
from support.distribution import (
    SETTINGS,
    chi_square_p,
    exact_distribution,
    residual_without_q,
    sample_answers_in_slots,
)
from support.fakes import DistributionDrafter, ScriptedBackend
from support.slots import scripted_slots

import localspec.engine.verify as verify
from localspec.backends.llama_cpp.slots import Batcher
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.ngram import NgramDrafter

V = 6
# every kind and canary: at 2000 every canary already fails (p < 1e-6) at seeds 11 to 15, but one slot's own
# check fell to p 9e-5 at one of them (five checks per run); at 3000 all pass (p >= 2e-3) and all canaries fail
SAMPLES = 3000
SAMPLING = SETTINGS[0]  # T=1: every token reachable, so a wrong row shows wherever it lands
DRAFTERS = {
    "point-mass": lambda: NgramDrafter(1, 2),
    "with-q": lambda: DistributionDrafter(V, k=2),
    "draft-model": lambda: DraftModelDrafter(ScriptedBackend(vocab_size=V, scale=1.5, seed=4), V, V, seed=5),
}


def target():
    return ScriptedBackend(vocab_size=V, scale=1.5, seed=3)


def pooled(counts: list[dict]) -> dict:
    out = {}
    for mine in counts:
        for answer, n in mine.items():
            out[answer] = out.get(answer, 0) + n
    return out


def run_slots(kind: str, count: int, samples: int, seed=11):
    model = target()
    slots, context, fibers = scripted_slots(model, count)
    counts = sample_answers_in_slots(slots, fibers, DRAFTERS[kind], SAMPLING, seed=seed, samples=samples)
    return counts, context, exact_distribution(model, SAMPLING)


@pytest.mark.parametrize("count", [2, 4])
@pytest.mark.parametrize("kind", list(DRAFTERS))
def test_each_slot_answers_with_the_target_distribution(kind, count):
    counts, context, dist = run_slots(kind, count, SAMPLES)
    assert any(len(batch) > 1 for batch in context.batches), "the slots never shared a batch"
    assert any(sum(n for *_, n in batch) == context.n_batch for batch in context.batches), "no batch was full"
    for mine in counts:
        assert chi_square_p(mine, dist) > 1e-3
    assert chi_square_p(pooled(counts), dist) > 1e-3


def swap_rows_of_two_slots(decode):
    """Batcher._decode, broken: the first two slots of a batch that asked for rows get each other's (equal
    windows only, so the shapes still fit)."""

    def broken(self, group):
        ret = decode(self, group)
        asked = [p.slot for p in group if p.logits]
        if len(asked) > 1 and asked[0].rows.shape == asked[1].rows.shape:
            asked[0].rows, asked[1].rows = asked[1].rows, asked[0].rows
        return ret

    return broken


@pytest.mark.parametrize("count", [2, 4])
@pytest.mark.parametrize(
    "canary",
    ["residual-without-q", "rows-of-another-slot"],
)
def test_each_canary_fails_with_slots(canary, count, monkeypatch):
    """The same chi-square rejects (p < 1e-6) each canary at the same count, pooled."""
    if canary == "residual-without-q":
        monkeypatch.setattr(verify, "_residual", residual_without_q)
    else:
        monkeypatch.setattr(Batcher, "_decode", swap_rows_of_two_slots(Batcher._decode))
    counts, _, dist = run_slots("with-q", count, SAMPLES)
    assert chi_square_p(pooled(counts), dist) < 1e-6
