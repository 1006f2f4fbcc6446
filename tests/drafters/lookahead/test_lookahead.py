"""Lookahead decoding: the Jacobi window's bookkeeping, the pool, the prefix tree, exactness (greedy and
chi-square at T > 0 on scripted models, greedy on a tiny torch model), and the whole-or-nothing verify."""

import numpy as np
import pytest
from support.distribution import (
    SETTINGS,
    assert_canary_fails,
    chi_square_p,
    exact_distribution,
    sample_answers,
    samples_for,
    setting_id,
    tree_backend,
    tried_against_the_full_p,
)
from support.fakes import ScriptedTreeBackend, step_of

from localspec.drafters.base import NoDrafter
from localspec.drafters.lookahead.drafter import LookaheadDrafter, LookaheadOptions, NgramPool, prefix_tree
from localspec.drafters.lookahead.jacobi_window import JacobiWindow
from localspec.engine.loop import generate
from localspec.engine.speclen import AdaptiveK
from localspec.errors import ConfigError
from localspec.sampling import SamplingParams
from localspec.types import Draft

GREEDY = SamplingParams(temperature=0)


# -- the pieces -------------------------------------------------------------------------------------------
def test_the_prefix_tree_merges_equal_paths_lists_by_depth_and_keeps_the_first_path_as_main_chain():
    tokens, parents, node = prefix_tree([(5, 6, 7), (5, 8), (9,), (5, 6, 7, 1)])
    draft = Draft(tuple(tokens), tuple(parents))
    assert draft.depths() == sorted(draft.depths())  # listed by depth
    assert len(tokens) == 6  # 5, 9 | 6, 8 | 7 | 1: the shared prefixes are one node each
    assert draft.main_chain().tokens == (5, 6, 7, 1)
    for path, i in node.items():
        walk, j = [], i
        while j >= 0:
            walk.append(tokens[j])
            j = parents[j]
        assert tuple(reversed(walk)) == path


def test_the_pool_keeps_the_newest_continuations_per_first_token():
    pool = NgramPool(2)
    for gram in [(1, 2, 3), (1, 4, 5), (1, 2, 3), (1, 6, 7), (2, 9, 9)]:
        pool.add(gram)
    assert pool.get(1, 5) == [(6, 7), (2, 3)]  # (2, 3) re-added moved to the front, (4, 5) fell out
    assert pool.get(2, 5) == [(9, 9)] and pool.get(3, 5) == []


def test_the_window_fills_its_rows_then_moves_down_and_yields_column_ngrams():
    window = JacobiWindow(width=3, levels=3, rng=np.random.default_rng(0))
    window.reset([10, 11, 12])
    assert len(window.rows) == 1 and not window.filled
    cells = dict(window.paths())
    assert cells[(0, 2)] == tuple(window.rows[0])  # the trunk's cells hang one below the other
    grams, moved = window.step({(0, j): 20 + j for j in range(3)})  # row 0's predictions become row 1
    assert (grams, moved) == ([], 0) and window.rows[1] == [20, 21, 22]
    assert dict(window.paths())[(1, 1)] == (*window.rows[0][:2], 21)  # column 1 under the trunk's 2nd token
    window.step({(1, j): 30 + j for j in range(3)})
    assert window.filled
    rows = [list(r) for r in window.rows]
    grams, moved = window.step({(2, 0): 40, (2, 2): 42})  # column 1 was not verified: no n-gram, kept guess
    assert moved == 1
    assert grams == [(rows[0][0], 20, 30, 40), (rows[0][2], 22, 32, 42)]
    assert window.rows == [[20, 21, 22], [30, 31, 32], [40, 31, 42]]
    window.advance(2, [7])  # two positions became context: their columns go, fresh guesses come from it
    assert window.rows == [[22, 7, 7], [32, 7, 7], [42, 7, 7]]


def test_options_are_checked():
    for bad in ({"window": 0}, {"ngram": 1}, {"window": 40, "guesses": 30}):
        with pytest.raises(ConfigError, match="lookahead"):
            LookaheadOptions(**bad)
    assert LookaheadOptions().depth == 7


# -- in the engine -----------------------------------------------------------------------------------------
def test_greedy_output_equals_plain_and_the_window_alone_finds_accepted_ngrams():
    """The scripted model's next token depends on the last two, so Jacobi iteration converges and
    the window's n-grams are right; with the context's n-grams off, every accepted token came from it."""
    backend = ScriptedTreeBackend(vocab_size=50, order=2, scale=3.0, seed=3)
    prompt = [1, 2, 3, 4, 5]
    plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=80).tokens
    for context in (False, True):
        backend.truncate(0)
        drafter = LookaheadDrafter(LookaheadOptions(window=4, ngram=3, guesses=3, context=context), seed=1)
        out = generate(backend, drafter, prompt, GREEDY, max_tokens=80, draft_tokens=8)
        assert out.tokens == plain
        assert out.stats.accepted > 10, context
        figures = out.stats.drafter
        assert figures["window_steps"] >= out.stats.steps - 1 and figures["ngrams_harvested"] > 0


def test_a_window_of_random_guesses_with_no_pool_accepts_next_to_nothing():
    """The counterpart of the test above: with the Jacobi step switched off (predictions ignored), the window
    keeps its random guesses and the answer comes from plain steps. So acceptance above is the method's."""
    backend = ScriptedTreeBackend(vocab_size=50, order=2, scale=3.0, seed=3)
    drafter = LookaheadDrafter(LookaheadOptions(window=4, ngram=3, guesses=3, context=False), seed=1)
    drafter._iterate = lambda draft, argmax: None
    out = generate(backend, drafter, [1, 2, 3, 4, 5], GREEDY, max_tokens=80, draft_tokens=8)
    assert out.stats.accepted < 5


def lookahead_drafter():
    return LookaheadDrafter(LookaheadOptions(window=2, ngram=2, guesses=3), seed=4)


@pytest.mark.parametrize("sampling", SETTINGS[:3], ids=setting_id)
def test_sampling_keeps_the_targets_distribution(sampling):
    """Point-mass siblings from the pool and the window at every depth: verified against the residual, the
    three-token answers are distributed as the target's own."""
    paths = []
    backend = tree_backend(paths)
    counts, _ = sample_answers(
        backend, lookahead_drafter, sampling, seed=11, samples=samples_for("lookahead", sampling)
    )
    assert any(p and p[0] > 0 for p in paths)  # a sibling other than the first was accepted
    assert chi_square_p(counts, exact_distribution(backend, sampling)) > 1e-3


def test_the_check_catches_siblings_tried_against_the_full_p_at_the_reduced_count(monkeypatch):
    """The canary of the test above (test_distribution.py's, on lookahead's trees): at the settings it runs
    with fewer samples, the chi-square check rejects siblings each tried against the full p."""
    assert_canary_fails(
        "lookahead", tree_backend, lookahead_drafter, {"_point_mass": tried_against_the_full_p}, (0, 2), monkeypatch
    )


def test_the_controller_verifies_a_whole_draft_whole_or_not_at_all():
    policy = AdaptiveK(16)
    for n, seconds in ((1, 0.01), (2, 0.012), (4, 0.015), (21, 0.2)):  # a 20-token tree costs 20 steps
        for _ in range(3):
            policy.cost.record(n, 0, 0.0, seconds, seconds)
    tree = Draft((1, 2, 3, 4), (-1, 0, -1, 2), confidence=(0.5,) * 4, whole=True)
    main = tree.main_chain()
    assert tree.sizes(2) == [0, 4, 4]  # a cut verifies all of it or nothing
    assert Draft((1, 2, 3, 4), (-1, 0, -1, 2)).sizes(2) == [0, 2, 4]
    assert policy.trim(main, 0.0, [0, 20, 20]) == 0  # its main chain cannot pay for the whole tree
    assert policy.trim(main, 0.0, [0, 3, 3]) == 2  # the same chain on a cheap tree: verified
    chain = policy.cost.verify(9)
    policy.record(step_of(2, 2, [1, 2, 3], 0.0, 0.5, 0.5, window=9, tree=True))  # a tree of 9 tokens took 0.5 s
    assert policy.cost.verify(9) == chain  # the chain curve is not a tree's
    assert policy.cost.figures()["tree_cost_factor"] == pytest.approx(0.5 / chain, abs=0.01)
    assert policy.trim(main, 0.0, [0, 3, 3]) == 0  # trees are dear on this machine: the same tree is not verified


def test_auto_mode_on_a_machine_where_trees_are_dear_stays_near_plain(virtual_clock):
    """On a simulated machine where a forward's time grows with its tokens (a CPU), the controller (nearly)
    never verifies the lookahead tree, and the output is plain's."""

    class Dear(ScriptedTreeBackend):
        def forward(self, tokens, return_hidden=False):
            virtual_clock.advance(0.01 * len(tokens))
            return super().forward(tokens, return_hidden)

        def forward_tree(self, tokens, parents, return_hidden=False):
            virtual_clock.advance(0.01 * len(tokens))
            return super().forward_tree(tokens, parents, return_hidden)

    backend = Dear(vocab_size=50, order=2, scale=1.0, seed=5)
    plain = generate(backend, NoDrafter(), [1, 2, 3], GREEDY, max_tokens=60).tokens
    backend.truncate(0)
    out = generate(backend, LookaheadDrafter(seed=0), [1, 2, 3], GREEDY, max_tokens=60, draft_tokens="auto")
    assert out.tokens == plain
    assert out.stats.steps >= 50  # nearly every step was plain
    assert sum(1 for n in backend.forward_calls if n > 1) <= 3


def test_greedy_lookahead_on_a_tiny_torch_model_equals_plain():
    pytest.importorskip("torch")
    from support.tiny_torch import tiny

    backend = tiny("llama-gqa")
    prompt = [1, 2, 3, 4, 1, 2, 3]
    plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=60).tokens
    backend.truncate(0)
    out = generate(backend, LookaheadDrafter(seed=0), prompt, GREEDY, max_tokens=60, draft_tokens=8)
    assert out.tokens == plain
    assert out.stats.accepted > 0 and out.stats.drafter["window_steps"] > 0


def test_auto_mode_on_a_machine_where_windows_cost_one_step_verifies_the_trees(virtual_clock):
    """The counterpart: a forward costs the same at any size (a GPU), so whole trees pay and are verified
    (their depth beyond the main chain is learnt from), and the output is still plain's."""

    class Flat(ScriptedTreeBackend):
        def forward(self, tokens, return_hidden=False):
            virtual_clock.advance(0.01)
            return super().forward(tokens, return_hidden)

        def forward_tree(self, tokens, parents, return_hidden=False):
            virtual_clock.advance(0.01)
            return super().forward_tree(tokens, parents, return_hidden)

    backend = Flat(vocab_size=50, order=2, scale=3.0, seed=3)
    prompt = [1, 2, 3, 4, 5]
    plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=80).tokens
    backend.truncate(0)
    drafter = LookaheadDrafter(LookaheadOptions(window=4, ngram=3, guesses=3), seed=1)
    out = generate(backend, drafter, prompt, GREEDY, max_tokens=80, draft_tokens="auto")
    assert out.tokens == plain
    assert out.stats.drafter["window_steps"] > 20 and out.stats.accepted > 0
