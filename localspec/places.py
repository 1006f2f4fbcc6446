"""Where localspec keeps its files on Linux, macOS and Windows.

Each folder is, first of these that applies: its LOCALSPEC_ variable; the XDG variable, where the user set
one (on any system); a folder an older localspec made in the Linux-style place under the home folder, on
macOS and Windows (so a user's chats and caches are never left behind by an upgrade); the system's own
convention:

- data (chats, local models): ~/.local/share/localspec; macOS ~/Library/Application Support/localspec;
  Windows %LOCALAPPDATA%/localspec
- cache (suffix cache, cost curves): ~/.cache/localspec; macOS ~/Library/Caches/localspec; Windows
  %LOCALAPPDATA%/localspec/Cache
- config (models.toml): ~/.config/localspec; macOS ~/Library/Application Support/localspec; Windows
  %APPDATA%/localspec
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

APP = "localspec"
# kind -> (localspec's variable, the XDG variable, the Linux-style base under the home folder)
KINDS = {
    "data": ("LOCALSPEC_DATA", "XDG_DATA_HOME", (".local", "share")),
    "cache": ("LOCALSPEC_CACHE", "XDG_CACHE_HOME", (".cache",)),
    "config": ("LOCALSPEC_CONFIG", "XDG_CONFIG_HOME", (".config",)),
}


@dataclass(frozen=True)
class Place:
    path: Path
    source: str  # what chose it, for `localspec config`


def _system_folder(kind: str, system: str, env: Mapping[str, str], home: Path) -> Path:
    if system == "darwin":
        return home / "Library" / ("Caches" if kind == "cache" else "Application Support") / APP
    if system == "win32":
        local = Path(env.get("LOCALAPPDATA") or home / "AppData" / "Local")
        if kind == "config":
            return Path(env.get("APPDATA") or home / "AppData" / "Roaming") / APP
        return local / APP / "Cache" if kind == "cache" else local / APP
    return home.joinpath(*KINDS[kind][2], APP)


def place(
    kind: str, env: Mapping[str, str] | None = None, system: str | None = None, home: Path | None = None
) -> Place:
    """The folder of ``kind`` (data, cache or config) and why; ``env``, ``system`` (sys.platform's value)
    and ``home`` default to this process's, and tests fake them. Returns a Place."""
    env = os.environ if env is None else env
    system = system or sys.platform
    home = home or Path(os.path.expanduser("~"))
    own, xdg, linux_base = KINDS[kind]
    if env.get(own):
        return Place(Path(env[own]), f"environment ({own})")
    if env.get(xdg):
        return Place(Path(env[xdg]) / APP, f"environment ({xdg})")
    if system in ("darwin", "win32"):
        legacy = home.joinpath(*linux_base, APP)
        if legacy.is_dir():
            return Place(legacy, "an existing folder of an older localspec")
    return Place(_system_folder(kind, system, env, home), "default")


def data_dir() -> Path:
    """Chats and registered local models."""
    return place("data").path


def cache_root() -> Path:
    """The suffix cache, cost curves, converted heads: all of it can be rebuilt."""
    return place("cache").path


def user_config_file() -> Path:
    """The user's settings (config.toml in the config folder: `exact = true`, ...)."""
    return place("config").path / "config.toml"


def user_models_file() -> Path:
    """The user's models.toml: $LOCALSPEC_MODELS, else models.toml in the config folder."""
    return Path(os.environ.get("LOCALSPEC_MODELS") or place("config").path / "models.toml")
