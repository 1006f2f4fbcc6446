"""Drafter names -> drafter objects."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from localspec.backends.base import Backend
from localspec.drafters.base import Drafter, NoDrafter
from localspec.errors import ConfigError

DRAFTERS = ("none", "ngram", "suffix")


@dataclass(frozen=True)
class DrafterOptions:
    ngram_min: int = 2
    ngram_max: int = 4
    suffix: dict = field(default_factory=dict)  # SuffixParams fields
    suffix_cache_dir: Optional[str] = None


def check_drafter_name(name: str) -> None:
    if name not in DRAFTERS:
        raise ConfigError(f"unknown drafter {name!r}; choose one of: {', '.join(DRAFTERS)}")


def make_drafter(name: str, backend: Optional[Backend] = None,
                 options: DrafterOptions = DrafterOptions()) -> Drafter:
    check_drafter_name(name)
    if name == "none":
        return NoDrafter()
    if name == "ngram":
        from localspec.drafters.ngram import NgramDrafter
        return NgramDrafter(options.ngram_min, options.ngram_max)
    # the suffix drafter
    from localspec.drafters.suffix import SuffixDrafter, SuffixParams
    from localspec.drafters.suffix_store import AnswerStore
    params = SuffixParams(**options.suffix)
    store = None
    if backend is not None and params.cache_tokens > 0:
        directory = Path(options.suffix_cache_dir) if options.suffix_cache_dir else None
        store = AnswerStore.for_tokenizer(backend.tokenizer_key(), params.cache_tokens, directory)
    return SuffixDrafter(params, store)
