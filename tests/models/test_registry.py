import pytest

from localspec.config import load_models
from localspec.errors import ConfigError, ModelError
from localspec.models.registry import load_registry, resolve_model


def write(tmp_path, text):
    path = tmp_path / "models.toml"
    path.write_text(text)
    return path


def test_builtin_registry_has_the_default_model():
    registry = load_registry(user_file=None)
    assert registry.default == "smollm2-135m"
    assert registry.get("qwen2.5-coder-1.5b").gguf_file().endswith("q4_k_m.gguf")
    for name in (
        "llama3-8b",
        "qwen2.5-7b",
        "qwen2.5-coder-7b",
        "qwen2.5-coder-1.5b",
        "qwen2.5-coder-0.5b",
        "smollm2-135m",
        "smollm2-360m",
        "smollm2-1.7b",
        "gemma-3-270m",
        "gemma-3-1b",
        "gemma-3-4b",
    ):
        entry = registry.get(name)
        assert entry.gguf_repo and entry.mlx_repo and entry.torch_repo and entry.tokenizer, name
    llama = registry.get("llama3-8b")
    assert (
        llama.drafts == ("llama3.2-1b",) and llama.head("eagle", "torch") and llama.gguf_file("Q8_0").endswith(".gguf")
    )
    assert "qwen2.5-coder-0.5b" in registry.compatible_drafts("qwen2.5-coder-7b")
    assert "smollm2-135m" not in registry.compatible_drafts("qwen2.5-coder-7b")
    from localspec.models.hub import default_backend

    mimo = registry.get("mimo-7b-rl")  # torch only: its MTP layer runs there
    assert mimo.sources() == ["torch"] and default_backend(mimo) == "torch" and mimo.drafters[0] == "suffix+mtp"
    assert default_backend(registry.get("qwen2.5-coder-1.5b")) in ("llama.cpp", "mlx")
    qwen35 = registry.get("qwen3.5-4b")  # a hybrid model with an MTP layer: a chain with its own MTP drafter
    assert qwen35.drafters[0] == "suffix+mtp" and qwen35.gguf_file().endswith(".gguf") and not qwen35.drafts
    for name in ("qwen3.5-2b", "qwen3.5-9b", "gemma-4-e2b", "gemma-4-e4b"):  # hybrid with MTP, or with an assistant
        assert registry.get(name).sources() == ["llama.cpp", "mlx"] and "mtp" in registry.get(name).drafters, name
    gemma = registry.get("gemma-4-e2b")  # its assistant sits in the target's repo
    assert gemma.assistant_file("llama.cpp") == (gemma.gguf_repo, "mtp-gemma-4-E2B-it-Q8_0.gguf")


def test_user_file_adds_models(tmp_path):
    path = write(
        tmp_path, '[models.mine]\nfamily = "x"\n[models.mine.gguf]\nrepo = "me/r"\nfiles = { Q4 = "m.gguf" }\n'
    )
    registry = load_registry(user_file=path)
    assert registry.get("mine").gguf_repo == "me/r" and "smollm2-135m" in registry.models


@pytest.mark.parametrize(
    "text, needles",
    [
        ("[models.a]\nembedded = 'p/f.gguf'\ncolour = 'red'\n", ["[models.a]", "'colour'"]),
        ("[models.a]\nembedded = 'p/f.gguf'\ncontext = 'long'\n", ["'context'", "int"]),
        ("[models.a]\nembedded = 'p/f.gguf'\ncontext = -5\n", ["'context'", "positive"]),
        ("[models.a]\n[models.a.gguf]\nrepo = 'r'\n", ["[models.a.gguf]", "'files'"]),
        ("[models.a]\n[models.a.gguf]\nrepo = 'r'\nfiles = { Q4 = 'a.bin' }\n", ["[models.a.gguf]", ".gguf"]),
        ("[models.a]\n[models.a.gguf]\nrepo = 'r'\nquant = 'Q8'\nfiles = { Q4 = 'a.gguf' }\n", ["'quant'", "Q8"]),
        ("[models.a]\nembedded = 'p/f.gguf'\n[models.a.mlx]\nrepos = 'x'\n", ["[models.a.mlx]", "'repos'"]),
        ("[models.a]\nembedded = 'p/f.gguf'\n[models.a.eagle]\nllama = 'x'\n", ["[models.a.eagle]", "'llama'"]),
        (
            "[models.a]\nembedded = 'p/f.gguf'\n[models.a.mtp]\n'llama.cpp' = 'o/r'\n",
            ["[models.a.mtp]", "owner/repo/file"],
        ),
        ("[models.a]\nembedded = 'p/f.gguf'\n[models.a.mtp]\ntorch = 'o/r/a.gguf'\n", ["[models.a.mtp]", "'torch'"]),
        ("[models.a]\nembedded = 'p/f.gguf'\ndrafters = ['magic']\n", ["'drafters'", "'magic'"]),
        ("[models.a]\nembedded = 'p/f.gguf'\ndrafters = ['mtp+suffix']\n", ["'drafters'", "COPY+MODEL"]),
        ("[models.a]\nembedded = 'p/f.gguf'\n[models.a.ngram]\nmin = 5\nmax = 2\n", ["[models.a.ngram]", "min"]),
        ("[models.a]\nembedded = 'p/f.gguf'\n[models.a.sufix]\nmax_depth = 8\n", ["[models.a]", "'sufix'"]),
        ("[models.a]\nembedded = 'p/f.gguf'\n[models.a.suffix]\ndepth = 8\n", ["[models.a.suffix]", "'depth'"]),
        ("[models.a]\nembedded = 'p/f.gguf'\n[models.a.suffix]\nmax_depth = 'x'\n", ["'max_depth'", "int"]),
        ("[models.a]\nembedded = 'p/f.gguf'\n[models.a.suffix]\nmax_depth = 2\n", ["[models.a.suffix]", "at least 4"]),
        ("[models.a]\nembedded = 'p/f.gguf'\n[models.a.draft]\nmodel = 'x'\n", ["[models.a]", "'draft'"]),
        ("[models.a]\nfamily = 'x'\n", ["needs a source"]),
        ("default = 'nothing'\n", ["default", "nothing"]),
        ("models = [\n", ["not valid TOML"]),
        ("colour = 1\n", ["top-level key 'colour'"]),
    ],
)
def test_malformed_files_name_file_table_and_key(tmp_path, text, needles):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_models(user_file=path)
    assert str(path) in str(exc.value) or "default" in str(exc.value)
    for needle in needles:
        assert needle in str(exc.value)


def test_paths_pass_through_and_unknown_aliases_are_errors(tmp_path):
    assert resolve_model(str(tmp_path / "x.gguf"))[1] == tmp_path / "x.gguf"
    with pytest.raises(ConfigError, match="unknown model"):
        resolve_model("no-such-model")


def test_registered_but_missing_model_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(ModelError, match="not downloaded"):
        resolve_model("qwen2.5-coder-0.5b")
