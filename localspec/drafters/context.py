"""What a drafter's builder is given besides its own options: the run's seed and where models are."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DrafterContext:
    seed: int | None = None
    model: str | None = None  # the target's models.toml name, for messages (None: a path)
    known_drafts: tuple[str, ...] = ()  # the draft models models.toml recommends for the target, best first
    # a model name -> its file on disk for the target's backend (the run's resolver: the one place)
    find_model: Callable[[str], str] | None = field(default=None, compare=False, repr=False)
