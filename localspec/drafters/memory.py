"""What drafters keep across requests, shared between the slots of `serve --parallel` (one memory, not N)."""

from __future__ import annotations

from localspec.drafters.base import Drafter
from localspec.drafters.chain import ChainDrafter
from localspec.drafters.suffix.drafter import SuffixDrafter


def share_memory(drafter: Drafter, other: Drafter) -> None:
    """Make ``drafter`` keep across requests what ``other`` (another slot's drafter, built alike) keeps instead
    of a copy of its own: the suffix drafter's past answers, in a chain too. Others keep nothing across requests."""
    if isinstance(drafter, ChainDrafter) and isinstance(other, ChainDrafter):
        share_memory(drafter.copy, other.copy)
        share_memory(drafter.model, other.model)
    elif isinstance(drafter, SuffixDrafter) and isinstance(other, SuffixDrafter):
        drafter.share(other)
