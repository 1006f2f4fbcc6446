"""Drafter names -> drafter objects."""
from __future__ import annotations

from localspec.drafters.base import Drafter, NoDrafter
from localspec.errors import ConfigError

DRAFTERS = ("none", "ngram")


def make_drafter(name: str, *, ngram_min: int = 2, ngram_max: int = 4) -> Drafter:
    if name == "none":
        return NoDrafter()
    if name == "ngram":
        from localspec.drafters.ngram import NgramDrafter
        return NgramDrafter(ngram_min, ngram_max)
    raise ConfigError(f"unknown drafter {name!r}; choose one of: {', '.join(DRAFTERS)}")
