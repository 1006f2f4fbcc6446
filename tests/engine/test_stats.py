"""A turn's live view: a frozen snapshot with the figures the panels show and the record the chat saves."""

import dataclasses

import pytest
from support.fakes import ScriptedBackend

from localspec.drafters.ngram import NgramDrafter
from localspec.engine.loop import stream_generate
from localspec.sampling import SamplingParams


def test_the_view_is_a_frozen_snapshot_of_the_turn():
    backend = ScriptedBackend(vocab_size=20)
    events = stream_generate(backend, NgramDrafter(1, 3), list(range(10)), SamplingParams(temperature=0), max_tokens=30)
    first = next(events)
    view = first.stats.view()
    steps_then = view.steps
    for _ in events:
        pass
    stats = first.stats  # the live counters went on
    assert stats.steps > steps_then and view.steps == steps_then  # the view did not move with them
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.steps = 0
    final = stats.view()
    record = stats.to_dict()
    assert final.record == record and final.generated == record["generated_tokens"] > 0
    assert (final.drafted, final.accepted) == (record["drafted"], record["accepted"])
    assert final.acceptance_rate == pytest.approx(record["acceptance_rate"], abs=1e-4)
    assert list(final.acceptance_by_position) == pytest.approx(record["acceptance_by_position"], abs=1e-3)
