"""GGUF models other apps already downloaded: LM Studio's models folder, Ollama's store, llama.cpp's `-hf`
downloads (its old flat cache, and the Hugging Face cache layout it has used since 2026). localspec reads
them where they are — never copies, moves or deletes them — so `list` shows them, `--model NAME` runs
them, and `pull` of a models.toml name whose file one of them holds uses that file instead of downloading.

Where each app keeps its files (read from the apps' own code and docs):
- LM Studio: its home is named by ``~/.lmstudio-home-pointer``, else ``~/.cache/lm-studio`` (older
  versions), else ``~/.lmstudio``; models in ``settings.json``'s ``downloadsFolder``, else ``HOME/models``,
  as ``publisher/repo/file.gguf`` (exactly two folders deep).
- Ollama: ``$OLLAMA_MODELS``, else ``~/.ollama/models`` (also the Linux service's
  ``/usr/share/ollama/.ollama/models``); ``manifests/HOST/NAMESPACE/MODEL/TAG`` are JSON manifests whose
  ``application/vnd.ollama.image.model`` layer names the weights' blob, ``blobs/sha256-HEX``. A model
  pulled from ``hf.co/OWNER/REPO:QUANT`` is known by its Hugging Face repo and quantization.
- llama.cpp: ``$LLAMA_CACHE``, else ``~/.cache/llama.cpp`` (``$XDG_CACHE_HOME``; macOS
  ``~/Library/Caches/llama.cpp``, Windows ``%LOCALAPPDATA%/llama.cpp``) with files ``OWNER_REPO_FILE`` and
  ``manifest=OWNER=REPO=TAG.json`` naming them; newer builds download into the Hugging Face cache
  (``$LLAMA_CACHE`` itself when set), which is read as ``models--OWNER--REPO/snapshots/COMMIT/FILE``.

Projector (``mmproj``) files and the later parts of split GGUFs (``-00002-of-00003``) are not models of
their own; llama.cpp loads the other parts of a split model from the first one's path.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

APPS = ("lmstudio", "ollama", "llama.cpp", "hf")  # the name prefixes: lmstudio:publisher/repo/file.gguf, ...
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
OLLAMA_HOST, OLLAMA_HF_HOSTS = "registry.ollama.ai", ("hf.co", "huggingface.co")


@dataclass(frozen=True)
class FoundModel:
    name: str  # how --model names it: "lmstudio:publisher/repo/file.gguf", "ollama:qwen2.5:1.5b", ...
    app: str  # who downloaded it, for people: "LM Studio", "Ollama", "llama.cpp", "Hugging Face cache"
    path: Path
    repo: str | None = None  # the Hugging Face repo it came from, where the app's layout says
    file: str | None = None  # its file name in that repo, where known
    quant: str | None = None  # the quantization tag an Ollama hf.co pull named

    @property
    def size(self) -> int:
        try:
            return self.path.stat().st_size
        except OSError:
            return 0


def is_model_file(name: str) -> bool:
    """A GGUF that is a model of its own: not a projector, not a later part of a split model."""
    split = _SPLIT.search(name)
    return name.lower().endswith(".gguf") and "mmproj" not in name.lower() and (not split or int(split[1]) == 1)


class Stores:
    """Where to look; ``env``, ``home`` and ``system`` default to this process's (tests give fake ones)."""

    def __init__(self, env: Mapping[str, str] | None = None, home: Path | None = None, system: str | None = None):
        self.env = os.environ if env is None else env
        self.home = home or Path(os.path.expanduser("~"))
        self.system = system or sys.platform
        self._found: list[FoundModel] | None = None

    def all(self) -> list[FoundModel]:
        """Every model found, each app's in name order, scanned once per Stores; a store that cannot be read
        is skipped, whatever is wrong in it (another app's files must never stop localspec)."""
        if self._found is None:
            found: dict[Path, FoundModel] = {}
            for scan in (self.lmstudio, self.ollama, self.llama_cpp, self.hf_cache):
                try:
                    models = sorted(scan(), key=lambda m: m.name)
                except Exception:  # a damaged store of another app: leave it out
                    continue
                for model in models:
                    found.setdefault(model.path, model)  # the same file seen twice: the first app's name
            self._found = list(found.values())
        return self._found

    def find(self, name: str) -> FoundModel | None:
        """The model ``--model name`` means (names are compared ignoring case; an Ollama name without a tag
        means its ``latest``, as in Ollama), None if none is found."""
        wanted = {name.lower()}
        if name.lower().startswith("ollama:") and ":" not in name.split(":", 1)[1].rsplit("/", 1)[-1]:
            wanted.add(f"{name}:latest".lower())
        return next((m for m in self.all() if m.name.lower() in wanted), None)

    def holding(self, repo: str, file: str, quant: str | None = None) -> FoundModel | None:
        """A model some app downloaded from Hugging Face repo ``repo``, file ``file`` (an Ollama hf.co
        pull: by its quantization tag), or None."""
        for m in self.all():
            if (m.repo or "").lower() != repo.lower():
                continue
            if m.file == file or (m.file is None and quant and (m.quant or "").lower() == quant.lower()):
                return m
        return None

    # -- LM Studio -----------------------------------------------------------------------------------------
    def lmstudio_folder(self) -> Path:
        pointer = self.home / ".lmstudio-home-pointer"
        if pointer.is_file():
            home = Path(pointer.read_text(encoding="utf-8").strip())
        elif (self.home / ".cache" / "lm-studio").is_dir():
            home = self.home / ".cache" / "lm-studio"
        else:
            home = self.home / ".lmstudio"
        try:
            folder = json.loads((home / "settings.json").read_text(encoding="utf-8")).get("downloadsFolder")
        except (OSError, ValueError, AttributeError):
            folder = None
        return Path(folder) if isinstance(folder, str) and folder else home / "models"

    def lmstudio(self) -> Iterator[FoundModel]:
        for path in self.lmstudio_folder().glob("*/*/*.gguf"):
            if is_model_file(path.name):
                repo = f"{path.parent.parent.name}/{path.parent.name}"
                yield FoundModel(f"lmstudio:{repo}/{path.name}", "LM Studio", path, repo, path.name)

    # -- Ollama --------------------------------------------------------------------------------------------
    def ollama_folders(self) -> list[Path]:
        if self.env.get("OLLAMA_MODELS"):
            return [Path(self.env["OLLAMA_MODELS"])]
        folders = [self.home / ".ollama" / "models"]
        if self.system.startswith("linux"):
            folders.append(Path("/usr/share/ollama/.ollama/models"))  # the systemd service's user
        return folders

    def ollama(self) -> Iterator[FoundModel]:
        for root in self.ollama_folders():
            for manifest in root.glob("manifests/*/*/*/*"):
                model = _ollama_model(root, manifest)
                if model is not None:
                    yield model

    # -- llama.cpp and the Hugging Face cache -----------------------------------------------------------------
    def llama_cpp_folder(self) -> Path:
        if self.env.get("LLAMA_CACHE"):
            return Path(self.env["LLAMA_CACHE"])
        if self.system == "darwin":
            return self.home / "Library" / "Caches" / "llama.cpp"
        if self.system == "win32":
            return Path(self.env.get("LOCALAPPDATA") or self.home / "AppData" / "Local") / "llama.cpp"
        return Path(self.env.get("XDG_CACHE_HOME") or self.home / ".cache") / "llama.cpp"

    def llama_cpp(self) -> Iterator[FoundModel]:
        """The old flat cache: files named by their manifests where there are some, else by file name."""
        folder = self.llama_cpp_folder()
        named: dict[Path, tuple[str, str]] = {}
        for manifest in folder.glob("manifest=*.json"):
            parts = manifest.stem.split("=")
            try:
                rfile = json.loads(manifest.read_text(encoding="utf-8"))["ggufFile"]["rfilename"]
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if len(parts) >= 3 and isinstance(rfile, str):
                repo = f"{parts[1]}/{parts[2]}"
                named[folder / f"{parts[1]}_{parts[2]}_{rfile.replace('/', '_')}"] = (repo, rfile)
        for path in folder.glob("*.gguf"):
            if is_model_file(path.name):
                repo, file = named.get(path, (None, None))
                name = f"llama.cpp:{repo}/{file}" if repo else f"llama.cpp:{path.name}"
                yield FoundModel(name, "llama.cpp", path, repo, file)

    def hf_cache_folders(self) -> list[Path]:
        folders = [_hf_hub_cache(self.env, self.home)]
        llama = self.llama_cpp_folder()
        if any(llama.glob("models--*")):  # a newer llama.cpp downloads into LLAMA_CACHE in the hub's layout
            folders.append(llama)
        return folders

    def hf_cache(self) -> Iterator[FoundModel]:
        for root in self.hf_cache_folders():
            for repo_dir in root.glob("models--*--*"):
                snapshot = _hf_snapshot(repo_dir)
                if snapshot is None:
                    continue
                repo = repo_dir.name.removeprefix("models--").replace("--", "/", 1)
                for path in sorted(snapshot.rglob("*.gguf")):
                    if is_model_file(path.name):
                        file = path.relative_to(snapshot).as_posix()
                        yield FoundModel(f"hf:{repo}/{file}", "Hugging Face cache", path, repo, file)


def _ollama_model(root: Path, manifest: Path) -> FoundModel | None:
    """The model a manifest names, if its weights are a GGUF blob that is there."""
    host, namespace, model, tag = manifest.relative_to(root / "manifests").parts
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8"))["layers"]
        digest = next(
            layer["digest"]
            for layer in layers
            if isinstance(layer, dict) and layer.get("mediaType") == OLLAMA_MODEL_LAYER
        )
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None
    if not isinstance(digest, str) or not re.fullmatch(r"sha256[:-][0-9a-fA-F]{64}", digest):
        return None
    blob = next((b for b in (root / "blobs" / digest.replace(":", "-"), root / "blobs" / digest) if b.is_file()), None)
    if blob is None or not is_gguf(blob):
        return None  # not pulled whole, or a safetensors model
    if host.lower() != OLLAMA_HOST:
        shown = f"{host}/{namespace}/{model}:{tag}"
    elif namespace.lower() != "library":
        shown = f"{namespace}/{model}:{tag}"
    else:
        shown = f"{model}:{tag}"
    repo = f"{namespace}/{model}" if host.lower() in OLLAMA_HF_HOSTS else None
    return FoundModel(f"ollama:{shown}", "Ollama", blob, repo, None, tag if repo else None)


def is_gguf(path: Path) -> bool:
    """A file that starts as a GGUF does (an Ollama blob has no .gguf name)."""
    try:
        with path.open("rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False


def _hf_hub_cache(env: Mapping[str, str], home: Path) -> Path:
    """The Hugging Face hub cache as huggingface-hub and llama.cpp find it."""
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if env.get(key):
            return Path(env[key])
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]) / "hub"
    return Path(env.get("XDG_CACHE_HOME") or home / ".cache") / "huggingface" / "hub"


def _hf_snapshot(repo_dir: Path) -> Path | None:
    """The snapshot folder the repo's main ref points at (else its only one)."""
    ref = repo_dir / "refs" / "main"
    if ref.is_file():
        snapshot = repo_dir / "snapshots" / ref.read_text(encoding="utf-8").strip()
        return snapshot if snapshot.is_dir() else None
    snapshots = [p for p in (repo_dir / "snapshots").glob("*") if p.is_dir()]
    return snapshots[0] if len(snapshots) == 1 else None


def found_prefix(spec: str) -> bool:
    """Whether ``spec`` names a model in another app's store (``ollama:...`` and the like)."""
    app, sep, _ = spec.partition(":")
    return bool(sep) and app.lower() in APPS
