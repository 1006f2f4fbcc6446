"""DFlash and DSpark on the torch backend, with random heads in the released layouts (tiny_dflash.py) for a
tiny random float32 llama target: the head's block logits equal an independent re-implementation of the
reference forward, greedy drafting is exact, sampling keeps the target's distribution (q rows from the
block, Markov-conditioned for DSpark), a repo's .py file is never run, and heads for other models or of
the other kind are refused by name."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from support.dflash_heads import EMBD, PROMPT, exact_pairs, features, head_dir, mask_of  # noqa: E402, F401
from support.distribution import chi_square_p  # noqa: E402
from support.tiny_dflash import reference_block, write_dflash_head  # noqa: E402
from support.tiny_gguf import write_tiny_f32_llama  # noqa: E402

from localspec.backends.torch.backend import TorchBackend  # noqa: E402
from localspec.drafters.base import NoDrafter  # noqa: E402
from localspec.drafters.context import DrafterContext  # noqa: E402
from localspec.drafters.dflash.drafter import DFlashOptions, build, build_dspark, load_head  # noqa: E402
from localspec.engine.loop import generate  # noqa: E402
from localspec.engine.speclen import FixedK  # noqa: E402
from localspec.errors import ConfigError, ModelError  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402

GREEDY = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def target(tiny_llama_gguf):
    return tiny_llama_gguf["torch"]


def lm_head(backend):
    m = backend.model
    return (m.embed.weight if m.lm_head is None else m.lm_head.weight).detach().numpy()


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_block_logits_equal_the_reference_forward(tmp_path, target, kind):
    folder = head_dir(tmp_path, target, kind=kind, layers=2)
    head = load_head(str(folder), target)
    assert head.layout.kind == kind and head.feature_layers == (2, 6)  # target_layer_ids (1, 5) + 1
    feats = features(target, head.feature_layers, PROMPT)
    p = len(PROMPT) - 1  # the pending token's position: features of the positions before it
    head.lo = 0
    head.inject(feats[:p], 0)
    rows = head.layout.rows_for(5)
    block = head.block(PROMPT[-1], p, rows)
    chain = [PROMPT[-1], 7, 9, 11, 13]  # the token before each drafted row
    got = [block.row(i, chain[i]) for i in range(5)]
    embed = target.model.embed.weight.detach().numpy()
    ref = reference_block(folder, feats[:p], PROMPT[-1], rows, embed, lm_head(target), chain, block.first)
    want = ref["logits"][block.first : block.first + 5]
    if kind == "dspark":
        want = want + ref["bias"]
        assert block.first == 0 and np.allclose([c for _, c in got], ref["confidence"], atol=1e-3)
    scale = np.abs(want).max()
    assert np.abs(np.stack([lg for lg, _ in got]) - want).max() <= 2e-3 * scale  # the LM head is read in fp16


def test_the_head_cache_is_fed_in_pieces_as_in_one(tmp_path, target):
    """Features put in three calls (as verify steps hand them over) give the block the one call gives."""
    folder = head_dir(tmp_path, target)
    head = load_head(str(folder), target)
    feats = features(target, head.feature_layers, PROMPT)
    p = len(PROMPT) - 1
    head.lo = 0
    head.inject(feats[:p], 0)
    whole = head.block(PROMPT[-1], p, 4).row(2, 0)[0]
    for a, b in ((0, 3), (3, 4), (4, p)):
        head.inject(feats[a:b], a)
    pieces = head.block(PROMPT[-1], p, 4).row(2, 0)[0]
    assert np.abs(pieces - whole).max() <= 1e-3 * np.abs(whole).max()  # fp16 LM head: rounding only


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
@pytest.mark.parametrize("draft_tokens", [FixedK(4), "auto"], ids=["k4", "auto"])
def test_greedy_drafting_equals_plain_decoding(tmp_path, target, kind, draft_tokens):
    folder = head_dir(tmp_path, target, kind=kind, layers=1, scale=0.3)
    target.truncate(0)
    plain = generate(target, NoDrafter(), PROMPT, GREEDY, max_tokens=50).tokens
    builder = build if kind == "dflash" else build_dspark
    drafter = builder(target, DFlashOptions(head=str(folder)), DrafterContext(seed=0))
    target.truncate(0)
    out = generate(target, drafter, PROMPT, GREEDY, max_tokens=50, draft_tokens=draft_tokens)
    assert out.tokens == plain
    if draft_tokens != "auto":
        assert out.stats.drafted > 0 and out.stats.drafter["mean_block_rows"] > 3  # blocks of k (+1) rows
    target.truncate(0)  # a second turn on the same prompt keeps the head's cache and stays exact
    assert generate(target, drafter, PROMPT, GREEDY, max_tokens=50, draft_tokens=draft_tokens).tokens == plain
    drafter.close()


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_sampling_keeps_the_targets_distribution(tmp_path, kind):
    """A target whose mass sits on 12 tokens (the head reads its LM head, so it drafts among them too):
    drafts are sometimes accepted and mostly rejected, and the three-token answers still follow the
    target's own probabilities."""
    path = write_tiny_f32_llama(tmp_path / "focus.gguf", seed=3, focus=12, extra_tokens=1)
    backend = TorchBackend(path, n_ctx=64, device="cpu")
    folder = write_dflash_head(tmp_path / "head", EMBD, backend.vocab_size, backend.vocab_size - 2, kind=kind)
    sampling = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
    prompt = PROMPT[:5]
    exact = exact_pairs(backend, prompt, sampling, n=3)
    drafter = (build if kind == "dflash" else build_dspark)(
        backend, DFlashOptions(head=str(folder)), DrafterContext(seed=3)
    )
    rng, counts, accepted, samples = np.random.default_rng(11), {}, 0, 1500
    for _ in range(samples):
        backend.truncate(0)
        out = generate(backend, drafter, prompt, sampling, max_tokens=3, draft_tokens=FixedK(2), rng=rng)
        counts[out.tokens] = counts.get(out.tokens, 0) + 1
        accepted += out.stats.accepted
    assert samples * 0.05 < accepted < samples * 1.9  # accepted, and rejected too
    assert chi_square_p(counts, exact) > 1e-3


def test_a_repo_python_file_is_never_run(tmp_path, target):
    folder = head_dir(tmp_path, target)
    marker = tmp_path / "ran"
    (folder / "dflash.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nraise SystemExit(1)\n")
    head = load_head(str(folder), target)
    assert head.layout.kind == "dflash" and not marker.exists()


def test_the_speculators_layout_loads_as_a_bonus_anchor_dspark_head(tmp_path, target):
    folder = head_dir(tmp_path, target, kind="dspark", speculators=True)
    head = load_head(str(folder), target)
    assert head.feature_layers == (2, 6) and not head.layout.sample_from_anchor and head.layout.max_draft == 7


def test_heads_for_another_model_or_the_other_kind_are_refused(tmp_path, target):
    ctx = DrafterContext()
    spark = head_dir(tmp_path / "a", target, kind="dspark")
    with pytest.raises(ConfigError, match="this is a dspark head: use --drafter dspark"):
        build(target, DFlashOptions(head=str(spark)), ctx)
    with pytest.raises(ConfigError, match="--dflash-head"):
        build(target, DFlashOptions(), ctx)
    wide = write_dflash_head(tmp_path / "b", 128, target.vocab_size, 3)
    with pytest.raises(ConfigError, match="hidden size 128 is not the target's 64"):
        load_head(str(wide), target)
    deep = head_dir(tmp_path / "c", target, target_layer_ids=(1, 11))
    with pytest.raises(ConfigError, match=r"reads target layers \[1, 11\]; the target has 8"):
        load_head(str(deep), target)
    maskless = head_dir(tmp_path / "e", target)
    config = json.loads((maskless / "config.json").read_text())
    config["dflash_config"].pop("mask_token_id")
    (maskless / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="mask token None"):
        load_head(str(maskless), target)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text("{}")
    with pytest.raises(ModelError, match="no .safetensors weights"):
        load_head(str(tmp_path / "d"), target)
    with pytest.raises(ModelError, match="no such folder"):
        load_head(str(tmp_path / "nowhere"), target)


# -- train-eagle --layout dflash -------------------------------------------------------------------------
def test_the_training_forward_is_the_drafting_forward(tmp_path, target):
    """A DFlashTrainHead's blocks (many anchors in one pass, each seeing only the context before it) equal,
    once saved in the released layout, what the torch drafter's head computes for each anchor alone."""
    from localspec.train.dflash import DFlashTrainHead
    from localspec.train.driver import save_head

    head = DFlashTrainHead(target.model, seed=3, block=6)
    assert head.layer_ids == (1, 2, 3, 4, 5) and head.feature_layers == (2, 3, 4, 5, 6)  # 8 layers: 1 .. L-3
    head.choose_vocabulary(range(0, 200, 2))
    with torch.no_grad():  # random, not the small-output start, so that every module shows in the rows
        for p in head.parameters():
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.2)
    tokens = torch.tensor(PROMPT + [60, 61, 62, 63])
    feats = torch.from_numpy(features(target, head.feature_layers, tokens.tolist()))
    anchors, lengths = torch.tensor([1, 5, 9]), torch.tensor([6, 3, 6])
    ids = torch.full((3, 6), head.mask_token)
    ids[:, 0] = tokens[anchors]
    positions = (anchors[:, None] + torch.arange(6)).reshape(-1)
    with torch.no_grad():
        rows = head.forward_blocks(head.embed[ids.reshape(-1)], positions, feats, anchors, lengths).view(3, 6, -1)
    save_head(head, tmp_path / "head", {})
    loaded = load_head(str(tmp_path / "head"), target)
    assert loaded.layout.kind == "dflash" and loaded.layout.block_size == 6
    assert loaded.layout.mask_token == head.mask_token and loaded.to_target.tolist() == list(range(0, 200, 2))
    for b, (p, n) in enumerate(zip(anchors.tolist(), lengths.tolist(), strict=True)):
        loaded.lo = 0
        loaded.inject(feats[:p].numpy(), 0)
        got = loaded.block(int(tokens[p]), p, n).hidden
        assert torch.allclose(got, rows[b, :n], atol=1e-4), b
        logits = loaded.logits(got[1:])
        assert np.allclose(logits[:, loaded.to_target], head.lm_head(rows[b, 1:n]).detach().numpy(), atol=1e-4)
