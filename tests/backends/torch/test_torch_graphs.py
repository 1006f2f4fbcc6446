"""The torch backend's fixed-shape step (backends/torch/graphs.py), run eagerly on CPU: the same rows and
the same cache as the ordinary step for chains and trees in every bucket, greedy output equal to plain
decoding with every drafter kind, and the fallbacks. Capture itself runs on a GPU
(tests/backends/torch/test_cuda.py)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from localspec.backends.torch.graphs import BUCKETS, bucket  # noqa: E402
from localspec.errors import ConfigError  # noqa: E402

PREFIX = [5, 6, 7, 8, 9, 10, 11]


def pair(n_ctx=160, cfg=None):
    """Two backends over the same weights: the ordinary step and the fixed-shape one."""
    from support.eagle_heads import DEEP
    from support.fakes import ScriptedTokenizer

    from localspec.backends.torch.backend import TorchBackend
    from localspec.backends.torch.decoder import Decoder

    cfg = cfg or DEEP
    torch.manual_seed(0)
    model = Decoder(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)
    twin = Decoder(cfg)
    twin.load_state_dict(model.state_dict())
    tok = ScriptedTokenizer(vocab_size=cfg.vocab_size)
    plain = TorchBackend.from_decoder(model, tok, n_ctx=n_ctx, steps="off")
    static = TorchBackend.from_decoder(twin, tok, n_ctx=n_ctx, steps="eager")
    return plain, static


def close(a, b):
    return np.abs(a - b).max() <= 1e-4 * max(1.0, np.abs(b).max())


def test_buckets_are_eight_and_hold_every_window_up_to_the_largest():
    assert len(BUCKETS) == 8 and bucket(1) == 1 and bucket(3) == 4 and bucket(33) == 48 and bucket(64) == 64
    assert bucket(65) is None


@pytest.mark.parametrize("n", [1, 2, 3, 5, 9, 17, 40, 64])
def test_a_padded_chain_window_gives_the_ordinary_steps_rows_and_cache(n):
    plain, static = pair()
    rng = np.random.default_rng(n)
    window = [int(t) for t in rng.integers(plain.vocab_size, size=n)]
    for b in (plain, static):
        b.prefill(PREFIX)

    def ordinary_step(*args, **kwargs):
        raise AssertionError("the window should have taken the fixed-shape step")

    static.model.forward = ordinary_step
    a, s = plain.forward(window).logits, static.forward(window).logits
    assert s.shape == a.shape and close(s, a)
    end = len(PREFIX) + n
    assert close(static.model.k_cache[:, :end].numpy(), plain.model.k_cache[:, :end].numpy())
    # a cut and the next step: the padding rows' slots are overwritten before anything sees them
    for b in (plain, static):
        b.truncate(len(PREFIX) + 1)
    assert close(static.forward([3, 4]).logits, plain.forward([3, 4]).logits)


@pytest.mark.parametrize("size", [3, 6, 13])
def test_a_padded_tree_gives_the_ordinary_steps_rows_and_keeps_the_accepted_branch(size):
    plain, static = pair()
    rng = np.random.default_rng(size)
    tokens = [int(t) for t in rng.integers(plain.vocab_size, size=size)]
    parents = [int(rng.integers(-1, i)) for i in range(size - 1)]
    for b in (plain, static):
        b.prefill(PREFIX)

    def ordinary_step(*args, **kwargs):
        raise AssertionError("the tree should have taken the fixed-shape step")

    static.model.forward = ordinary_step
    a, s = plain.forward_tree(tokens, parents).logits, static.forward_tree(tokens, parents).logits
    assert close(s, a)
    leaf = size - 2
    path = []
    while leaf >= 0:
        path.insert(0, leaf)
        leaf = parents[leaf]
    for b in (plain, static):
        b.accept_path(path)
    assert static.cached_tokens == plain.cached_tokens
    assert close(static.forward([1]).logits, plain.forward([1]).logits)


def test_windows_past_the_buckets_or_the_cache_end_take_the_ordinary_step():
    plain, static = pair(n_ctx=80)
    for b in (plain, static):
        b.prefill(PREFIX)
    long = [i % plain.vocab_size for i in range(1, 70)]  # past the largest bucket: 76 cached after it
    assert close(static.forward(long).logits, plain.forward(long).logits)
    assert static.steps.fits(3, 75) and not static.steps.fits(3, 77) and static.steps.fits(2, 78)
    for keep, window in ((75, [1, 2, 3]), (77, [1, 2, 3]), (78, [1, 2])):  # padded to 4, 4 (81 > 80), 2
        for b in (plain, static):
            b.truncate(keep)
        assert close(static.forward(window).logits, plain.forward(window).logits), keep


@pytest.mark.parametrize("drafter", ["ngram", "eagle-tree", "lookahead"])
def test_greedy_output_with_the_fixed_shape_step_equals_plain_decoding(tmp_path, drafter):
    from support.eagle_heads import PROMPT, write_eagle3_head
    from support.tiny_torch import GREEDY

    from localspec.drafters.base import NoDrafter
    from localspec.drafters.eagle.drafter import EagleDrafter
    from localspec.drafters.lookahead.drafter import LookaheadDrafter
    from localspec.drafters.ngram import NgramDrafter
    from localspec.engine.loop import generate

    plain, static = pair()
    reference = generate(plain, NoDrafter(), PROMPT, GREEDY, max_tokens=50).tokens
    if drafter == "eagle-tree":
        write_eagle3_head(tmp_path / "head", static)
        made = EagleDrafter(static, tmp_path / "head", tree_nodes=8)
    else:
        made = NgramDrafter() if drafter == "ngram" else LookaheadDrafter()
    out = generate(static, made, PROMPT, GREEDY, max_tokens=50, draft_tokens=4)
    assert out.tokens == reference and out.stats.drafted > 0


def test_step_modes_are_checked_and_reported():
    from support.eagle_heads import DEEP
    from support.fakes import ScriptedTokenizer

    from localspec.backends.torch.backend import TorchBackend
    from localspec.backends.torch.decoder import Decoder

    tok = ScriptedTokenizer(vocab_size=DEEP.vocab_size)
    assert TorchBackend.from_decoder(Decoder(DEEP), tok, steps="auto").steps is None  # CPU: the ordinary step
    with pytest.raises(ConfigError, match="CUDA graphs need a CUDA device"):
        TorchBackend.from_decoder(Decoder(DEEP), tok, steps="graphs")
    with pytest.raises(ConfigError, match="must be one of"):
        TorchBackend.from_decoder(Decoder(DEEP), tok, steps="fast")
