"""Vocabulary compatibility of a draft model with its target: scripted vocabularies, then the real GGUFs
of ../shared/models (Qwen2.5-Coder 0.5B/1.5B, SmolLM2-135M, Gemma-3-270M) when they are fetched."""

from pathlib import Path

import pytest
from support.fakes import ScriptedBackend, ScriptedTokenizer

from localspec.drafters.vocab import shared_vocab
from localspec.errors import ConfigError

MODELS = Path.home() / ".cache" / "localspec-bench-models"
QWEN15 = MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
QWEN05 = MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
GEMMA = MODELS / "gemma-3-270m-q4_k_m.gguf"


class Renamed(ScriptedTokenizer):
    def __init__(self, size, padding_from, renamed, eos):
        super().__init__(vocab_size=size)
        self.padding_from, self.renamed, self.eos_token = padding_from, renamed or {}, eos

    def token_text(self, token):
        return self.renamed.get(token, super().token_text(token))

    def is_padding(self, token):
        return self.padding_from is not None and token >= self.padding_from


def Vocab(size, padding_from=None, renamed=None, name="m", eos=None):  # noqa: N802 - reads as the model it builds
    backend = ScriptedBackend(vocab_size=size, tokenizer=Renamed(size, padding_from, renamed, eos))
    backend.model_name = name
    return backend


def test_same_vocabulary_is_shared_whole():
    assert shared_vocab(Vocab(40), Vocab(40)) == 40


def test_padding_only_size_difference_is_allowed():
    assert shared_vocab(Vocab(48, padding_from=40, name="big"), Vocab(40, name="small")) == 40


def test_real_extra_tokens_are_refused():
    with pytest.raises(ConfigError, match=r"id 40 of big is a real token"):
        shared_vocab(Vocab(48, name="big"), Vocab(40, name="small"))


def test_first_differing_token_is_named_with_both_models_and_the_known_drafts():
    with pytest.raises(ConfigError) as err:
        shared_vocab(Vocab(40, name="target"), Vocab(40, renamed={7: "zz"}, name="draft"), ["tiny-a", "tiny-b"])
    message = str(err.value)
    assert "draft" in message and "target" in message and "token 7" in message and "'zz'" in message
    assert "tiny-a, tiny-b" in message


def test_special_tokens_must_agree():
    with pytest.raises(ConfigError, match="eos token 3 vs the target's 2"):
        shared_vocab(Vocab(40, eos=2), Vocab(40, eos=3))


needs_models = pytest.mark.skipif(
    not (QWEN15.exists() and QWEN05.exists() and GEMMA.exists()),
    reason="real models not fetched: ../shared/models/fetch.sh",
)


@pytest.fixture(scope="module")
def real():
    from localspec.backends.llama_cpp.backend import LlamaCppBackend
    from localspec.models.registry import resolve_model

    paths = {"qwen1.5": QWEN15, "qwen0.5": QWEN05, "gemma": GEMMA, "smollm2": resolve_model("smollm2-135m")[1]}
    loaded = {k: LlamaCppBackend(p, n_ctx=64, n_threads=2) for k, p in paths.items()}
    yield loaded
    for b in loaded.values():
        b.close()


@pytest.mark.model
@needs_models
def test_real_qwen_pair_is_compatible(real):
    assert shared_vocab(real["qwen1.5"], real["qwen0.5"]) == 151936


@pytest.mark.model
@needs_models
@pytest.mark.parametrize(
    "draft,first_difference",
    [("smollm2", "tokenizer 'gpt2/smollm' vs the target's 'gpt2/qwen2'"), ("gemma", "tokenizer 'llama/default'")],
)
def test_real_other_families_are_refused(real, draft, first_difference):
    with pytest.raises(ConfigError) as err:
        shared_vocab(real["qwen1.5"], real[draft], ["qwen2.5-coder-0.5b"])
    message = str(err.value)
    assert first_difference in message and real[draft].model_name in message and "qwen2.5-coder-0.5b" in message
