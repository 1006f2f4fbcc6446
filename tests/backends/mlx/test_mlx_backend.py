"""The MLX backend on MLX's CPU build: tiny random Llama and Qwen2 models built with mlx-lm's own classes,
saved as a model folder with a tokenizer built by `tokenizers`; exactness under greedy decoding with every
drafter (n-gram, suffix, an MLX draft model, EAGLE-1 and EAGLE-3 heads running in MLX), the target's
distribution under sampling, rollback, caches that cannot be rolled back, and logits parity with the
PyTorch backend loading the same folder."""

import json

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from support.distribution import chi_square_p  # noqa: E402
from support.fakes import DistributionDrafter, RandomDrafter, ScriptedTokenizer  # noqa: E402
from support.hf_folder import write_tokenizer  # noqa: E402

from localspec.backends.mlx.backend import MlxBackend  # noqa: E402
from localspec.drafters.base import NoDrafter  # noqa: E402
from localspec.drafters.draft_model import DraftModelDrafter  # noqa: E402
from localspec.drafters.ngram import NgramDrafter  # noqa: E402
from localspec.engine.loop import generate  # noqa: E402
from localspec.errors import ConfigError  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402

GREEDY = SamplingParams(temperature=0)


def build_model(model_type, vocab, seed=0, layers=2, scale=4.0, **extra):
    """A random model of mlx-lm's own class for the architecture, with sharpened weights."""
    from mlx.utils import tree_map
    from mlx_lm.models import llama, qwen2

    module = {"llama": llama, "qwen2": qwen2}[model_type]
    mx.random.seed(seed)
    args = dict(
        model_type=model_type,
        hidden_size=32,
        num_hidden_layers=layers,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        rms_norm_eps=1e-6,
        vocab_size=vocab,
        rope_theta=10000.0,
        tie_word_embeddings=model_type == "qwen2",
        max_position_embeddings=512,
        **extra,
    )
    model = module.Model(module.ModelArgs(**args))
    model.update(tree_map(lambda p: p * scale, model.parameters()))
    mx.eval(model.parameters())
    return model, args


def write_mlx_folder(folder, model_type, seed=0, layers=2):
    """config.json + model.safetensors (mlx-lm's tensor names, which are Hugging Face's) + tokenizer."""
    from mlx.utils import tree_flatten

    folder.mkdir(parents=True, exist_ok=True)
    vocab = write_tokenizer(folder)
    model, args = build_model(model_type, vocab, seed, layers)
    mx.save_safetensors(str(folder / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (folder / "config.json").write_text(json.dumps(args))
    return folder


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def folder(request, tmp_path_factory):
    return write_mlx_folder(tmp_path_factory.mktemp(request.param), request.param)


def close(a, b):
    return np.abs(a - b).max() <= 1e-4 * np.abs(b).max() + 1e-4


def test_window_equals_one_token_at_a_time_and_rollback_gives_a_fresh_prefills_logits(folder):
    backend = MlxBackend(folder, n_ctx=256)
    assert backend.capabilities.can_truncate and backend.capabilities.hidden_states
    tokens = backend.tokenizer.tokenize("def add(a, b): hello world, the quick brown fox")
    whole = backend.forward(tokens).logits
    backend.truncate(0)
    rows = np.stack([backend.forward([t]).logits[0] for t in tokens])
    assert close(rows, whole)
    for keep in (0, 3, len(tokens) - 2):
        backend.truncate(keep)
        assert backend.cached_tokens == tuple(tokens[:keep])
        assert close(backend.forward(tokens[keep:]).logits, whole[keep:])


def test_logits_match_the_pytorch_backend_on_the_same_weights(folder):
    pytest.importorskip("torch")
    from localspec.backends.torch.backend import TorchBackend

    ours, theirs = MlxBackend(folder, n_ctx=256), TorchBackend(folder, n_ctx=256, n_threads=2)
    tokens = ours.tokenizer.tokenize("hello world, the quick brown fox jumps")
    assert tokens == theirs.tokenizer.tokenize("hello world, the quick brown fox jumps")
    a, b = ours.forward(tokens, return_hidden=True), theirs.forward(tokens, return_hidden=True)
    assert close(a.logits, b.logits) and close(a.hidden, b.hidden)
    assert (a.logits.argmax(-1) == b.logits.argmax(-1)).all()


def test_every_drafter_keeps_greedy_output_exact(folder, tmp_path):
    from localspec.chat.conversation import Conversation
    from localspec.drafters.suffix.drafter import SuffixDrafter, SuffixOptions

    backend = MlxBackend(folder, n_ctx=256)
    conv = Conversation()
    conv.add("user", "def add(a, b): return a + b, the quick brown fox")
    prompt = conv.prompt_tokens(backend, reserve=60)
    plain = generate(backend, NoDrafter(), prompt, GREEDY, max_tokens=60).tokens
    draft = MlxBackend(
        write_mlx_folder(tmp_path / "draft", json.loads((folder / "config.json").read_text())["model_type"], seed=5),
        n_ctx=256,
    )
    drafters = {
        "ngram": NgramDrafter(1, 3),
        "suffix": SuffixDrafter(SuffixOptions(max_spec_offset=2, min_token_prob=0.0)),
        "random": RandomDrafter(backend.vocab_size, seed=2),
        "draft-model": DraftModelDrafter(draft, backend.vocab_size, backend.vocab_size, seed=1),
    }
    for name, drafter in drafters.items():
        backend.truncate(0)
        out = generate(backend, drafter, prompt, GREEDY, max_tokens=60, draft_tokens=3)
        assert out.tokens == plain, name
        assert out.stats.drafted > 0, name


@pytest.mark.parametrize("version", [1, 3])
def test_eagle_heads_run_in_mlx_from_the_released_checkpoint_formats(tmp_path, version):
    pytest.importorskip("torch")
    from support.eagle_heads import write_eagle3_head
    from support.tiny_torch import write_eagle_head

    from localspec.backends.torch.backend import TorchBackend
    from localspec.drafters.eagle.drafter import EagleDrafter

    folder = write_mlx_folder(tmp_path / "target", "llama", layers=8)
    target, reference = MlxBackend(folder, n_ctx=256), TorchBackend(folder, n_ctx=256, n_threads=2)
    if version == 1:
        write_eagle_head(tmp_path / "head", reference, "safetensors", with_embed=False)
    else:
        write_eagle3_head(tmp_path / "head", reference)
    prompt = target.tokenizer.tokenize("def add(a, b): return a + b")
    plain = generate(target, NoDrafter(), prompt, GREEDY, max_tokens=40).tokens
    target.truncate(0)
    mlx_drafter = EagleDrafter(target, tmp_path / "head")
    out = generate(target, mlx_drafter, prompt, GREEDY, max_tokens=40, draft_tokens=3)
    assert out.tokens == plain and out.stats.drafted > 10
    # the same head in torch, fed the same features, predicts the same next feature and the same tokens
    # (the torch head scores the vocabulary in half precision on CPU: logits agree to ~1e-2 there)
    torch_drafter = EagleDrafter(reference, tmp_path / "head")
    generate(reference, torch_drafter, prompt, GREEDY, max_tokens=40, draft_tokens=3)
    assert close(np.array(mlx_drafter._last), torch_drafter._last.numpy())
    a, b = mlx_drafter.head.logits(mlx_drafter._last), torch_drafter.head.logits(torch_drafter._last)
    finite = np.isfinite(b)
    assert (np.isfinite(a) == finite).all() and a.argmax() == b.argmax()
    assert np.abs(a[finite] - b[finite]).max() <= 1e-2 * np.abs(b[finite]).max()


def test_a_cache_that_cannot_be_rolled_back_is_refused_before_generating(tmp_path):
    model, _ = build_model("llama", 12, layer_types=["sliding_attention", "full_attention"], sliding_window=8)
    backend = MlxBackend.from_model(model, ScriptedTokenizer(vocab_size=12), n_ctx=64, name="tiny-swa")
    assert not backend.capabilities.can_truncate
    with pytest.raises(ConfigError, match="tiny-swa.*cannot be rolled back"):
        generate(backend, NgramDrafter(1, 2), [1, 2, 3], GREEDY, max_tokens=5)
    # plain decoding works, and a new turn that shares a prefix rebuilds the cache instead of trimming it
    first = generate(backend, NoDrafter(), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], GREEDY, max_tokens=12).tokens
    again = generate(backend, NoDrafter(), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], GREEDY, max_tokens=12).tokens
    assert first == again


V, N, SAMPLES, PROMPT = 6, 3, 3000, [0, 1, 2, 1]


@pytest.mark.parametrize("kind", ["point-mass", "with-q", "draft-model"])
def test_speculative_sampling_matches_the_targets_distribution(kind):
    import itertools

    sampling = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    model, _ = build_model("qwen2", V, seed=1, scale=1.5)
    backend = MlxBackend.from_model(model, ScriptedTokenizer(vocab_size=V), n_ctx=64)
    memo = {}

    def probs(ctx):
        if ctx not in memo:
            backend.truncate(0)
            memo[ctx] = sampling.probs(backend.forward(list(ctx)).logits[-1:])[0]
        return memo[ctx]

    exact = {}
    for seq in itertools.product(range(V), repeat=N):
        p, ctx = 1.0, tuple(PROMPT)
        for t in seq:
            p, ctx = p * probs(ctx)[t], ctx + (t,)
        exact[seq] = p
    if kind == "point-mass":
        drafter = NgramDrafter(1, 2)
    elif kind == "with-q":
        drafter = DistributionDrafter(V, k=2)
    else:
        draft_model, _ = build_model("qwen2", V, seed=7, scale=1.5)
        drafter = DraftModelDrafter(
            MlxBackend.from_model(draft_model, ScriptedTokenizer(vocab_size=V), n_ctx=64), V, V, seed=2
        )
    backend.truncate(0)
    rng, counts, accepted = np.random.default_rng(3), {}, 0
    for _ in range(SAMPLES):
        out = generate(backend, drafter, PROMPT, sampling, max_tokens=N, draft_tokens=2, rng=rng)
        counts[out.tokens] = counts.get(out.tokens, 0) + 1
        accepted += out.stats.accepted
    assert accepted > 100
    assert chi_square_p(counts, exact) > 1e-3


def test_cli_runs_an_mlx_folder_and_apple_silicon_picks_mlx_for_models_with_an_mlx_source(folder, monkeypatch):
    from support.cli import assert_one_line_error, run_cli

    from localspec.config import choose_backend
    from localspec.models import hub
    from localspec.models.registry import load_registry

    result = run_cli(
        "run",
        "--json",
        "--backend",
        "mlx",
        "-m",
        str(folder),
        "--drafter",
        "ngram",
        "-t",
        "0",
        "-n",
        "16",
        "hello world",
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["stats"]["generated_tokens"] == 16
    assert_one_line_error(
        run_cli("run", "--backend", "mlx", "-m", str(folder / "config.json"), "hi"), "mlx backend loads a model folder"
    )
    entry = load_registry().get("qwen2.5-coder-1.5b")
    assert entry.mlx_repo
    monkeypatch.setattr(hub, "on_apple_silicon", lambda: True)
    assert choose_backend("qwen2.5-coder-1.5b", entry) == "mlx" and hub.default_backend(entry) == "mlx"
    assert choose_backend(str(folder), None) == "mlx"
    monkeypatch.setattr(hub, "on_apple_silicon", lambda: False)
    assert choose_backend("qwen2.5-coder-1.5b", entry) == "llama.cpp" and choose_backend(str(folder), None) == "torch"
