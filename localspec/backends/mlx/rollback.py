"""Rolling back a hybrid model's cache on MLX (Qwen3.5/3-Next: Gated DeltaNet layers beside attention).

mlx-lm keeps such a layer's state in an ArraysCache (a convolution window and a recurrent state) that cannot
be trimmed by position. But mlx arrays are never changed in place: a step puts new arrays into the cache, so
keeping the list of arrays a cache held is a free snapshot. Snapshots are taken before every model call,
where the engine has cached a turn's prompt (a new turn whose prompt re-renders the previous answer, as templates that
drop its reasoning do, goes back there) and where ``checkpoint`` pins one (a draft model's drafts); a cut to
position ``keep`` trims the attention caches back to the latest snapshot at or before ``keep``, puts its
states back, and runs the kept tokens after it again. A cut before every snapshot (a new chat that diverges
early) rebuilds the cache.
"""

from __future__ import annotations


def recurrent_caches(cache) -> list | None:
    """The caches of ``cache`` that hold a recurrent state, when every other one trims by position; None
    when some cache can be neither trimmed nor snapshotted (or there is no recurrent state)."""
    from mlx_lm.models.cache import ArraysCache

    arrays = [c for c in cache if isinstance(c, ArraysCache)]
    if not arrays or not all(c.is_trimmable() for c in cache if not isinstance(c, ArraysCache)):
        return None
    return arrays


class Snapshots:
    """The latest snapshot before a model call, where a prompt was cached, and one pinned by ``checkpoint``:
    each (cached length, states)."""

    def __init__(self, arrays: list) -> None:
        self.arrays = arrays
        self.last = self.prompt = self.pinned = None

    def _take(self, n: int):
        return n, [list(c.cache) for c in self.arrays]

    def before_call(self, n: int) -> None:
        self.last = self._take(n)

    def pin(self, n: int) -> None:
        self.pinned = self._take(n)

    def after_prefill(self, n: int) -> None:
        self.prompt = self._take(n)

    def restore(self, keep: int) -> int | None:
        """Put back the states of the latest snapshot at or before ``keep``: its cached length (the caller
        trims the attention caches to it and replays the rest), or None when there is none."""
        usable = [s for s in (self.last, self.prompt, self.pinned) if s is not None and s[0] <= keep]
        if not usable:
            return None
        n, states = max(usable, key=lambda s: s[0])
        for cache, state in zip(self.arrays, states, strict=True):
            cache.cache = list(state)
        self.last, self.prompt, self.pinned = (
            s if s is not None and s[0] <= n else None for s in (self.last, self.prompt, self.pinned)
        )
        return n
