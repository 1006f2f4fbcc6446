"""The n-gram drafter replayed on token sequences against a brute-force reference: no model needed."""

import numpy as np
import pytest

from localspec.drafters.base import match_confidence
from localspec.drafters.ngram import NgramDrafter
from localspec.errors import ConfigError


def brute_force(context, n_min, n_max, k):
    """(copy, real match length): the most recent occurrence of the longest matching n-gram, and how far back
    (up to 64 tokens) the text before that occurrence equals the context's end."""
    for n in range(min(n_max, len(context) - 1), n_min - 1, -1):
        suffix = context[-n:]
        for start in range(len(context) - n - 1, -1, -1):  # most recent earlier occurrence first
            if context[start : start + n] == suffix:
                end = start + n
                length = max(m for m in range(n, min(64, end) + 1) if context[end - m : end] == context[-m:])
                return context[end : end + k], length
    return [], 0


@pytest.mark.parametrize("seed", range(6))
def test_matches_brute_force_while_the_context_grows(seed):
    rng = np.random.default_rng(seed)
    vocab = [3, 5, 20][seed % 3]
    sequence = rng.integers(0, vocab, size=300).tolist()
    drafter = NgramDrafter(n_min=1 + seed % 2, n_max=4)
    drafter.begin(sequence[:5])
    lengths = []
    for end in range(5, len(sequence)):
        context = sequence[:end]
        k = [1, 5, 8, 64][end % 4]
        draft = drafter.propose(context, k)
        tokens, length = brute_force(context, drafter.n_min, 4, k)
        assert list(draft.tokens) == tokens, end
        assert draft.confidence == ((match_confidence(length),) * len(tokens) if tokens else None), end
        lengths += [length] if tokens else []
    assert drafter.end()["mean_match_len"] == round(sum(lengths) / len(lengths), 2)


def test_a_long_copy_is_proposed_whole_and_confident():
    line = list(range(100, 180))
    context = line + [7] + line[:70]  # the line is being copied again
    drafter = NgramDrafter(2, 4)
    drafter.begin(context)
    short = drafter.propose([1, 2, 3, 1, 2], 8)
    assert short.tokens == (3, 1, 2) and short.confidence == (match_confidence(2),) * 3
    drafter.begin(context)
    draft = drafter.propose(context, 64)
    assert draft.tokens == tuple(line[70:]) + (7,) + tuple(line[:53])  # the copy runs on to the context end
    assert set(draft.confidence) == {match_confidence(64)} and match_confidence(64) > 0.9


def test_copies_the_continuation_of_a_repeated_phrase():
    text = [10, 11, 12, 13, 14, 15, 99, 10, 11, 12]
    drafter = NgramDrafter(2, 3)
    drafter.begin(text)
    draft = drafter.propose(text, 3)
    assert draft.tokens == (13, 14, 15) and draft.parents == (-1, 0, 1) and draft.q is None


def test_no_match_proposes_nothing():
    drafter = NgramDrafter()
    drafter.begin([1, 2, 3])
    assert len(drafter.propose([1, 2, 3, 4], 5)) == 0


def test_begin_forgets_the_previous_turn():
    drafter = NgramDrafter(1, 2)
    drafter.propose([7, 8, 9, 7], 2)
    drafter.begin([1, 2])
    assert len(drafter.propose([1, 2, 9], 4)) == 0


def test_bad_sizes():
    with pytest.raises(ConfigError, match="min <= max"):
        NgramDrafter(3, 2)
