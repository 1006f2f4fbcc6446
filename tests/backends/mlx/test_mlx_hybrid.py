"""Hybrid models on the MLX backend (Qwen3.5's layout: Gated DeltaNet layers with full attention every second
layer), with tiny random models of mlx-lm's own qwen3_5 class: a cut at any depth gives the logits of a
fresh prefill (back to a snapshot, then the kept tokens again), a pinned checkpoint serves a draft model's
cuts, a cut before every snapshot rebuilds, and greedy output with every kind of drafter equals plain."""

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from support.fakes import ScriptedTokenizer  # noqa: E402
from support.tiny_mlx_hybrid import qwen3_5_model  # noqa: E402

from localspec.backends.mlx.backend import MlxBackend  # noqa: E402
from localspec.drafters.base import NoDrafter  # noqa: E402
from localspec.drafters.draft_model import DraftModelDrafter  # noqa: E402
from localspec.drafters.ngram import NgramDrafter  # noqa: E402
from localspec.drafters.suffix.drafter import SuffixDrafter  # noqa: E402
from localspec.engine.loop import generate  # noqa: E402
from localspec.engine.speclen import FixedK  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402

GREEDY = SamplingParams(temperature=0)
V = 16
PROMPT = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3]


def hybrid(seed=0):
    model = qwen3_5_model(width=32, layers=4, vocab=V, head_dim=8, interval=2, seed=seed, scale=2.5)
    return MlxBackend.from_model(model, ScriptedTokenizer(vocab_size=V), n_ctx=256, name="tiny-qwen3.5")


@pytest.fixture(scope="module")
def backend():
    return hybrid()


def fresh_logits(backend, tokens):
    backend.truncate(0)
    return backend.forward(tokens).logits[-1]


def replays(backend, keep):
    """Cut to ``keep``; how many tokens the cut ran through the model again."""
    calls, run = [], backend._run
    backend._run = lambda tokens, **kw: calls.append(len(tokens)) or run(tokens, **kw)
    try:
        backend.truncate(keep)
    finally:
        del backend._run
    return sum(calls)


@pytest.mark.parametrize("depth", [1, 3, 6])
def test_a_cut_within_the_last_call_gives_a_fresh_prefills_logits(backend, depth):
    assert backend.capabilities.can_truncate and backend.capabilities.checkpoints and backend.hidden_size == 32
    backend.truncate(0)
    backend.prefill(PROMPT)
    window = [6, 7, 8, 9, 10, 11]
    backend.forward(window)
    keep = len(PROMPT) + len(window) - depth
    replayed = replays(backend, keep)
    assert len(backend.cached_tokens) == keep and replayed == len(window) - depth  # from the snapshot, not rebuilt
    after = backend.forward([12]).logits[-1]
    want = fresh_logits(backend, (PROMPT + window)[:keep] + [12])
    np.testing.assert_allclose(after, want, atol=1e-4)


def test_a_pinned_checkpoint_serves_a_draft_models_cut_and_an_earlier_cut_rebuilds(backend):
    backend.truncate(0)
    backend.prefill(PROMPT)
    backend.checkpoint()  # where a draft model's drafting starts
    for token in (6, 7, 8, 9):  # one call per drafted token: the last snapshot is only one back
        backend.forward([token])
    assert replays(backend, len(PROMPT) + 1) == 1
    np.testing.assert_allclose(backend.forward([3]).logits[-1], fresh_logits(backend, [*PROMPT, 6, 3]), atol=1e-4)
    backend.truncate(0)
    backend.prefill(PROMPT)
    backend.forward([6, 7])
    assert replays(backend, 4) == 4  # before every snapshot: rebuilt from the kept tokens
    np.testing.assert_allclose(backend.forward([9]).logits[-1], fresh_logits(backend, [*PROMPT[:4], 9]), atol=1e-4)


def test_a_new_turn_cutting_far_into_the_last_answer_goes_back_to_where_the_prompt_ended(backend):
    """A template that drops the previous answer's reasoning makes the new prompt diverge inside it, past the
    last call's snapshot: the state where the prompt's prefill ended is put back and only the kept answer
    tokens run again."""
    backend.truncate(0)
    backend.prefill(PROMPT)
    backend.prompt_cached()  # as the engine says after a prompt's prefill
    for token in (6, 7, 8, 9, 10, 11):  # the answer, a token per step
        backend.forward([token])
    assert replays(backend, len(PROMPT) + 2) == 2
    want = fresh_logits(backend, [*PROMPT, 6, 7, 12])
    backend.truncate(0)
    backend.prefill(PROMPT)
    backend.prompt_cached()
    for token in (6, 7, 8, 9, 10, 11):
        backend.forward([token])
    backend.truncate(len(PROMPT) + 2)
    np.testing.assert_allclose(backend.forward([12]).logits[-1], want, atol=1e-4)


@pytest.mark.parametrize("kind", ["ngram", "suffix", "draft-model"])
def test_greedy_output_with_drafts_equals_plain(backend, kind):
    backend.truncate(0)
    plain = generate(backend, NoDrafter(), PROMPT, GREEDY, max_tokens=40)
    if kind == "ngram":
        drafter = NgramDrafter(1, 3)
    elif kind == "suffix":
        drafter = SuffixDrafter()
    else:  # a hybrid draft model too: its drafts are cut back to its checkpoint
        drafter = DraftModelDrafter(hybrid(seed=3), V, V, seed=0)
    out = generate(backend, drafter, PROMPT, GREEDY, max_tokens=40, draft_tokens=FixedK(4))
    again = generate(backend, drafter, PROMPT + list(out.tokens), GREEDY, max_tokens=10, draft_tokens=FixedK(4))
    plain_again = generate(backend, NoDrafter(), PROMPT + list(out.tokens), GREEDY, max_tokens=10)
    assert out.tokens == plain.tokens and again.tokens == plain_again.tokens
    assert out.stats.drafted > out.stats.accepted > 0  # drafts were both kept and cut


def test_hidden_states_come_from_the_text_model(backend):
    backend.truncate(0)
    rows = backend.prefill_features(PROMPT)
    assert rows.shape == (len(PROMPT), 32) and np.isfinite(rows).all()
