"""EAGLE on tiny random torch models: tree attention and verification in the backend, EAGLE-3 checkpoints
(fused features, draft vocabulary with d2t), chain and tree drafting exact under greedy decoding and in
distribution under sampling, and `train-eagle` learning a head that loads and drafts."""

import numpy as np
import pytest
from support.distribution import chi_square_p  # noqa: E402
from support.eagle_heads import DEEP, PROMPT, SMALL, backend_for, exact, torch, word_corpus, write_eagle3_head  # noqa: F401
from support.tiny_torch import GREEDY, V, assert_close, tiny, write_eagle_head  # noqa: E402

from localspec.backends.torch.decoder import DecoderConfig  # noqa: E402
from localspec.drafters.base import NoDrafter  # noqa: E402
from localspec.drafters.eagle.drafter import EagleDrafter  # noqa: E402
from localspec.engine.loop import generate  # noqa: E402
from localspec.errors import ConfigError, ModelError  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402


# -- tree attention in the backend ----------------------------------------------------------------------
@pytest.mark.parametrize("name", ["llama-gqa", "qwen2-bias-tied"])
def test_tree_rows_equal_each_branch_run_alone_and_accept_path_compacts_the_cache(name):
    backend = tiny(name)
    prefix = [5, 6, 7, 8, 9]
    # pending token 3; tree: a=10, b=11 under it; c=12 under a; d=13 under b; e=14 under c
    tokens, parents = [10, 11, 12, 13, 14], [-1, -1, 0, 1, 2]
    backend.prefill(prefix)
    tree = backend.forward_tree([3, *tokens], parents, return_hidden=True)
    branches = {0: [3], 1: [3, 10], 2: [3, 11], 3: [3, 10, 12], 4: [3, 11, 13], 5: [3, 10, 12, 14]}
    for row, branch in branches.items():
        backend.truncate(len(prefix))
        alone = backend.forward(branch, return_hidden=True)
        assert_close(tree.logits[row], alone.logits[-1])
        assert_close(tree.hidden[row], alone.hidden[-1])
    # keep the branch b, d (draft indices 1, 3): the cache must then be exactly prefix + [3, 11, 13]
    backend.truncate(len(prefix))
    backend.forward_tree([3, *tokens], parents)
    backend.accept_path([1, 3])
    assert backend.cached_tokens == (*prefix, 3, 11, 13)
    after = backend.forward([4]).logits
    backend.truncate(0)
    assert_close(after, backend.forward([*prefix, 3, 11, 13, 4]).logits[-1:])


# -- EAGLE-3 checkpoints ---------------------------------------------------------------------------------
def test_eagle3_head_reads_three_layers_and_drafts_only_its_vocabulary(tmp_path):
    backend = backend_for(DEEP)
    kept = write_eagle3_head(tmp_path / "head3", backend)
    drafter = EagleDrafter(backend, tmp_path / "head3", seed=0)
    assert drafter.head.version == 3 and drafter.head.feature_layers == (2, 4, 5)
    assert backend.forward([1, 2], return_hidden=True).hidden.shape == (2, 3 * 32)  # fused width
    backend.truncate(0)
    plain = generate(backend, NoDrafter(), PROMPT, GREEDY, max_tokens=50).tokens
    backend.truncate(0)
    out = generate(backend, drafter, PROMPT, GREEDY, max_tokens=50, draft_tokens=3)
    assert out.tokens == plain and out.stats.drafted > 20
    sampled = generate(
        backend,
        drafter,
        PROMPT,
        SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
        max_tokens=30,
        draft_tokens=3,
        rng=np.random.default_rng(0),
    )
    assert sampled.stats.rule_comparison()["positions"] > 0
    head_logits = drafter.head.logits(drafter._last)
    outside = [t for t in range(V) if t not in kept]
    assert np.isneginf(head_logits[0, outside]).all() and np.isfinite(head_logits[0, kept]).all()


def test_eagle3_layer_ids_from_the_config_and_mismatched_heads_are_refused(tmp_path):
    backend = tiny("llama-gqa")  # 2 layers: the default 2, L//2, L-3 does not exist, the config names them
    write_eagle3_head(tmp_path / "ok", backend, layer_ids=[-1, 0, 0])  # layer outputs: -1 is the embedding
    assert EagleDrafter(backend, tmp_path / "ok").head.feature_layers == (0, 1, 1)  # layer inputs
    write_eagle3_head(tmp_path / "bad", backend, layer_ids=[0, 1, 7])
    with pytest.raises(ConfigError, match="reads layers"):
        EagleDrafter(backend, tmp_path / "bad")
    other = backend_for(DecoderConfig(V, 48, 64, 2, 4, 2, 12))  # another hidden size
    with pytest.raises(ConfigError, match="hidden size|another model"):
        EagleDrafter(other, tmp_path / "ok")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text("{}")
    (tmp_path / "broken" / "pytorch_model.bin").write_bytes(b"not a checkpoint")
    with pytest.raises(ModelError, match="cannot be read"):
        EagleDrafter(backend, tmp_path / "broken")


# -- tree drafting ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", [1, 3])
def test_tree_drafting_is_exact_under_greedy_and_accepts_more_per_step_than_a_chain(tmp_path, version):
    backend = backend_for(DEEP)
    if version == 1:
        write_eagle_head(tmp_path / "head", backend, "safetensors", with_embed=False)
    else:
        write_eagle3_head(tmp_path / "head", backend)
    plain = generate(backend, NoDrafter(), PROMPT, GREEDY, max_tokens=80).tokens
    backend.truncate(0)
    chain = generate(backend, EagleDrafter(backend, tmp_path / "head"), PROMPT, GREEDY, max_tokens=80, draft_tokens=3)
    backend.truncate(0)
    drafter = EagleDrafter(backend, tmp_path / "head", tree_nodes=12, tree_width=3)
    tree = generate(backend, drafter, PROMPT, GREEDY, max_tokens=80, draft_tokens=3)
    assert chain.tokens == plain and tree.tokens == plain
    assert tree.stats.drafter["mean_tree_tokens"] > 6  # real trees, not chains
    # more candidates per step: at least as many tokens per target pass as the head's single best chain
    assert tree.stats.accepted >= chain.stats.accepted


def test_tree_drafts_need_tree_attention():
    from support.fakes import ScriptedBackend as Plain

    from localspec.drafters.base import DrafterNeeds, check_fit

    drafter = NoDrafter()
    drafter.needs = DrafterNeeds(tree_attention=True)
    with pytest.raises(ConfigError, match="tree attention"):
        check_fit(Plain(), drafter)


# -- distribution: EAGLE drafts under sampling leave the target's distribution unchanged -----------------
N, SAMPLES = 3, 3000


@pytest.mark.parametrize(
    "version,tree,sampling",
    [
        (1, 0, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)),
        (3, 0, SamplingParams(temperature=0.8, top_k=0, top_p=0.9, min_p=0.0)),
        (3, 6, SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)),
    ],
    ids=["eagle1-chain-T1", "eagle3-chain-T0.8-p0.9", "eagle3-tree-T1-k3"],
)
def test_eagle_sampling_matches_the_targets_distribution(tmp_path, version, tree, sampling):
    backend = backend_for(SMALL, seed=1, vocab=6, scale=1.5)
    if version == 1:
        write_eagle_head(tmp_path / "head", backend, "bin", with_embed=True)
    else:
        write_eagle3_head(tmp_path / "head", backend, draft_vocab=5, layer_ids=[-1, 0, 1])
    drafter = EagleDrafter(backend, tmp_path / "head", seed=3, tree_nodes=tree, tree_width=2)
    rng, counts, accepted = np.random.default_rng(7), {}, 0
    for _ in range(SAMPLES):
        out = generate(backend, drafter, PROMPT[:4], sampling, max_tokens=N, draft_tokens=2, rng=rng)
        counts[out.tokens] = counts.get(out.tokens, 0) + 1
        accepted += out.stats.accepted
    assert accepted > SAMPLES * 0.2  # drafts were accepted (and so also rejected: the head is random)
    assert chi_square_p(counts, exact(backend, sampling)) > 1e-3


# -- train-eagle -----------------------------------------------------------------------------------------
def test_train_eagle_learns_a_head_that_loads_and_drafts(tmp_path):
    from localspec.train.driver import TrainConfig, train_eagle

    backend = tiny("llama-gqa")
    docs = word_corpus(tmp_path / "corpus.txt")
    lines = []
    report = train_eagle(
        backend,
        tmp_path / "corpus.txt",
        tmp_path / "head",
        TrainConfig(max_steps=1440, epochs=20, seq_len=128, lr=3e-3, holdout=0.1),
        log=lines.append,
    )
    assert report["steps"] == 1440  # bounded by work: the same head on a fast or a busy machine
    assert report["val_top1"] > 2 * report["start_val_top1"] + 0.05, report  # ~0.07 untrained, ~0.25 trained
    assert any("held-out" in line for line in lines)
    for name in ("config.json", "model.safetensors", "train_report.json"):
        assert (tmp_path / "head" / name).is_file()
    prompt = backend.tokenizer.tokenize(docs[0][:40])
    backend.truncate(0)
    plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=40).tokens
    backend.truncate(0)
    out = generate(backend, EagleDrafter(backend, tmp_path / "head"), prompt, GREEDY, max_tokens=40, draft_tokens=3)
    assert out.tokens == plain and out.stats.accepted > 0


def test_training_stops_after_max_steps(tmp_path):
    from localspec.train.driver import TrainConfig, train_eagle

    word_corpus(tmp_path / "corpus.txt")
    config = TrainConfig(max_steps=7, epochs=20, seq_len=128, holdout=0.1)
    report = train_eagle(tiny("llama-gqa"), tmp_path / "corpus.txt", tmp_path / "head", config, log=lambda _: None)
    assert report["steps"] == 7 and (tmp_path / "head" / "model.safetensors").is_file()


def test_train_eagle_rejects_bad_corpora(tmp_path):
    from localspec.train.driver import TrainConfig, train_eagle

    backend = tiny("llama-gqa")
    with pytest.raises(ConfigError, match="no such corpus"):
        train_eagle(backend, tmp_path / "missing.jsonl", tmp_path / "out", TrainConfig())
    (tmp_path / "bad.jsonl").write_text('{"messages": []}\nnot json\n')
    with pytest.raises(ConfigError, match="bad.jsonl:2: not JSON"):
        train_eagle(backend, tmp_path / "bad.jsonl", tmp_path / "out", TrainConfig())
    (tmp_path / "short.txt").write_text("ab\n\ncd")
    with pytest.raises(ConfigError, match="no usable text"):
        train_eagle(backend, tmp_path / "short.txt", tmp_path / "out", TrainConfig())


def test_the_head_keeps_its_cache_across_turns_and_trees_fit_the_context(tmp_path):
    backend = tiny("llama-gqa")
    write_eagle_head(tmp_path / "head", backend, "safetensors", with_embed=False)
    drafter = EagleDrafter(backend, tmp_path / "head", tree_nodes=12, tree_width=3)
    first = generate(backend, drafter, PROMPT, GREEDY, max_tokens=20, draft_tokens=3)
    # every position whose next token is known was handed over, the last step's features too; what the
    # head has not taken yet goes in with the next draft
    drafter._catch_up()
    assert drafter.rows.first == 0 and drafter.rows.fed == len(PROMPT) + 20 - 1
    second = PROMPT + list(first.tokens) + [5, 6, 7]
    backend_plain = tiny("llama-gqa")
    plain = generate(backend_plain, NoDrafter(), second, GREEDY, max_tokens=20).tokens
    out = generate(backend, drafter, second, GREEDY, max_tokens=20, draft_tokens=3)
    assert out.tokens == plain
    drafter._catch_up()
    assert drafter.rows.first == 0 and drafter.rows.fed == len(second) + 20 - 1  # continued, not started over
    # close to the end of the context a tree is cut to the slots that are left: the turn ends normally
    long_prompt = [int(t) for t in np.random.default_rng(4).integers(0, V, backend.n_ctx - 6)]
    backend.truncate(0)
    end = generate(backend, drafter, long_prompt, GREEDY, max_tokens=40, draft_tokens=4)
    assert end.finish_reason == "context"
