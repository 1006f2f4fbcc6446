"""The torch backend checks device memory before it puts anything there (backends/torch/memory.py),
here on a faked small device: a context cut to what fits, said in the load report, or a refusal naming
the memory needed and the backend that fits, never an allocation failure."""

import pytest

torch = pytest.importorskip("torch")

from localspec.backends.torch import memory as torch_memory  # noqa: E402
from localspec.errors import ModelError  # noqa: E402


def backend_with_free(monkeypatch, free: int | None, n_ctx: int = 2048):
    from support.eagle_heads import DEEP
    from support.fakes import ScriptedTokenizer

    from localspec.backends.torch.backend import TorchBackend
    from localspec.backends.torch.decoder import Decoder

    monkeypatch.setattr(torch_memory, "free_bytes", lambda device: free)
    torch.manual_seed(0)
    model = Decoder(DEEP)
    return TorchBackend.from_decoder(model, ScriptedTokenizer(vocab_size=DEEP.vocab_size), n_ctx=n_ctx), model


def kv_per_token(model):
    cfg = model.cfg
    return 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * 4  # keys and values, float32


def test_a_device_with_room_gets_the_asked_context(monkeypatch):
    backend, _ = backend_with_free(monkeypatch, 80 * 2**30)
    assert backend.n_ctx == 2048 and backend.info.placement == "cpu float32"
    backend, _ = backend_with_free(monkeypatch, None)  # the CPU: nothing to check
    assert backend.n_ctx == 2048


def test_a_small_device_gets_the_context_that_fits_and_the_report_says_so(monkeypatch):
    _, model = backend_with_free(monkeypatch, None)
    # a model built on its device already: only the KV cache still has to fit
    backend, _ = backend_with_free(monkeypatch, torch_memory.RESERVE_MIN + 1000 * kv_per_token(model) + 10)
    assert backend.n_ctx == 768 and backend.model.k_cache.shape[1] == 768
    assert "context 768 tokens of the 2048 asked" in backend.info.placement
    from localspec.drafters.base import NoDrafter
    from localspec.sampling import SamplingParams
    from localspec.session import Session

    session = Session(backend, NoDrafter(), SamplingParams(temperature=0), "tiny", max_tokens=4)
    assert "context 768 tokens of the 2048 asked" in session.load_report()


def test_weights_that_do_not_fit_are_refused_with_the_figures_and_what_to_run(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch_memory, "free_bytes", lambda device: 12 * 10**9)  # a 12 GB card, an 8B bf16 model
    with pytest.raises(ModelError) as err:
        torch_memory.fit_context(cuda, "Llama-3.1-8B", 16 * 10**9, 131072, 8192)
    message = str(err.value)
    assert "Llama-3.1-8B needs 16.1 GB on cuda" in message and "12.0 GB is free" in message
    assert "--backend llama.cpp" in message
    # weights that fit with a context that does not: the context that fits, said
    assert torch_memory.fit_context(cuda, "m", 4 * 10**9, 131072, 131072)[0] == 52736


def test_a_kv_cache_too_small_for_any_chat_is_refused_by_the_backend(monkeypatch):
    _, model = backend_with_free(monkeypatch, None)
    with pytest.raises(ModelError, match="GB is free"):
        backend_with_free(monkeypatch, torch_memory.RESERVE_MIN + 100 * kv_per_token(model))
