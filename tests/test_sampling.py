import numpy as np
import pytest

from localspec.engine.verify import verify_draft
from localspec.errors import ConfigError
from localspec.sampling import SamplingParams, sample
from localspec.types import Draft

LOGITS = np.log(np.array([[0.5, 0.2, 0.15, 0.1, 0.05]]))


def probs(**kw):
    return SamplingParams(**{"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0, **kw}).probs(LOGITS)[0]


def test_no_filters_at_temperature_one_is_the_model_distribution():
    np.testing.assert_allclose(probs(), [0.5, 0.2, 0.15, 0.1, 0.05])


def test_top_k_keeps_the_k_best():
    np.testing.assert_allclose(probs(top_k=2), [0.5 / 0.7, 0.2 / 0.7, 0, 0, 0])


def test_top_p_keeps_the_smallest_set_reaching_p():
    np.testing.assert_allclose(probs(top_p=0.7), [0.5 / 0.7, 0.2 / 0.7, 0, 0, 0])
    np.testing.assert_allclose(probs(top_p=0.71), [0.5 / 0.85, 0.2 / 0.85, 0.15 / 0.85, 0, 0])


def test_min_p_is_relative_to_the_best():
    np.testing.assert_allclose(probs(min_p=0.3), [0.5 / 0.85, 0.2 / 0.85, 0.15 / 0.85, 0, 0])


def test_temperature_reshapes_what_the_filters_kept():
    p = probs(temperature=0.5, top_k=2)
    np.testing.assert_allclose(p, np.array([0.25, 0.04, 0, 0, 0]) / 0.29)


def test_temperature_zero_is_a_point_mass_on_the_argmax():
    p = SamplingParams(temperature=0).probs(np.array([[0.1, 3.0, 2.9], [5.0, 5.0, 1.0]]))
    np.testing.assert_array_equal(p, [[0, 1, 0], [1, 0, 0]])


def test_sample_follows_the_probabilities():
    rng = np.random.default_rng(0)
    p = np.array([0.1, 0.0, 0.6, 0.3])
    counts = np.bincount([sample(p, rng) for _ in range(20000)], minlength=4)
    assert counts[1] == 0
    np.testing.assert_allclose(counts / 20000, p, atol=0.015)


@pytest.mark.parametrize("bad", [{"temperature": -1}, {"top_k": -1}, {"top_p": 0}, {"top_p": 1.5}, {"min_p": 1.0}])
def test_bad_settings_are_named(bad):
    with pytest.raises(ConfigError, match=next(iter(bad)).replace("_", "-")):
        SamplingParams(**bad)


def test_verify_greedy_accepts_the_argmax_prefix_then_corrects():
    logits = np.array([[0, 5, 0], [0, 0, 5], [5, 0, 0], [0, 5, 0]], dtype=float)
    greedy = SamplingParams(temperature=0)
    rng = np.random.default_rng(0)
    assert verify_draft(Draft.chain([1, 2, 0]), logits, greedy, rng).tokens == (1, 2, 0, 1)
    v = verify_draft(Draft.chain([1, 0, 0]), logits, greedy, rng)
    assert (v.accepted, v.tokens) == (1, (1, 2))
    assert verify_draft(Draft.chain([]), logits[:1], greedy, rng).tokens == (1,)


def test_verify_with_q_uses_the_ratio_and_the_residual():
    # p = (0.5, 0.5), q = (1, 0): x=0 is accepted with probability 0.5; on rejection the residual
    # max(0, p - q) = (0, 0.5) gives token 1. So the first token is 0 or 1 with equal chance.
    sampler = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    logits = np.log(np.array([[0.5, 0.5], [0.5, 0.5]]))
    rng = np.random.default_rng(1)
    firsts = [
        verify_draft(Draft.chain([0], np.array([[1.0, 0.0]])), logits, sampler, rng).tokens[0] for _ in range(10000)
    ]
    assert abs(np.mean(firsts) - 0.5) < 0.02


def test_verify_rejects_a_window_of_the_wrong_size():
    with pytest.raises(ValueError, match="rows"):
        verify_draft(Draft.chain([1, 2]), np.zeros((2, 3)), SamplingParams(), np.random.default_rng())
