"""DFlash and DSpark on the llama.cpp backend: `convert-dflash` writes random heads in the released layouts
as dflash GGUFs for a tiny random float32 llama (which the torch backend runs too), llama.cpp's block logits
(and DSpark's Markov bias and confidence) equal the torch head's on the same features, greedy drafting is
exact, sampling keeps the target's distribution, a Hugging Face folder is converted once into the cache,
and heads for another model are refused."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from support.dflash_heads import EMBD, PROMPT, exact_pairs, features, head_dir  # noqa: E402
from support.distribution import chi_square_p  # noqa: E402
from support.tiny_dflash import write_dflash_head  # noqa: E402
from support.tiny_gguf import write_tiny_f32_llama  # noqa: E402

from localspec.backends.llama_cpp.backend import LlamaCppBackend  # noqa: E402
from localspec.backends.torch.backend import TorchBackend  # noqa: E402
from localspec.drafters.base import NoDrafter  # noqa: E402
from localspec.drafters.context import DrafterContext  # noqa: E402
from localspec.drafters.dflash.drafter import DFlashOptions, build, build_dspark, load_head  # noqa: E402
from localspec.drafters.dflash.gguf import convert_dflash, gguf_head_for  # noqa: E402
from localspec.engine.exact import DEFAULT_MARGIN  # noqa: E402
from localspec.engine.loop import generate  # noqa: E402
from localspec.engine.speclen import FixedK  # noqa: E402
from localspec.errors import ConfigError, ModelError  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402

GREEDY = SamplingParams(temperature=0)


@pytest.fixture(scope="module")
def files(tiny_llama_gguf):
    return tiny_llama_gguf


@pytest.fixture(scope="module")
def llama(files):
    with LlamaCppBackend(files["target"], n_ctx=256, n_threads=2) as b:
        yield b


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_block_logits_on_llama_cpp_equal_torchs(files, llama, tmp_path, kind):
    tb = files["torch"]
    folder = head_dir(tmp_path, tb, kind=kind, layers=2)
    report = convert_dflash(folder, files["target"], tmp_path / "head.gguf", "f32")
    assert report == {"kind": kind, "layers": [2, 6], "block_size": 8}
    th, lh = load_head(str(folder), tb), load_head(str(tmp_path / "head.gguf"), llama)
    assert lh.feature_layers == th.feature_layers == (2, 6) and lh.layout.kind == kind
    assert lh.layout.mask_token == th.layout.mask_token and lh.layout.max_draft == th.layout.max_draft
    feats = features(tb, th.feature_layers, PROMPT)
    llama.truncate(0)
    llama.set_feature_layers(lh.feature_layers)
    got = llama.forward(PROMPT, return_hidden=True).hidden
    assert np.abs(got - feats).max() <= 1e-3 * np.abs(feats).max()
    p, compared = len(PROMPT) - 1, 0
    for head in (th, lh):
        head.lo = 0
        head.inject(feats[:p], 0)
    rows = th.layout.rows_for(6)
    lb = lh.block(PROMPT[-1], p, rows)
    tblock = th.block(PROMPT[-1], p, rows)
    prev = PROMPT[-1]
    for i in range(6):  # llama.cpp conditions DSpark's rows on the argmax chain: follow it on torch
        want, conf_t = tblock.row(i, prev)
        have, conf_l = lh_row = lb.row(i, prev)
        assert lh_row is not None and np.abs(have - want).max() <= 2e-3 * np.abs(want).max()
        if kind == "dspark":
            assert abs(conf_l - conf_t) < 2e-3
        top2 = np.sort(want)[-2:]
        if top2[1] - top2[0] > 1e-2:
            assert int(np.argmax(have)) == int(np.argmax(want))
            compared += 1
        prev = int(np.argmax(have))
    assert compared >= 4
    lh.close()


@pytest.mark.parametrize("kind", ["dflash", "dspark"])
def test_greedy_drafting_on_llama_cpp_equals_plain_decoding(files, llama, tmp_path, kind):
    folder = head_dir(tmp_path, files["torch"], kind=kind, scale=0.3)
    convert_dflash(folder, files["target"], tmp_path / "head.gguf", "f16")
    llama.truncate(0)
    plain = generate(llama, NoDrafter(), PROMPT, GREEDY, max_tokens=60).tokens
    drafter = (build if kind == "dflash" else build_dspark)(
        llama, DFlashOptions(head=str(tmp_path / "head.gguf")), DrafterContext(seed=0)
    )
    guard = DEFAULT_MARGIN["llama.cpp"]
    for _ in range(2):  # the second turn keeps the head's cache of the shared prompt
        llama.truncate(0)
        got = generate(llama, drafter, PROMPT, GREEDY, max_tokens=60, draft_tokens=FixedK(4), exact_guard=guard)
        assert got.tokens == plain and got.stats.drafted > 0
    assert kind in drafter.describe()
    drafter.close()


def test_sampling_with_dspark_on_llama_cpp_keeps_the_targets_distribution(tmp_path):
    target = write_tiny_f32_llama(tmp_path / "focus.gguf", seed=3, focus=12, extra_tokens=1)
    tb = TorchBackend(target, n_ctx=64, device="cpu")
    folder = write_dflash_head(tmp_path / "head", EMBD, tb.vocab_size, tb.vocab_size - 2, kind="dspark")
    convert_dflash(folder, target, tmp_path / "head.gguf", "f32")
    sampling = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
    prompt = PROMPT[:5]
    with LlamaCppBackend(target, n_ctx=64, n_threads=2) as llama:
        exact = exact_pairs(llama, prompt, sampling, n=3)
        drafter = build_dspark(llama, DFlashOptions(head=str(tmp_path / "head.gguf")), DrafterContext(seed=3))
        rng, counts, accepted, samples = np.random.default_rng(5), {}, 0, 1500
        for _ in range(samples):
            llama.truncate(0)
            out = generate(llama, drafter, prompt, sampling, max_tokens=3, draft_tokens=FixedK(2), rng=rng)
            counts[out.tokens] = counts.get(out.tokens, 0) + 1
            accepted += out.stats.accepted
        drafter.close()
    assert samples * 0.05 < accepted < samples * 1.9
    assert chi_square_p(counts, exact) > 1e-3


def test_a_hugging_face_folder_is_converted_once_into_the_cache(files, llama, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path / "cache"))
    folder = head_dir(tmp_path, files["torch"])
    first = gguf_head_for(folder, files["target"])
    assert first.parent == tmp_path / "cache" / "heads" and first.is_file()
    stamp = first.stat().st_mtime_ns
    head = load_head(str(folder), llama)  # the drafter's path: the same cached GGUF, not converted again
    assert head.path == first and first.stat().st_mtime_ns == stamp
    head.close()


def test_convert_dflash_command_writes_a_head_the_drafter_runs(files, llama, tmp_path, capsys):
    from localspec.apps.cli import main

    folder = head_dir(tmp_path, files["torch"], kind="dspark")
    out = tmp_path / "head.gguf"
    assert main(["convert-dflash", str(folder), "--target", str(files["target"]), "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "dspark head" in said and f"--drafter dspark --dspark-head {out}" in said
    head = load_head(str(out), llama)
    assert head.layout.kind == "dspark" and head.layout.markov_rank > 0
    head.close()
    assert main(["convert-dflash", str(tmp_path), "--target", str(files["target"]), "-o", str(out)]) == 1
    assert "localspec: error:" in capsys.readouterr().err  # not a head folder: a message, no traceback


def test_heads_for_another_model_are_refused_on_llama_cpp(files, llama, tmp_path):
    wide = tmp_path / "wide"
    write_dflash_head(wide, 128, files["torch"].vocab_size, 3)
    with pytest.raises(ConfigError, match="hidden size 128 is not the target's 64"):
        convert_dflash(wide, files["target"], tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()
    small = write_tiny_f32_llama(tmp_path / "small.gguf", embd=32, heads=2, kv_heads=1, extra_tokens=1)
    folder = write_dflash_head(tmp_path / "h32", 32, files["torch"].vocab_size, 3, heads=2, kv_heads=1)
    convert_dflash(folder, small, tmp_path / "h32.gguf")
    with pytest.raises(ConfigError, match="the head belongs to another model"):
        load_head(str(tmp_path / "h32.gguf"), llama)
    with pytest.raises(ModelError, match="is a 'llama' model, not a DFlash/DSpark head"):
        load_head(str(files["target"]), llama)


def test_train_dflash_learns_a_head_that_drafts_exactly(tmp_path):
    """On a tiny target's own greedy text (a target whose output rows favour 32 tokens, so that the text has
    structure to learn), held-out agreement of the first drafted row rises (~0.12 -> ~0.6), and the head
    drafts (accepted tokens) with the output plain decoding's on torch and, converted (its own draft-vocabulary
    LM head and d2t), on llama.cpp."""
    from localspec.train.driver import TrainConfig, train_eagle

    path = write_tiny_f32_llama(tmp_path / "t.gguf", seed=1, focus=32)
    target = TorchBackend(path, n_ctx=256, device="cpu")
    rng = np.random.default_rng(0)
    docs = []  # the target's own greedy continuations, as text: token t is the byte t
    for _ in range(40):
        start = [int(t) for t in rng.integers(0, 32, size=4)]
        target.truncate(0)
        docs.append(start + list(generate(target, NoDrafter(), start, GREEDY, max_tokens=60).tokens))
    (tmp_path / "corpus.jsonl").write_text("\n".join(json.dumps({"text": "".join(map(chr, d))}) for d in docs))
    report = train_eagle(
        target,
        tmp_path / "corpus.jsonl",
        tmp_path / "head",
        TrainConfig(max_steps=720, epochs=20, seq_len=128, lr=3e-3, holdout=0.1, layout="dflash"),
        log=lambda line: None,
    )
    assert report["layout"] == "dflash" and report["val_top1"] > report["start_val_top1"] + 0.25, report
    drafter = build(target, DFlashOptions(head=str(tmp_path / "head")), DrafterContext())
    prompt = docs[0][:6]
    target.truncate(0)
    plain = generate(target, NoDrafter(), prompt, GREEDY, max_tokens=40).tokens
    target.truncate(0)
    out = generate(target, drafter, prompt, GREEDY, max_tokens=40, draft_tokens=FixedK(4))
    assert out.tokens == plain and out.stats.accepted > 0
    with LlamaCppBackend(path, n_ctx=256, n_threads=2) as llama:
        llama_plain = generate(llama, NoDrafter(), prompt, GREEDY, max_tokens=40).tokens
        drafter = build(llama, DFlashOptions(head=str(tmp_path / "head")), DrafterContext())
        llama.truncate(0)
        guard = DEFAULT_MARGIN["llama.cpp"]
        got = generate(llama, drafter, prompt, GREEDY, max_tokens=40, draft_tokens=FixedK(4), exact_guard=guard)
        drafter.close()
    assert got.tokens == llama_plain and got.stats.accepted > 0
