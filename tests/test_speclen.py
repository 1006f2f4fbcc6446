"""The speculation-length controller on synthetic machines: known verify-cost curves, draft costs and
acceptance rates, where the best K can be worked out by hand."""
from collections import Counter

import numpy as np
import pytest

from localspec.engine import generate
from localspec.drafters.base import NoDrafter
from localspec.errors import ConfigError
from localspec.sampling import SamplingParams
from localspec.speclen import AdaptiveK, FixedK, make_policy
from localspec.types import Draft
from tests.fakes import RandomDrafter, ScriptedBackend

CPU = {1: 1.0, 2: 1.6, 3: 2.1, 4: 2.8, 5: 3.3, 6: 4.0, 7: 4.6, 8: 5.2, 9: 6.6}  # this box's shape
GPU = {n: 1.0 + 0.01 * (n - 1) for n in range(1, 10)}  # a GPU: a window costs about one step


def drive(ctl, steps, accept, verify=CPU, draft_per_token=0.0, draft_call=0.0, cap=8, seed=0):
    """Run the controller's plan/trim/record loop against a simulated target and drafter. accept(i, step)
    is the chance that draft position i is right given 1..i-1 were. Returns the verified length per step."""
    rng = np.random.default_rng(seed)
    produced, chosen = 0, []
    for step in range(steps):
        k = ctl.plan(cap)
        tokens, ok = [], True
        for i in range(1, k + 1):  # a proposal that follows the target's future while it is right
            ok = ok and rng.random() < accept(i, step)
            tokens.append(produced + i - 1 if ok else -1)
        draft = Draft.chain(tokens)
        draft_s = (draft_call + draft_per_token * k) if k else 0.0
        n = ctl.trim(draft, draft_s)
        accepted = 0
        while accepted < n and tokens[accepted] == produced + accepted:
            accepted += 1
        emitted = list(range(produced, produced + accepted + 1))  # the target's own tokens: its future
        produced += len(emitted)
        ctl.record(n, accepted, emitted, draft_s, verify[n + 1], draft_s + verify[n + 1])
        chosen.append(n)
    return chosen


def mode(values):
    return Counter(values).most_common(1)[0][0]


def rate(k, a, verify, draft_per_token=0.0):
    expected = sum(a ** i for i in range(k + 1))
    return expected / (verify[k + 1] + draft_per_token * k)


def near_best(k, a, verify, draft_per_token=0.0):
    """The rate of K within 3% of the best K's."""
    return rate(k, a, verify, draft_per_token) >= 0.97 * max(rate(j, a, verify, draft_per_token) for j in range(9))


@pytest.mark.parametrize("a", [0.75, 0.8, 0.95])
def test_cheap_drafter_settles_on_the_best_k_of_this_cpu(a):
    chosen = drive(AdaptiveK(8), 600, lambda i, s: a)
    assert mode(chosen[200:]) > 0 and near_best(mode(chosen[200:]), a, CPU)


def test_flat_gpu_curve_and_good_drafts_use_the_full_k():
    chosen = drive(AdaptiveK(8), 400, lambda i, s: 0.9, verify=GPU)
    assert mode(chosen[100:]) == 8


def test_useless_cheap_drafter_is_not_verified():
    chosen = drive(AdaptiveK(8), 500, lambda i, s: 0.0)
    assert sum(k > 0 for k in chosen[50:]) == 0


def test_shadow_drafts_turn_speculation_back_on():
    """Verifying nothing must not blind the controller: when the drafter becomes good it is used again."""
    chosen = drive(AdaptiveK(8), 800, lambda i, s: 0.0 if s < 300 else 0.95)
    assert sum(k > 0 for k in chosen[250:300]) == 0
    assert near_best(mode(chosen[500:]), 0.95, CPU)


def test_costly_drafter_that_cannot_pay_is_not_run():
    """The 0.5B -> 1.5B pair on this CPU: a draft token costs 0.58 of a step; even perfect drafts lose."""
    assert max(rate(k, 1.0, CPU, 0.58) for k in range(9)) <= 1.0
    ctl = AdaptiveK(8)
    chosen = drive(ctl, 400, lambda i, s: 1.0, draft_per_token=0.58)
    assert sum(k > 0 for k in chosen[20:]) == 0
    assert "cannot pay" in ctl.figures()["note"]


def test_costly_drafter_that_pays_is_used_then_probed_when_it_stops_paying():
    a_good = lambda i, s: 0.9 if s < 200 else 0.0  # noqa: E731
    ctl = AdaptiveK(8)
    chosen = drive(ctl, 600, a_good, verify=GPU, draft_per_token=0.1)
    assert near_best(mode(chosen[50:200]), 0.9, GPU, 0.1)
    late = [i for i, k in enumerate(chosen[260:]) if k > 0]
    assert late, "a costly drafter that stopped paying must still be probed now and then"
    gaps = np.diff(late)
    assert len(late) <= 6 and (len(gaps) < 2 or gaps[-1] > gaps[0])  # ever rarer probes


def test_verify_cost_interpolates_and_is_optimistic_past_what_was_measured():
    ctl = AdaptiveK(8)
    for n, s in ((2, 0.010), (4, 0.020)):
        ctl.record(n - 1, 0, [0], 0.0, s, s)
    assert ctl.verify_cost(3) == pytest.approx(0.015)
    assert ctl.verify_cost(7) == pytest.approx(0.020)  # untried: assumed no dearer, so it gets tried
    assert ctl.verify_cost(1) == pytest.approx(0.010 / 1.5)  # the prior slope below the smallest size


def test_fixed_k_verifies_everything():
    pol = FixedK(3)
    assert pol.plan(3) == 3 and pol.trim(Draft.chain([1, 2, 3]), 0.0) == 3 and pol.label == "K=3"


@pytest.mark.parametrize("text,kind,k", [("4", FixedK, 4), (6, FixedK, 6), ("auto", AdaptiveK, 8),
                                         ("auto:3", AdaptiveK, 3)])
def test_make_policy(text, kind, k):
    pol = make_policy(text)
    assert isinstance(pol, kind) and pol.max_k == k


@pytest.mark.parametrize("bad", ["0", "-1", "x", "auto:0", "auto:x"])
def test_make_policy_rejects(bad):
    with pytest.raises(ConfigError, match="draft-tokens"):
        make_policy(bad)


def test_adaptive_output_is_the_targets_and_a_random_drafter_is_mostly_skipped():
    backend = ScriptedBackend(vocab_size=50)
    greedy = SamplingParams(temperature=0)
    plain = generate(backend, NoDrafter(), [1, 2, 3], greedy, max_tokens=200)
    out = generate(backend, RandomDrafter(backend.vocab_size, seed=1), [1, 2, 3], greedy, max_tokens=200,
                   draft_tokens="auto")
    assert out.tokens == plain.tokens
    assert out.stats.speclen["mode"] == "adaptive"
    assert out.stats.drafted < 0.25 * out.stats.steps * 8  # fixed K=8 would verify 8 per step
