"""One run's settings, built once: command-line flags over the environment over models.toml over the defaults.

This is where the backend is chosen and the model's file found (once), where models.toml's drafter tables
are checked against the drafter table (the registry knows no drafter code), and where every setting's source
is recorded: `localspec config` prints them. The way a flag travels is cli -> config -> session -> drafter.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from localspec.drafters.context import DrafterContext
from localspec.drafters.table import (  # noqa: F401 - head_releases: what `pull` fetches, for the command
    DRAFTERS,
    DrafterSetup,
    chain_members,
    drafter_kind,
    head_drafters,
    head_releases,
    runs_on,
)
from localspec.errors import ConfigError, LocalspecError
from localspec.models.registry import (
    ModelEntry,
    Registry,
    load_registry,
    model_entry,
    resolve_model,
)
from localspec.options import from_table
from localspec.places import user_config_file
from localspec.sampling import SamplingParams
from localspec.structured import grammar as structured
from localspec.structured.grammar import Grammar

DEFAULT_DRAFTER = "suffix"  # when models.toml recommends none for the model
MAX_TOKENS = 512  # most tokens in one answer
CACHE_RAM_MIB = 8192  # `serve`: most RAM for saved conversation states unless --cache-ram says (llama-server's)
CACHE_RAM_SHARE = 0.25  # ... and no more than this share of the memory free once the model is loaded
DRAFT_TOKENS = "auto"
EXACT = False  # the fastest kernels; `--exact` asks for bit-identical greedy output, at a cost in speed
EXACT_ENV = "LOCALSPEC_EXACT"  # 1/true/yes or 0/false/no
USER_KEYS = {"exact": bool}  # what the user's config.toml may set
OLD_SPELLINGS = {"exact_guard": "exact"}  # config.toml keys read under their new name, with a notice


@dataclass(frozen=True)
class Settings:
    model: str  # the name shown: the alias, or the file's name
    path: Path | None  # the model's file or folder (None: not available, see `missing`)
    backend: str
    drafter: str
    drafters: DrafterSetup  # every drafter's options: any of them can be switched to mid-chat
    sampling: SamplingParams = SamplingParams()
    draft_tokens: int | str = DRAFT_TOKENS
    max_tokens: int = MAX_TOKENS
    ctx: int | None = None  # None: the model's trained context, as far as memory allows (the backend decides)
    threads: int | None = None  # None: the physical performance cores this process may use
    gpu_layers: int | None = None  # None: all layers on a GPU build of llama.cpp, none on a CPU build
    cuda_graphs: bool = True  # the torch backend's steps captured as CUDA graphs on a GPU (torch_graphs.py)
    exact: bool = EXACT  # bit-identical greedy output (batch-invariant kernels; docs/exactness.md)
    think: bool | None = None  # a reasoning model's thinking switch (enable_thinking); None: the template's default
    stop: tuple[str, ...] = ()
    seed: int | None = None
    system: str | None = None
    grammar: Grammar | None = None  # structured output: what every answer must follow (--json-schema, --grammar)
    missing: str = ""  # why the model's file could not be found
    notices: tuple[str, ...] = ()  # one line each about an old spelling that was read (the commands print them)
    rows: tuple[tuple[str, object, str], ...] = field(default=(), compare=False)  # (setting, value, source)

    def require_model(self) -> Path:
        if self.path is None:
            from localspec.errors import ModelError

            raise ModelError(self.missing)
        return self.path


def load_models(user_file: Path | None = None) -> Registry:
    """The model registry with every entry's drafter settings checked against the drafter table."""
    registry = load_registry(user_file)
    for entry in registry.models.values():
        _check_entry(entry)
    return registry


def _check_entry(entry: ModelEntry) -> None:
    here = f"{entry.where}, [models.{entry.name}]"
    for name in entry.drafters:
        try:
            chain_members(name)
        except ConfigError as exc:
            raise ConfigError(f"{here}: 'drafters' lists {name!r}: {exc}") from None
    tables = [name for name, kind in DRAFTERS.items() if kind.head or any(i.toml for i in kind.option_infos())]
    for name, table in entry.drafter_tables.items():
        if name not in tables:
            raise ConfigError(f"{here}: unknown key {name!r} (drafter tables: {', '.join(tables)})")
        kind, where = drafter_kind(name), f"{entry.where}, [models.{entry.name}.{name}]"
        for backend, repo in table.items():
            if _is_head_key(kind, backend) and not isinstance(repo, str):
                raise ConfigError(f"{where}: {backend!r} must be a str (the repo of its head), got {repo!r}")
        from_table(kind.options(), _options_table(kind, table), name, where)


def _is_head_key(kind, key: str) -> bool:
    """A head drafter's table names its head per backend: ``"llama.cpp" = REPO``."""
    return kind.head and key in kind.backends


def _options_table(kind, table: dict) -> dict:
    """A models.toml drafter table's options (without a head drafter's heads)."""
    return {key: value for key, value in table.items() if not _is_head_key(kind, key)}


def choose_backend(spec: str | None, entry: ModelEntry | None) -> str:
    """MLX on Apple silicon for an alias with an MLX source (or a model folder); a folder elsewhere goes to
    torch; everything else to llama.cpp."""
    from localspec.models.hub import default_backend, on_apple_silicon

    if entry is not None:
        return default_backend(entry)
    if spec and Path(spec).expanduser().is_dir():
        return "mlx" if on_apple_silicon() else "torch"
    return "llama.cpp"


class _Rows:
    """Picks each setting from the first source that has it and records which one it was."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, object, str]] = []

    def pick(self, name: str, *candidates: tuple[object, str]):
        for value, source in candidates:
            if value is not None:
                self.rows.append((name, value, source))
                return value
        self.rows.append((name, None, candidates[-1][1] if candidates else "default"))
        return None


def settings_from_args(args, registry: Registry | None = None) -> Settings:
    """The run's settings from parsed command-line arguments (apps/cli/), models.toml and the defaults."""
    registry = registry or load_models()
    rows = _Rows()
    flag = _flags(args)
    user, notices = user_config()
    spec = rows.pick("model", (flag("model"), "flag"), (registry.default, "models.toml (default)"))
    entry = model_entry(spec, registry)
    backend = rows.pick("backend", (flag("backend"), "flag"), (choose_backend(spec, entry), "default"))
    name, path, missing = _find(spec, registry, backend)
    shown = path if path is not None else f"(not available: {missing})"
    rows.rows.append(("path", shown, "models.toml" if entry else "flag"))
    # the model's first recommended drafter that runs on the backend (mtp, say, not on MLX)
    recommended = next((d for d in (entry.drafters if entry else ()) if runs_on(d, backend)), None)
    drafter = rows.pick(
        "drafter", (flag("drafter"), "flag"), (recommended, "models.toml"), (DEFAULT_DRAFTER, "default")
    )
    chain_members(drafter)  # an unknown name fails before the (slow) model load
    setup = _drafter_setup(args, entry, registry, backend, rows)
    temperature_default = 0.0 if getattr(args, "command", "") == "bench" else SamplingParams.temperature
    sampling = SamplingParams(
        rows.pick("temperature", (flag("temperature"), "flag"), (temperature_default, "default")),
        rows.pick("top_k", (flag("top_k"), "flag"), (SamplingParams.top_k, "default")),
        rows.pick("top_p", (flag("top_p"), "flag"), (SamplingParams.top_p, "default")),
        rows.pick("min_p", (flag("min_p"), "flag"), (SamplingParams.min_p, "default")),
    )
    return Settings(
        name,
        path,
        backend,
        drafter,
        setup,
        sampling,
        draft_tokens=rows.pick("draft_tokens", (flag("draft_tokens"), "flag"), (DRAFT_TOKENS, "default")),
        max_tokens=rows.pick("max_tokens", (flag("max_tokens"), "flag"), (MAX_TOKENS, "default")),
        ctx=rows.pick("ctx", (flag("ctx"), "flag"), (None, "default (trained, as memory allows)")),
        threads=rows.pick("threads", (flag("threads"), "flag"), (None, "default (physical cores)")),
        gpu_layers=rows.pick("gpu_layers", (flag("gpu_layers"), "flag"), (None, "default")),
        cuda_graphs=rows.pick("cuda_graphs", (False if flag("no_cuda_graphs") else None, "flag"), (True, "default")),
        exact=rows.pick(
            "exact",
            (flag("exact"), "flag"),
            (_env_bool(EXACT_ENV), f"environment ({EXACT_ENV})"),
            (user.get("exact"), f"config ({user_config_file()})"),
            (entry.exact if entry else None, "models.toml"),
            (EXACT, "default"),
        ),
        think=rows.pick("think", (flag("think"), "flag"), (None, "default (the chat template's)")),
        stop=tuple(rows.pick("stop", (flag("stop") or None, "flag"), ((), "default"))),
        seed=rows.pick("seed", (flag("seed"), "flag"), (None, "default (random)")),
        system=rows.pick("system", (flag("system"), "flag"), (None, "default (none)")),
        grammar=_grammar(flag),
        missing=missing,
        notices=tuple(notices + _old_flags(flag)),
        rows=tuple(rows.rows + _environment_rows()),
    )


def _grammar(flag) -> Grammar | None:
    """--json-schema or --grammar, read and checked before the model loads."""
    if flag("json_schema"):
        return structured.from_option(flag("json_schema"), "--json-schema")
    if flag("grammar"):
        return structured.from_option(flag("grammar"), "--grammar")
    return None


def _old_flags(flag) -> list[str]:
    if flag("no_exact_guard"):
        return ["--no-exact-guard is the default now; `--exact` asks for bit-identical greedy output"]
    return []


def _env_bool(name: str) -> bool | None:
    text = os.environ.get(name, "").strip().lower()
    if not text:
        return None
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={os.environ[name]!r}: give 1/true/yes or 0/false/no")


def user_config(path: Path | None = None) -> tuple[dict, list[str]]:
    """The user's config.toml (places.user_config_file): its settings, and a notice per old spelling read."""
    import tomllib

    path = path or user_config_file()
    if not path.is_file():
        return {}, []
    try:
        table = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: not a readable TOML file ({exc}); fix it or remove it") from None
    settings, notices = {}, []
    for key, value in table.items():
        new = OLD_SPELLINGS.get(key)
        if new is not None:
            notices.append(f"{path}: {key!r} is now spelled {new!r} (read as {new} = {str(value).lower()})")
            key = new
        if key not in USER_KEYS:
            raise ConfigError(f"{path}: unknown key {key!r} (allowed: {', '.join(USER_KEYS)})")
        if not isinstance(value, USER_KEYS[key]):
            raise ConfigError(f"{path}: {key!r} must be {USER_KEYS[key].__name__}, got {value!r}")
        settings[key] = value
    return settings, notices


def _flags(args):
    def flag(name: str):
        return getattr(args, name, None)

    return flag


def _find(spec: str, registry: Registry, backend: str) -> tuple[str, Path | None, str]:
    try:
        name, path = resolve_model(spec, registry, backend=backend)
        return name, path, ""
    except LocalspecError as exc:
        return spec, None, str(exc)


def _drafter_setup(args, entry: ModelEntry | None, registry: Registry, backend: str, rows: _Rows) -> DrafterSetup:
    """Every drafter's options: its flags over the model's [models.NAME.DRAFTER] table over its defaults."""

    @cache
    def find_model(spec: str) -> str:
        return str(resolve_model(spec, registry, backend=backend)[1])

    known = entry.drafts if entry else ()
    models_toml = {
        ("draft", "model"): known[0] if known else None,
        **{(d, "head"): entry.head(d, backend) if entry else None for d in head_drafters()},
        ("mtp", "assistant"): entry.assistant.get(backend) if entry else None,
    }
    options = {}
    for name, kind in DRAFTERS.items():
        if kind.options is not None:
            options[name] = _options_of(args, kind, entry, models_toml, find_model, rows)
    context = DrafterContext(
        seed=getattr(args, "seed", None), model=entry.name if entry else None, known_drafts=known, find_model=find_model
    )
    return DrafterSetup(options, context)


def _options_of(args, kind, entry: ModelEntry | None, models_toml: dict, find_model, rows: _Rows):
    """One drafter's options: each from its flag, else the model's table in models.toml, else the default."""
    table = _options_table(kind, entry.drafter_tables.get(kind.name, {})) if entry else {}
    where = f"{entry.where}, [models.{entry.name}.{kind.name}]" if entry else ""
    from_toml = from_table(kind.options(), table, kind.name, where)
    values, flags = {}, []
    for info in kind.option_infos():
        given = getattr(args, info.dest, None) if info.flag else None
        if given is not None:
            flags.append(info.flag)
        if given is not None and (kind.name, info.name) == ("draft", "model"):
            given = find_model(given)  # a draft named on the command line must exist: say so before loading
        toml = getattr(from_toml, info.name) if info.name in table else models_toml.get((kind.name, info.name))
        values[info.name] = rows.pick(
            f"{kind.name}.{info.name}", (given, "flag"), (toml, "models.toml"), (info.default, "default")
        )
    try:
        return kind.options(**values)
    except ConfigError as exc:
        raise ConfigError(f"{exc} (given by {', '.join(flags) or where})") from None


def _environment_rows() -> list[tuple[str, object, str]]:
    """The files and folders localspec reads and writes, and the variables that move them."""
    from localspec.cost_cache import cache_disabled
    from localspec.drafters.suffix.tree import implementation
    from localspec.places import place, user_models_file

    def source(*names: str) -> str:
        given = [n for n in names if os.environ.get(n)]
        return f"environment ({given[0]})" if given else "default"

    models_file, config_file = user_models_file(), user_config_file()
    models_source = source("LOCALSPEC_MODELS") if os.environ.get("LOCALSPEC_MODELS") else place("config").source
    data, cache = place("data"), place("cache")
    trie = implementation()
    return [
        ("models_file", models_file if models_file.is_file() else f"{models_file} (none)", models_source),
        ("config_file", config_file if config_file.is_file() else f"{config_file} (none)", place("config").source),
        ("data_dir", data.path, data.source),
        ("cache_dir", cache.path, cache.source),
        ("cost_cache", "off" if cache_disabled() else "on", source("LOCALSPEC_NO_COST_CACHE")),
        ("suffix_trie", trie, "compiled extension" if trie == "C" else "pure-Python fallback: no compiled extension"),
        ("hf_cache", _hf_cache(), source("HF_HUB_CACHE", "HF_HOME")),
    ]


def _hf_cache() -> str:
    try:
        from huggingface_hub import constants

        return constants.HF_HUB_CACHE
    except ImportError:
        return "(huggingface_hub not installed)"
