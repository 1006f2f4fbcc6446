"""`localspec pull | list | rm`: models in the standard Hugging Face cache, through huggingface-hub.

Files go where every Hugging Face tool looks ($HF_HOME/hub, ~/.cache/huggingface/hub by default), so what
other tools downloaded is reused and what localspec downloads is theirs too. A download shows a progress
bar, resumes after a dropped connection (huggingface-hub retries with a Range request), and is checked
against the Hub's size and sha256 (the ETag of a large file) before it is kept. A GGUF that LM Studio,
Ollama or llama.cpp already downloaded is used where it is instead (app_stores.py).
"""

from __future__ import annotations

import hashlib
import platform
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from localspec.errors import ConfigError, LocalspecError, ModelError
from localspec.models.app_stores import Stores, found_prefix
from localspec.models.registry import (
    ModelEntry,
    Registry,
    gguf_on_disk,
    hf_cached,
    load_registry,
    local_file,
)

SHA256 = re.compile(r"^[0-9a-f]{64}$")


class HubError(LocalspecError):
    """A download failed: offline, missing repo or file, or a checksum mismatch."""


@dataclass(frozen=True)
class HeadRelease:
    """How a drafter's heads are published (its row of the drafter table says): the files to fetch for a target
    backend, and for llama.cpp the conversion of a release that has no GGUF (None: it needs none)."""

    files: Callable[[str], tuple[str, ...]]
    to_gguf: Callable[[Path, Path], Path] | None = None


@dataclass(frozen=True)
class Pulled:
    name: str
    backend: str
    path: Path
    size: int


def on_apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


def cpu_only() -> bool:
    """Whether llama.cpp here runs on the CPU alone: a build without GPU offload, not on Apple silicon
    (False where llama-cpp-python is not installed: nothing to tell)."""
    if on_apple_silicon():
        return False
    try:
        from localspec.backends.llama_cpp.capi import load_lib

        return not load_lib().llama_supports_gpu_offload()
    except ConfigError:
        return False


def default_backend(entry: ModelEntry) -> str:
    """MLX on Apple silicon when the model has an MLX source, torch when it has nothing else, else llama.cpp."""
    if on_apple_silicon() and entry.mlx_repo:
        return "mlx"
    return "llama.cpp" if "llama.cpp" in entry.sources() or not entry.torch_repo else "torch"


def pull(
    name: str,
    backend: str | None = None,
    quant: str | None = None,
    revision: str | None = None,
    drafts: bool = True,
    registry: Registry | None = None,
    say=print,
    heads: Mapping[str, HeadRelease] | None = None,
    advice: Callable[[list[str], str | None, str], list[str]] | None = None,
) -> list[Pulled]:
    """Download an alias (and, unless drafts=False, its recommended draft model and the heads models.toml names
    for the drafters of ``heads``); ``advice``: which quantization speculates best here, said first on a CPU."""
    registry = registry or load_registry()
    entry = registry.get(name)
    backend = backend or default_backend(entry)
    if backend not in entry.sources():
        raise ConfigError(
            f"model {name!r} has no {backend} source in models.toml (sources: {', '.join(entry.sources())})"
        )
    if backend == "llama.cpp" and len(entry.gguf_files) > 1:
        for line in _quant_advice(entry, quant, advice):
            say(line)
    done = [_pull_one(entry, backend, quant, revision, say)]
    if drafts:
        for draft in entry.drafts[:1]:
            d = registry.get(draft)
            if backend in d.sources():
                done.append(_pull_one(d, backend, None, None, say))
        for drafter, release in (heads or {}).items():
            head = entry.head(drafter, backend)
            if head:
                done.append(_pull_head(entry, drafter, release, head, backend, done[0].path, say))
        assistant = entry.assistant_file(backend)
        if assistant:
            repo, file = assistant
            say(f"MTP assistant {repo}/{file}")
            path = download_file(repo, file)
            done.append(Pulled(f"{entry.name} mtp assistant", backend, path, path.stat().st_size))
    return done


def _quant_advice(entry: ModelEntry, quant: str | None, advice) -> list[str]:
    """The advice (bench/quants.py's) on a CPU-only machine; a pull goes on without it whatever goes wrong there
    (a llama-cpp-python that does not load, a damaged file of measurements)."""
    try:
        if advice is None or not cpu_only():
            return []
        return advice(list(entry.gguf_files), quant or entry.gguf_quant, entry.name)
    except Exception:  # the advice is optional; the download is what was asked for
        return []


def _pull_head(
    entry: ModelEntry, drafter: str, release: HeadRelease, repo: str, backend: str, target: Path, say
) -> Pulled:
    """A drafter's head, as its release says: EAGLE heads come as one GGUF for llama.cpp and as safetensors or
    pytorch_model.bin otherwise, DFlash/DSpark heads as safetensors, which a llama.cpp target gets converted
    into localspec's cache here (once), so the first chat does not wait for it."""
    say(f"{drafter} head {repo}")
    folder = _snapshot(repo, None, say, release.files(backend))
    if backend == "llama.cpp" and release.to_gguf is not None and not list(folder.glob("*.gguf")):
        converted = release.to_gguf(folder, target)
        say(f"{drafter} head converted for llama.cpp: {converted}")
        return Pulled(f"{entry.name} {drafter}", backend, converted, converted.stat().st_size)
    return Pulled(f"{entry.name} {drafter}", backend, folder, 0)


def _pull_one(entry: ModelEntry, backend: str, quant: str | None, revision: str | None, say) -> Pulled:
    if backend == "llama.cpp":
        if entry.path or (entry.embedded and not entry.gguf_repo):
            from localspec.models.registry import resolve_model

            path = resolve_model(entry.name)[1]
            say(f"{entry.name}: {path} (already on disk)")
            return Pulled(entry.name, backend, path, path.stat().st_size)
        file = entry.gguf_file(quant)
        say(f"{entry.name}: {entry.gguf_repo}/{file}")
        on_disk = None if revision else gguf_on_disk(entry, quant)
        if on_disk and on_disk[1]:  # another app's file; one in the HF cache is checked by download_file
            path, app = on_disk
            say(f"{entry.name}: already on disk, downloaded by {app}: {path} (used where it is)")
            return Pulled(entry.name, backend, path, path.stat().st_size)
        path = download_file(entry.gguf_repo, file, revision)
        return Pulled(entry.name, backend, path, path.stat().st_size)
    repo = entry.mlx_repo if backend == "mlx" else entry.torch_repo
    say(f"{entry.name}: {repo} ({backend})")
    path = _snapshot(repo, revision, say)
    return Pulled(entry.name, backend, path, sum(f.stat().st_size for f in path.rglob("*") if f.is_file()))


def download_file(repo: str, filename: str, revision: str | None = None) -> Path:
    """One file into the HF cache, verified; a bad download is removed, never kept."""
    hf = _hf()
    cached = hf_cached(repo, filename) if revision is None else None
    if cached is not None and hf.constants.HF_HUB_OFFLINE:
        return cached  # offline: what is downloaded is what there is (it was verified when it came)
    try:
        meta = hf.get_hf_file_metadata(hf.hf_hub_url(repo, filename, revision=revision))
        path = Path(hf.hf_hub_download(repo, filename, revision=revision, tqdm_class=_progress_class()))
    except Exception as exc:  # huggingface-hub raises many kinds; each is turned into one clear line
        raise _explain(exc, repo, filename) from exc
    _verify(path, meta.size, meta.etag, repo, filename)
    return path


def _snapshot(repo: str, revision: str | None, say, weights=("*.safetensors",)) -> Path:
    """A model repository's weights, config and tokenizer (not its README, images or other formats)."""
    hf = _hf()
    try:
        folder = Path(
            hf.snapshot_download(
                repo,
                revision=revision,
                tqdm_class=_progress_class(),
                allow_patterns=["*.json", "*.txt", "*.model", "tokenizer*", *weights],
            )
        )
        listing = (
            []
            if hf.constants.HF_HUB_OFFLINE
            else list(hf.HfApi().list_repo_tree(repo, revision=revision, recursive=True))
        )
    except Exception as exc:
        raise _explain(exc, repo, None) from exc
    for item in listing:  # large files carry their sha256: check each one that came
        local = folder / getattr(item, "path", "")
        lfs = getattr(item, "lfs", None)
        if lfs is not None and local.is_file():
            _verify(local, lfs.size, lfs.sha256, repo, item.path)
    return folder


def _verify(path: Path, size: int | None, etag: str | None, repo: str, filename: str) -> None:
    problem = None
    if size is not None and path.stat().st_size != size:
        problem = f"{path.stat().st_size} bytes instead of {size}"
    elif etag and SHA256.match(etag):
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != etag:
            problem = f"sha256 {digest.hexdigest()[:12]}… instead of {etag[:12]}…"
    if problem:
        _remove_cached(path)
        raise HubError(
            f"{repo}/{filename} arrived damaged ({problem}); the bad file was removed — run the same pull again"
        )


def _remove_cached(path: Path) -> None:
    """Remove a file from the HF cache: its snapshot link and the blob behind it."""
    blob = path.resolve()
    path.unlink(missing_ok=True)
    if blob != path:
        blob.unlink(missing_ok=True)


def _explain(exc: Exception, repo: str, filename: str | None) -> LocalspecError:
    kind = type(exc).__name__
    what = f"{repo}/{filename}" if filename else repo
    if "Offline" in kind or "LocalEntryNotFound" in kind or "Connect" in kind or "Timeout" in kind:
        return HubError(
            f"cannot download {what}: offline or the Hub is unreachable ({kind}); models already "
            f"downloaded keep working — `localspec list` shows them"
        )
    if "GatedRepo" in kind:
        return _gated(exc, repo)
    if "RepositoryNotFound" in kind:
        return HubError(f"the Hub has no repository {repo} (or it needs a login: hf auth login); check models.toml")
    if "EntryNotFound" in kind or "RevisionNotFound" in kind:
        return HubError(f"the Hub repository {repo} has no {filename or 'such revision'}; check models.toml")
    return HubError(f"downloading {what} failed: {kind}: {exc}")


def _gated(exc: Exception, repo: str) -> HubError:
    """A gated repository (Gemma, Llama): without a token the user must log in; with one, accept the terms."""
    page = f"https://huggingface.co/{repo}"
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if status == 403:
        return HubError(
            f"{repo} is gated and your Hugging Face token has no access to it yet: accept its terms at {page} "
            f"(logged in as the token's user), then pull again"
        )
    return HubError(
        f"{repo} is gated: accept its terms at {page}, then give a token of that account in HF_TOKEN "
        f"(or run `hf auth login`) and pull again"
    )


def _progress_class():
    """A plain tqdm bar: huggingface-hub's own hides itself when stderr is not a terminal, and a pull
    should show its progress in a log too."""
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm


def _hf():
    try:
        import huggingface_hub
    except ImportError as exc:
        raise HubError("huggingface-hub is not installed: pip install huggingface-hub") from exc
    return huggingface_hub


# -- local files -----------------------------------------------------------------------------------------
def register_local(path: Path, name: str, registry: Registry | None = None) -> ModelEntry:
    """`pull FILE.gguf --name NAME`: check the file is GGUF, then keep an alias for it."""
    from localspec.backends.gguf_meta import describe
    from localspec.fileio import atomic_write

    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise ModelError(f"{path} not found")
    info = describe(path)  # ModelError if it is not valid GGUF
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ConfigError(f"--name {name!r}: use letters, digits, '.', '_' and '-'")
    registry = registry or load_registry()
    if name in registry.models and not registry.models[name].path:
        raise ConfigError(f"{name!r} is a models.toml model already; pick another --name")
    entries = _read_local()
    entries[name] = {
        "path": str(path),
        "description": f"{info['name']} (local file)",
        "family": info["architecture"],
        "tokenizer": info["tokenizer"],
        **({"context": int(info["context"])} if info["context"] else {}),
        "drafters": ["suffix", "ngram"],
    }
    target = local_file()
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(target, _to_toml(entries).encode())
    return load_registry().get(name)


def unregister_local(name: str) -> bool:
    from localspec.fileio import atomic_write

    entries = _read_local()
    if entries.pop(name, None) is None:
        return False
    atomic_write(local_file(), _to_toml(entries).encode())
    return True


def _read_local() -> dict:
    import tomllib

    path = local_file()
    if not path.is_file():
        return {}
    return dict(tomllib.loads(path.read_text(encoding="utf-8")).get("models", {}))


def _to_toml(entries: dict) -> str:
    import json

    lines = ["# Local model files registered by `localspec pull FILE.gguf --name NAME`; managed by localspec."]
    for name, fields in entries.items():
        lines.append(f"\n[models.{json.dumps(name)}]")
        for key, value in fields.items():
            lines.append(f"{key} = {json.dumps(value)}")  # JSON strings, ints and lists are valid TOML
    return "\n".join(lines) + "\n"


# -- list and rm -----------------------------------------------------------------------------------------
def listing(registry: Registry | None = None) -> list[dict]:
    """A row per models.toml name (what of it is on disk, in the HF cache or another app's files), then a
    row per model found in another app's files that no name covers (``app`` says whose)."""
    registry = registry or load_registry()
    stores = Stores()
    rows, shown = [], set()
    for name, entry in sorted(registry.models.items()):
        on_disk = [(backend, path, None) for backend, path in _local_files(entry)]
        for quant in entry.gguf_files if entry.gguf_repo else ():
            hit = gguf_on_disk(entry, quant, stores)
            if hit:
                on_disk.append((f"llama.cpp {quant}", *hit))
        assistant = entry.assistant_file()
        found = assistant and hf_cached(*assistant)
        if found:
            on_disk.append(("llama.cpp mtp assistant", found, None))
        downloaded = [_disk_row(backend, path, app) for backend, path, app in on_disk]
        shown |= {Path(d["path"]) for d in downloaded}
        mtp = any(d["mtp_layers"] for d in downloaded) and "mtp" not in entry.drafters
        rows.append(
            {
                "name": name,
                "description": entry.description,
                "sources": entry.sources(),
                "downloaded": downloaded,
                "drafters": list(entry.drafters) + (["mtp"] if mtp else []),
                "drafts": registry.compatible_drafts(name),
            }
        )
    for model in stores.all():
        if model.path not in shown:
            disk = _disk_row("llama.cpp", model.path, model.app)
            rows.append(
                {
                    "name": model.name,
                    "description": f"found in {model.app}'s files (read-only)",
                    "sources": [model.app],
                    "downloaded": [disk],
                    "drafters": ["mtp"] if disk["mtp_layers"] else [],
                    "drafts": [],
                    "app": model.app,
                }
            )
    return rows


def _local_files(entry: ModelEntry) -> list[tuple[str, Path]]:
    """A registered local file, or the embedded package's file."""
    if entry.path:
        return [("llama.cpp", Path(entry.path))]
    if entry.embedded:
        from localspec.models.registry import package_file

        package, _, file = entry.embedded.partition("/")
        found = package_file(package, file)
        if found:
            return [("llama.cpp", found)]
    return []


def _disk_row(backend: str, path: Path, app: str | None) -> dict:
    row = {"backend": backend, "path": str(path), "bytes": path.stat().st_size if path.exists() else 0}
    row["mtp_layers"] = _mtp(path)
    if app:
        row["app"] = app  # another app's file: localspec reads it and never removes it
    return row


def _mtp(path: Path) -> int:
    """MTP layers of a downloaded GGUF (0 for anything unreadable: `list` lists, it does not judge)."""
    from localspec.backends.gguf_meta import mtp_layers

    try:
        return mtp_layers(path)
    except (ModelError, OSError):
        return 0


def remove(name: str, registry: Registry | None = None) -> list[str]:
    """Free the disk a model takes in the HF cache (all its quantizations); a local file's alias is
    forgotten (the file itself is the user's and stays)."""
    if found_prefix(name):
        model = Stores().find(name)
        where = f"{model.app}'s file {model.path}" if model else f"{name.partition(':')[0]}'s file"
        raise ModelError(f"{name} is {where}: localspec never removes other apps' files; remove it with that app")
    registry = registry or load_registry()
    entry = registry.get(name)
    if entry.path:
        unregister_local(name)
        return [f"forgot the alias {name} (the file {entry.path} stays)"]
    removed = []
    files = [(entry.gguf_repo, file) for file in entry.gguf_files.values()]
    assistant = entry.assistant_file()  # its own MTP drafter, of no use without it
    for repo, file in files + ([assistant] if assistant else []):
        found = hf_cached(repo, file)
        if found:
            size = found.stat().st_size
            _remove_cached(found)
            removed.append(f"removed {repo}/{file} ({size / 2**20:.0f} MB)")
    if not removed:
        hint = " (it is installed as a Python package: pip uninstall it)" if entry.embedded else ""
        stores = Stores()
        for quant in entry.gguf_files if entry.gguf_repo else ():
            hit = gguf_on_disk(entry, quant, stores)  # none is in the HF cache any more: another app's
            if hit:
                hint = f" (it runs from {hit[1]}'s file {hit[0]}, which localspec leaves alone)"
        raise ModelError(f"model {name!r} has no downloaded files in the Hugging Face cache{hint}")
    return removed
