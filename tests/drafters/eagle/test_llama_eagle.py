"""EAGLE-3 on the llama.cpp backend, on a tiny random float32 llama GGUF that the torch backend runs too:
the target's layer inputs and the head's logits equal torch's, `convert-eagle` writes a head llama.cpp
loads, greedy drafting is exact, sampling keeps the target's distribution, and heads for other models or
in the wrong layout are refused with a clear message."""

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from support.distribution import chi_square_p  # noqa: E402
from support.eagle_heads import write_eagle3_head  # noqa: E402
from support.tiny_gguf import write_tiny_f32_llama  # noqa: E402
from support.tiny_torch import write_eagle_head  # noqa: E402

from localspec.backends.llama_cpp.backend import LlamaCppBackend  # noqa: E402
from localspec.backends.torch.backend import TorchBackend  # noqa: E402
from localspec.drafters.base import NoDrafter  # noqa: E402
from localspec.drafters.eagle.drafter import EagleDrafter  # noqa: E402
from localspec.drafters.eagle.gguf import convert_eagle  # noqa: E402
from localspec.drafters.eagle.torch_head import load_eagle_head  # noqa: E402
from localspec.engine.exact import DEFAULT_MARGIN  # noqa: E402
from localspec.engine.loop import generate  # noqa: E402
from localspec.errors import ConfigError, ModelError  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402

GREEDY = SamplingParams(temperature=0)
PROMPT = [40, 41, 42, 43, 44, 45, 40, 41, 42]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("eagle3")
    target = write_tiny_f32_llama(d / "target.gguf")
    torch_target = TorchBackend(target, n_ctx=256, device="cpu")
    write_eagle3_head(d / "head", torch_target, draft_vocab=96, seed=5)
    _scale_lm_head(d / "head", 3.0)
    report = convert_eagle(d / "head", target, d / "head.gguf", "f32")
    return {"dir": d, "target": target, "torch": torch_target, "report": report}


def _scale_lm_head(folder, factor):
    """Sharper head logits, so most rows have a clear top token (median top-2 gap >= 1)."""
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    state["lm_head.weight"] *= factor
    torch.save(state, folder / "pytorch_model.bin")


@pytest.fixture(scope="module")
def llama(files):
    with LlamaCppBackend(files["target"], n_ctx=256, n_threads=2) as b:
        yield b


def test_convert_writes_the_layers_and_draft_vocabulary(files):
    assert files["report"] == {"layers": [2, 4, 5], "draft_vocab": 96, "hidden": 64}


def test_features_and_head_logits_equal_torchs(files, llama):
    from localspec.drafters.eagle.llama_head import LlamaEagle3Head

    tb = files["torch"]
    th = load_eagle_head(files["dir"] / "head", tb)
    lh = LlamaEagle3Head(files["dir"] / "head.gguf", llama)
    assert lh.feature_layers == th.feature_layers == (2, 4, 5)
    tb.set_feature_layers(th.feature_layers)
    llama.set_feature_layers(lh.feature_layers)
    tokens = list(range(60, 100))
    tb.truncate(0)
    llama.truncate(0)
    t, ll = tb.forward(tokens, return_hidden=True), llama.forward(tokens, return_hidden=True)
    assert np.abs(t.hidden - ll.hidden).max() <= 1e-3 * np.abs(t.hidden).max()
    g_t, g_l = th.fuse(t.hidden).numpy(), lh.fuse(ll.hidden)
    assert np.abs(g_t - g_l).max() <= 1e-3 * np.abs(g_t).max()
    gaps, compared = [], 0
    for n in range(2, len(tokens)):  # the head's output after n - 1 pairs (the same g rows on both sides)
        th.lo = lh.lo = 0
        lt = _f32_logits(th, th.step(tokens[1:n], torch.tensor(g_t[: n - 1]), 0)[-1:])[0]
        lg = lh.logits(lh.step(tokens[1:n], g_t[: n - 1], 0))[0]
        kept = np.isfinite(lt)
        assert (np.isfinite(lg) == kept).all() and kept.sum() == 96  # the draft vocabulary, through d2t
        assert np.abs(lt[kept] - lg[kept]).max() <= 1e-3 * np.abs(lt[kept]).max()
        top2 = np.sort(lt[kept])[-2:]
        gaps.append(top2[1] - top2[0])
        if gaps[-1] > 1e-2:
            assert int(np.argmax(lt)) == int(np.argmax(lg))
            compared += 1
    assert np.median(gaps) >= 1.0 and compared > len(gaps) // 2
    lh.close()


def test_tree_expansion_on_llama_cpp_equals_torchs(files, llama):
    """Two levels of an EAGLE-2 tree from the same context: every node's output rows agree with the torch
    head's tree attention (each node sees the context and its own ancestors only)."""
    from localspec.drafters.eagle.llama_head import LlamaEagle3Head

    th = load_eagle_head(files["dir"] / "head", files["torch"])
    lh = LlamaEagle3Head(files["dir"] / "head.gguf", llama)
    g = np.random.default_rng(2).standard_normal((12, 64)).astype(np.float32) * 3
    tokens = list(range(70, 82))
    th.lo = lh.lo = 0
    last_t, last_l = th.step(tokens, torch.tensor(g), 0)[-1:], lh.step(tokens, g, 0)
    base, parents = 12, [-1, -1, 0, 0, 1]  # nodes 0, 1 at depth 1; 2, 3 under 0 and 4 under 1 at depth 2
    node_tokens = [5, 6, 7, 8, 9]
    tt, lt = th.tree(base), lh.tree(base)
    out_t = tt.step(node_tokens[:2], [last_t, last_t], [0, 1], parents, base)
    out_l = lt.step(node_tokens[:2], [last_l, last_l], [0, 1], parents, base)
    deep_t = tt.step(node_tokens[2:], [out_t[0:1], out_t[0:1], out_t[1:2]], [2, 3, 4], parents, base + 1)
    deep_l = lt.step(node_tokens[2:], [out_l[0:1], out_l[0:1], out_l[1:2]], [2, 3, 4], parents, base + 1)
    lt.end()
    for rows_t, rows_l in ((out_t, out_l), (deep_t, deep_l)):
        want, got = _f32_logits(th, rows_t), rows_l.logits
        kept = np.isfinite(want)
        assert np.abs(want[kept] - got[kept]).max() <= 1e-3 * np.abs(want[kept]).max()
    # after the tree only the context is left in the head's cache: a chain step there equals a fresh one
    again = lh.step([5], last_l.hidden, base)
    lh.lo = 1  # a new start: the cache is emptied
    lh.lo = 0
    fresh = lh.step([*tokens, 5], np.concatenate([g, last_l.hidden]), 0)
    kept = np.isfinite(fresh.logits)
    assert np.abs(again.logits[kept] - fresh.logits[kept]).max() <= 1e-4 * np.abs(fresh.logits[kept]).max()
    lh.close()


def _f32_logits(head, out) -> np.ndarray:
    """The torch head's logits in float32 (its drafting path reads the LM head in half precision on CPU)."""
    with torch.inference_mode():
        draft = head.norm(out) @ head.lm_head.weight.T
    full = np.full((draft.shape[0], head.target_vocab), -np.inf, np.float32)
    full[:, head.draft_to_target.numpy()] = draft.numpy()
    return full


def test_greedy_eagle_drafting_equals_plain_decoding(files, llama):
    llama.truncate(0)
    plain = generate(llama, NoDrafter(), PROMPT, GREEDY, max_tokens=60).tokens
    llama.truncate(0)
    drafter = EagleDrafter(llama, files["dir"] / "head.gguf")
    got = generate(
        llama, drafter, PROMPT, GREEDY, max_tokens=60, draft_tokens=3, exact_guard=DEFAULT_MARGIN["llama.cpp"]
    )
    assert got.tokens == plain
    assert got.stats.drafted > 0 and "EAGLE-3" in drafter.describe()
    llama.truncate(0)
    trees = EagleDrafter(llama, files["dir"] / "head.gguf", tree_nodes=10, tree_width=3)
    tree = generate(
        llama, trees, PROMPT, GREEDY, max_tokens=60, draft_tokens=3, exact_guard=DEFAULT_MARGIN["llama.cpp"]
    )
    assert tree.tokens == plain and tree.stats.drafter["mean_tree_tokens"] > 5  # real trees, verified whole
    trees.close()
    # a second turn that shares the first's prompt keeps the head's cache for it and is still exact
    llama.truncate(0)
    again = generate(
        llama, drafter, PROMPT, GREEDY, max_tokens=60, draft_tokens=3, exact_guard=DEFAULT_MARGIN["llama.cpp"]
    )
    assert again.tokens == plain
    drafter.close()


@pytest.mark.parametrize("tree", [0, 6], ids=["chain", "tree"])
def test_sampling_with_eagle_on_llama_cpp_keeps_the_targets_distribution(tmp_path, tree):
    """Top-k 3 leaves 27 three-token answers: their frequencies under EAGLE drafting (q rows from the
    head, min(1, p/q) and the residual) against the target's own probabilities. The target puts its mass
    on 12 tokens and the head drafts among the same 12, so drafts are often accepted and often not."""
    target = write_tiny_f32_llama(tmp_path / "focus.gguf", seed=3, focus=12)
    write_eagle3_head(tmp_path / "head", TorchBackend(target, n_ctx=64, device="cpu"), draft_vocab=12, seed=4)
    state = torch.load(tmp_path / "head" / "pytorch_model.bin", weights_only=True)
    state["d2t"] = torch.zeros(12, dtype=torch.long)  # draft id d is target id d: tokens 0..11
    torch.save(state, tmp_path / "head" / "pytorch_model.bin")
    convert_eagle(tmp_path / "head", target, tmp_path / "head.gguf", "f32")
    with LlamaCppBackend(target, n_ctx=64, n_threads=2) as llama:
        _check_distribution(llama, EagleDrafter(llama, tmp_path / "head.gguf", seed=3, tree_nodes=tree, tree_width=2))


def _check_distribution(llama, drafter):
    sampling = SamplingParams(temperature=1.0, top_k=3, top_p=1.0, min_p=0.0)
    prompt, n, samples = PROMPT[:5], 3, 2000
    exact, memo = {}, {}

    def probs(ctx):
        if ctx not in memo:
            llama.truncate(0)
            memo[ctx] = sampling.probs(llama.forward(list(ctx)).logits[-1:])[0]
        return memo[ctx]

    def walk(ctx, p, depth):
        if depth == n:
            exact[ctx[len(prompt) :]] = p
            return
        row = probs(ctx)
        for t in np.flatnonzero(row):
            walk((*ctx, int(t)), p * row[t], depth + 1)

    walk(tuple(prompt), 1.0, 0)
    rng, counts, accepted = np.random.default_rng(11), {}, 0
    for _ in range(samples):
        llama.truncate(0)
        out = generate(llama, drafter, prompt, sampling, max_tokens=n, draft_tokens=2, rng=rng)
        counts[out.tokens] = counts.get(out.tokens, 0) + 1
        accepted += out.stats.accepted
    drafter.close()
    assert accepted > samples * 0.2  # drafts were accepted, and so also rejected: the head is random
    assert chi_square_p(counts, exact) > 1e-3


# -- refusals ---------------------------------------------------------------------------------------------
def test_heads_for_another_model_or_in_the_wrong_layout_are_refused(files, llama, tmp_path):
    d = files["dir"]
    with pytest.raises(ConfigError, match="convert-eagle"):  # the Hugging Face folder, not a GGUF
        EagleDrafter(llama, d / "head")
    with pytest.raises(ModelError, match="not an EAGLE-3 head"):  # a GGUF of another architecture
        EagleDrafter(llama, files["target"])
    wide = write_tiny_f32_llama(tmp_path / "wide.gguf", embd=96, heads=4, kv_heads=2)
    with (
        LlamaCppBackend(wide, n_ctx=128, n_threads=2) as other,
        pytest.raises(ConfigError, match="hidden size 64.*another model"),
    ):
        EagleDrafter(other, d / "head.gguf")
    shallow = write_tiny_f32_llama(tmp_path / "shallow.gguf", layers=4)
    with (
        LlamaCppBackend(shallow, n_ctx=128, n_threads=2) as other,
        pytest.raises(ConfigError, match=r"layers \[2, 4, 5\].*another model"),
    ):
        EagleDrafter(other, d / "head.gguf")
    bigger = write_tiny_f32_llama(tmp_path / "bigger.gguf", extra_tokens=6)  # same shapes, 264 tokens
    with (
        LlamaCppBackend(bigger, n_ctx=128, n_threads=2) as other,
        pytest.raises(ConfigError, match="258-token vocabulary.*264.*another model"),
    ):
        EagleDrafter(other, d / "head.gguf")
    # the converter refuses a head for another target, and EAGLE-1 heads (llama.cpp runs EAGLE-3 only)
    with pytest.raises(ConfigError, match="another model"):
        convert_eagle(d / "head", wide, tmp_path / "x.gguf")
    write_eagle_head(tmp_path / "e1", files["torch"], "safetensors", with_embed=False)
    with pytest.raises(ConfigError, match="EAGLE-1 head"):
        convert_eagle(tmp_path / "e1", files["target"], tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_llama_cpp_gives_layer_inputs_only(llama):
    with pytest.raises(ConfigError, match="EAGLE-1/2"):
        llama.set_feature_layers([-1])
    with pytest.raises(ConfigError, match="layers 0..7"):
        llama.set_feature_layers([2, 8])


def test_a_missing_libllama_symbol_names_the_version_to_install(monkeypatch):
    from localspec.backends.llama_cpp import ext as llama_ext

    monkeypatch.setitem(llama_ext._SIGNATURES, "llama_no_such_fn", (("_Z15llama_no_such_fnv",), [], None))
    with pytest.raises(ConfigError, match=r"does not export llama_no_such_fn.*llama-cpp-python 0\.3\.36"):
        llama_ext.ext("llama_no_such_fn")


def test_the_converted_head_keeps_the_targets_tokenizer(files):
    from localspec.backends.gguf_meta import read_metadata

    meta = read_metadata(files["dir"] / "head.gguf")
    assert meta["general.architecture"] == "eagle3" and meta["eagle3.target_hidden_size"] == 64
    assert meta["tokenizer.ggml.model"] == "gpt2"
    assert json.loads(json.dumps(files["report"]))["layers"] == [2, 4, 5]


def test_train_eagle3_learns_a_head_that_runs_on_torch_and_llama_cpp(tmp_path):
    """`train-eagle --layout eagle3` on the tiny target: held-out agreement rises, the folder loads on torch,
    converts, and drafts on llama.cpp with accepted tokens, greedy output unchanged on both."""
    from localspec.train.driver import TrainConfig, train_eagle

    target = write_tiny_f32_llama(tmp_path / "target.gguf", seed=1, focus=12)
    backend = TorchBackend(target, n_ctx=256, device="cpu")
    rng = np.random.default_rng(0)
    docs = []  # the target's own greedy answers (self-distillation), as text: token t is the byte t
    for _ in range(40):
        start = [int(t) for t in rng.integers(0, 12, size=4)]
        backend.truncate(0)
        docs.append(start + list(generate(backend, NoDrafter(), start, GREEDY, max_tokens=60).tokens))
    lines = [json.dumps({"text": "".join(map(chr, doc))}) for doc in docs]
    (tmp_path / "corpus.jsonl").write_text("\n".join(lines))
    report = train_eagle(
        backend,
        tmp_path / "corpus.jsonl",
        tmp_path / "head",
        TrainConfig(max_steps=720, epochs=20, seq_len=128, lr=3e-3, holdout=0.1, layout="eagle3"),
        log=lambda line: None,
    )
    assert report["layout"] == "eagle3"
    assert report["val_top1"] > report["start_val_top1"] + 0.2, report
    config = json.loads((tmp_path / "head" / "config.json").read_text())
    assert config["draft_vocab_size"] < 258 and config["architectures"] == ["LlamaForCausalLMEagle3"]
    prompt = [3, 1, 4, 1, 5]
    backend.truncate(0)
    plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=40).tokens
    backend.truncate(0)
    on_torch = generate(backend, EagleDrafter(backend, tmp_path / "head"), prompt, GREEDY, max_tokens=40)
    assert on_torch.tokens == plain and on_torch.stats.accepted > 0
    convert_eagle(tmp_path / "head", target, tmp_path / "head.gguf")  # f16 matrices, the command's default
    with LlamaCppBackend(target, n_ctx=256, n_threads=2) as llama:
        drafter = EagleDrafter(llama, tmp_path / "head.gguf")
        got = generate(llama, drafter, prompt, GREEDY, max_tokens=40, exact_guard=DEFAULT_MARGIN["llama.cpp"])
        drafter.close()
    assert got.tokens == plain and got.stats.accepted > 0


@pytest.mark.model
def test_cli_converts_a_head_for_smollm2_and_runs_it_exactly(tmp_path):
    """`convert-eagle` then `run --drafter eagle` on the real SmolLM2 GGUF (llama architecture: it hands out
    layer inputs) with a random EAGLE-3 head of its shapes: the answer is plain decoding's, chains and trees."""
    from support.cli import run_cli

    from localspec.models.registry import resolve_model

    _, model = resolve_model("smollm2-135m")
    h, heads, kv, inter, vocab = 576, 9, 3, 1536, 49152
    rng = torch.Generator().manual_seed(0)

    def rand(*shape):
        return torch.randn(*shape, generator=rng) * 0.02

    kept = torch.arange(0, vocab, 24)  # a 2048-token draft vocabulary
    state = {
        "fc.weight": rand(h, 3 * h),
        "midlayer.hidden_norm.weight": torch.ones(h),
        "midlayer.input_layernorm.weight": torch.ones(h),
        "midlayer.post_attention_layernorm.weight": torch.ones(h),
        "midlayer.self_attn.q_proj.weight": rand(heads * 64, 2 * h),
        "midlayer.self_attn.k_proj.weight": rand(kv * 64, 2 * h),
        "midlayer.self_attn.v_proj.weight": rand(kv * 64, 2 * h),
        "midlayer.self_attn.o_proj.weight": rand(h, heads * 64),
        "midlayer.mlp.gate_proj.weight": rand(inter, h),
        "midlayer.mlp.up_proj.weight": rand(inter, h),
        "midlayer.mlp.down_proj.weight": rand(h, inter),
        "norm.weight": torch.ones(h),
        "lm_head.weight": rand(len(kept), h),
        "d2t": kept - torch.arange(len(kept)),
    }
    folder = tmp_path / "head"
    folder.mkdir()
    torch.save(state, folder / "pytorch_model.bin")
    config = {"hidden_size": h, "num_attention_heads": heads, "num_key_value_heads": kv, "intermediate_size": inter}
    (folder / "config.json").write_text(json.dumps({**config, "draft_vocab_size": len(kept), "vocab_size": vocab}))
    head = tmp_path / "smollm2-eagle3.gguf"
    made = run_cli("convert-eagle", str(folder), "--target", "smollm2-135m", "-o", str(head))
    assert made.returncode == 0, made.stderr
    assert "layers [2, 15, 27]" in made.stdout and head.is_file()
    base = ["run", "--model", str(model), "--temperature", "0", "-n", "40", "--json", "Name three colors."]
    plain = json.loads(run_cli(*base, "--drafter", "none").stdout)["text"]
    for extra in ([], ["--eagle-tree", "8"]):
        result = run_cli(*base, "--drafter", "eagle", "--eagle-head", str(head), *extra)
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout)
        assert out["text"] == plain and out["stats"]["drafted"] > 0
    # a head for another model is one clear line, not a traceback
    wrong = run_cli(*base, "--drafter", "eagle", "--eagle-head", str(folder))
    assert wrong.returncode != 0 and "Traceback" not in wrong.stderr and "convert-eagle" in wrong.stderr
