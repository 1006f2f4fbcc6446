"""Models other apps downloaded (localspec/models/app_stores.py), on fake layouts of LM Studio's models folder,
Ollama's store and llama.cpp's caches: found, named, run with --model, reused by pull, and never changed."""

import hashlib
import json
import os
from pathlib import Path

import pytest
from support.cli import assert_one_line_error, run_cli
from support.hub import gguf_bytes, listing

from localspec.models.app_stores import Stores, found_prefix, is_model_file
from localspec.models.registry import is_path, resolve_model


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def lmstudio(home: Path, models: Path | None = None, legacy=False) -> Path:
    """An LM Studio home (new or legacy place); ``models``: a downloads folder set in settings.json."""
    app = home / (".cache/lm-studio" if legacy else ".lmstudio")
    app.mkdir(parents=True)
    if models:
        (app / "settings.json").write_text(json.dumps({"downloadsFolder": str(models), "other": 1}))
    return models or app / "models"


def ollama_model(root: Path, name: tuple[str, str, str, str], data: bytes, projector=b"") -> Path:
    """A pulled Ollama model: its blob(s) and the manifest naming them."""
    layers = []
    for media, blob in (("model", data), ("projector", projector)):
        if blob:
            digest = hashlib.sha256(blob).hexdigest()
            write(root / "blobs" / f"sha256-{digest}", blob)
            layers.append({"mediaType": f"application/vnd.ollama.image.{media}", "digest": f"sha256:{digest}"})
    layers.append({"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "0" * 64})
    manifest = {"schemaVersion": 2, "config": {"digest": "sha256:" + "1" * 64}, "layers": layers}
    write(root.joinpath("manifests", *name), json.dumps(manifest).encode())
    return root / "blobs" / f"sha256-{hashlib.sha256(data).hexdigest()}"


@pytest.fixture
def apps(tmp_path):
    """Every kind of store, in a fake home folder."""
    home = tmp_path / "home"
    models = lmstudio(home)
    write(models / "lmstudio-community/Qwen-GGUF/Qwen-Q4_K_M.gguf", gguf_bytes("qwen", padding=0))
    write(models / "lmstudio-community/Qwen-GGUF/mmproj-Qwen-f16.gguf", gguf_bytes("proj", padding=0))
    write(models / "bartowski/Big-GGUF/Big-Q4_K_M-00001-of-00002.gguf", gguf_bytes("big 1", padding=0))
    write(models / "bartowski/Big-GGUF/Big-Q4_K_M-00002-of-00002.gguf", b"rest of it")
    write(models / "too/deep/folder/x.gguf", gguf_bytes("deep", padding=0))
    store = tmp_path / "ollama"
    ollama_model(store, ("registry.ollama.ai", "library", "llama3.2", "3b"), gguf_bytes("llama", padding=0), b"PROJ")
    ollama_model(store, ("registry.ollama.ai", "someone", "tuned", "latest"), gguf_bytes("tuned", padding=0))
    ollama_model(store, ("hf.co", "test", "tiny-GGUF", "Q4"), gguf_bytes("tiny q4", padding=0))
    ollama_model(store, ("registry.ollama.ai", "library", "flux", "latest"), b"safetensors, not GGUF")
    write(store / "manifests/registry.ollama.ai/library/half/latest", b"{not json")
    odd = {"layers": [3, {"mediaType": "application/vnd.ollama.image.model", "digest": 5}]}
    write(store / "manifests/registry.ollama.ai/library/odd/latest", json.dumps(odd).encode())
    llama = tmp_path / "llama-cache"
    write(llama / "owner_Some-GGUF_some-q8.gguf", gguf_bytes("some", padding=0))
    write(
        llama / "manifest=owner=Some-GGUF=Q8_0.json", json.dumps({"ggufFile": {"rfilename": "some-q8.gguf"}}).encode()
    )
    write(llama / "unnamed.gguf", gguf_bytes("unnamed", padding=0))
    env = {"OLLAMA_MODELS": str(store), "LLAMA_CACHE": str(llama), "HF_HOME": str(tmp_path / "hf")}
    return Stores(env=env, home=home, system="linux"), env, home


def test_every_app_is_found_with_its_names(apps):
    stores, _, home = apps
    found = {m.name: m for m in stores.all()}
    assert set(found) == {
        "lmstudio:lmstudio-community/Qwen-GGUF/Qwen-Q4_K_M.gguf",
        "lmstudio:bartowski/Big-GGUF/Big-Q4_K_M-00001-of-00002.gguf",  # the first part names a split model
        "ollama:llama3.2:3b",  # library models by their short name
        "ollama:someone/tuned:latest",
        "ollama:hf.co/test/tiny-GGUF:Q4",
        "llama.cpp:owner/Some-GGUF/some-q8.gguf",  # named by its manifest
        "llama.cpp:unnamed.gguf",
    }
    qwen = found["lmstudio:lmstudio-community/Qwen-GGUF/Qwen-Q4_K_M.gguf"]
    assert (qwen.app, qwen.repo, qwen.file) == ("LM Studio", "lmstudio-community/Qwen-GGUF", "Qwen-Q4_K_M.gguf")
    llama = found["ollama:llama3.2:3b"]
    assert (
        llama.path.read_bytes().startswith(b"GGUF") and llama.path.parent.name == "blobs"
    )  # the weights, not the projector
    tiny = found["ollama:hf.co/test/tiny-GGUF:Q4"]
    assert (tiny.repo, tiny.quant) == ("test/tiny-GGUF", "Q4")
    assert stores.find("OLLAMA:Llama3.2:3B") == llama  # names ignore case, as Ollama's do
    assert stores.find("ollama:someone/tuned") == found["ollama:someone/tuned:latest"]  # no tag: latest
    assert stores.find("ollama:llama3.2") is None  # its only tag is 3b
    assert stores.holding("owner/some-gguf", "some-q8.gguf").name == "llama.cpp:owner/Some-GGUF/some-q8.gguf"
    assert stores.holding("test/tiny-GGUF", "tiny-q4.gguf", "q4") == tiny  # an hf.co pull by its quantization
    assert stores.holding("test/tiny-GGUF", "tiny-q8.gguf", "Q8") is None


def test_lm_studio_settings_pointer_and_legacy_home(tmp_path):
    home = tmp_path / "home"
    elsewhere = lmstudio(home, models=tmp_path / "D" / "models")  # "Models Directory" moved to another disk
    write(elsewhere / "pub/repo-GGUF/m.gguf", gguf_bytes("m", padding=0))
    assert [m.path for m in Stores(env={}, home=home).lmstudio()] == [elsewhere / "pub/repo-GGUF/m.gguf"]
    old = tmp_path / "old"
    models = lmstudio(old, legacy=True)
    write(models / "pub/repo-GGUF/m.gguf", gguf_bytes("m", padding=0))
    assert Stores(env={}, home=old).lmstudio_folder() == old / ".cache/lm-studio/models"
    pointed = tmp_path / "pointed"
    pointed.mkdir()
    (pointed / ".lmstudio-home-pointer").write_text(str(tmp_path / "custom-home") + "\n")
    assert Stores(env={}, home=pointed).lmstudio_folder() == tmp_path / "custom-home" / "models"


@pytest.mark.parametrize(
    "system, env, want",
    [
        ("linux", {}, ".cache/llama.cpp"),
        ("linux", {"XDG_CACHE_HOME": "XDG"}, "XDG/llama.cpp"),
        ("darwin", {}, "Library/Caches/llama.cpp"),
        ("win32", {"LOCALAPPDATA": "Local"}, "Local/llama.cpp"),
    ],
)
def test_llama_cpp_cache_folder_per_system(tmp_path, system, env, want):
    env = {k: str(tmp_path / v) for k, v in env.items()}
    assert Stores(env=env, home=tmp_path, system=system).llama_cpp_folder() == tmp_path / want


def test_ollama_folders_per_system(tmp_path):
    assert Stores(env={}, home=tmp_path, system="darwin").ollama_folders() == [tmp_path / ".ollama/models"]
    assert Path("/usr/share/ollama/.ollama/models") in Stores(env={}, home=tmp_path, system="linux").ollama_folders()


def test_a_newer_llama_cpp_cache_in_the_hub_layout(tmp_path):
    llama = tmp_path / "llama-cache"
    repo = llama / "models--owner--Mod-GGUF"
    write(repo / "refs/main", b"abc123\n")
    write(repo / "snapshots/abc123/Mod-Q4_0.gguf", gguf_bytes("mod", padding=0))
    write(repo / "snapshots/old999/Mod-Q4_0.gguf", gguf_bytes("older", padding=0))  # not what main points at
    stores = Stores(env={"LLAMA_CACHE": str(llama), "HF_HOME": str(tmp_path / "hf")}, home=tmp_path)
    (model,) = stores.all()
    assert model.name == "hf:owner/Mod-GGUF/Mod-Q4_0.gguf" and model.path.parent.name == "abc123"
    assert stores.holding("owner/Mod-GGUF", "Mod-Q4_0.gguf") == model


def test_names_are_told_apart_from_paths_and_aliases():
    assert found_prefix("ollama:llama3.2:3b") and found_prefix("lmstudio:a/b/c.gguf") and found_prefix("hf:o/r/f.gguf")
    assert not found_prefix("C:\\models\\x.gguf") and not found_prefix("smollm2-135m")
    assert not is_path("lmstudio:a/b/c.gguf") and is_path("models/x.gguf")
    assert not is_model_file("mmproj-x.gguf") and not is_model_file("x-00002-of-00003.gguf")
    assert is_model_file("x-00001-of-00003.gguf") and is_model_file("x.GGUF")


def snapshot(*roots: Path) -> dict:
    """Every file under the roots with its size and modification time."""
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for root in roots for p in root.rglob("*") if p.is_file()}


def smollm_bytes() -> bytes:
    return resolve_model("smollm2-135m")[1].read_bytes()


@pytest.mark.model
def test_run_and_list_models_of_other_apps_without_changing_them(tmp_path):
    home = tmp_path / "home"
    models = lmstudio(home)
    data = smollm_bytes()
    write(models / "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smol.Q4_1.gguf", data)
    ollama_model(tmp_path / "ollama", ("registry.ollama.ai", "library", "smollm2", "135m"), data)
    env = {"HOME": str(home), "OLLAMA_MODELS": str(tmp_path / "ollama"), "LLAMA_CACHE": str(tmp_path / "none")}
    before = snapshot(home, tmp_path / "ollama")
    listed = run_cli("list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "ollama:smollm2:135m" in listed.stdout and "lmstudio:HuggingFaceTB/SmolLM2-135M" in listed.stdout
    for name in ("ollama:smollm2:135m", "lmstudio:HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smol.Q4_1.gguf"):
        ran = run_cli("run", "--model", name, "--temperature", "0", "--max-tokens", "8", "--json", "Hi", env=env)
        assert ran.returncode == 0, ran.stderr
        assert json.loads(ran.stdout)["stats"]["generated_tokens"] > 0
    assert_one_line_error(run_cli("run", "--model", "ollama:nope:1b", "Hi", env=env), "no model 'ollama:nope:1b'")
    assert_one_line_error(run_cli("rm", "ollama:smollm2:135m", env=env), "never removes other apps' files")
    assert snapshot(home, tmp_path / "ollama") == before  # read where they are: nothing written, moved or removed


def test_pull_uses_a_file_lm_studio_already_has_instead_of_downloading(hub, tmp_path):  # noqa: F811
    home = tmp_path / "home"
    models = lmstudio(home)
    held = write(models / "test/tiny-GGUF/tiny-q4.gguf", hub.repos["test/tiny-GGUF"]["tiny-q4.gguf"])
    env = {**hub.env, "HOME": str(home), "LLAMA_CACHE": str(tmp_path / "none"), "OLLAMA_MODELS": str(tmp_path / "no")}
    before = snapshot(home)
    pulled = run_cli("pull", "tiny", "--no-drafts", env=env)
    assert pulled.returncode == 0, pulled.stderr
    assert "downloaded by LM Studio" in pulled.stderr and str(held) in pulled.stdout
    assert not any(method == "GET" and "tiny-q4" in path for method, path, _ in hub.requests)  # nothing fetched
    row = listing(type("H", (), {"env": env}))["tiny"]
    assert row["downloaded"] == [
        {
            "backend": "llama.cpp Q4",
            "path": str(held),
            "bytes": held.stat().st_size,
            "mtp_layers": 0,
            "app": "LM Studio",
        }
    ]
    config = run_cli("config", "--model", "tiny", env=env)
    assert str(held) in config.stdout  # --model tiny runs LM Studio's file
    assert_one_line_error(run_cli("rm", "tiny", env=env), "no downloaded files", "LM Studio", "leaves alone")
    assert snapshot(home) == before


def test_an_ollama_hf_pull_is_reused_by_its_quantization(hub, tmp_path):  # noqa: F811
    blob = ollama_model(tmp_path / "ollama", ("hf.co", "test", "tiny-GGUF", "Q8"), gguf_bytes("tiny q8", padding=1000))
    env = {**hub.env, "HOME": str(tmp_path / "home"), "OLLAMA_MODELS": str(tmp_path / "ollama")}
    env["LLAMA_CACHE"] = str(tmp_path / "none")
    pulled = run_cli("pull", "tiny", "--quant", "Q8", "--no-drafts", env=env)
    assert pulled.returncode == 0 and "downloaded by Ollama" in pulled.stderr and str(blob) in pulled.stdout
    assert os.path.exists(blob) and not hub.requests
