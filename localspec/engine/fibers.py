"""Generations side by side on one OS thread: each a greenlet that runs until its backend slot hands a forward
pass to the batch (Backend.slots), then the batch runs and every waiting greenlet goes on with its rows.

The generate loop needs no change for it: a slot's forward pass switches back here where a lone backend would
have called the library, so the loop's code reads the same whether it runs alone or beside others.
"""

from __future__ import annotations

from collections.abc import Callable

from greenlet import greenlet


class Fibers:
    """Greenlets started with ``start`` and driven by ``step`` until none is ``live``; ``flush`` is the slots'
    batch runner (it returns the greenlets whose passes ran)."""

    def __init__(self, flush: Callable[[], list[greenlet]]) -> None:
        self.flush = flush
        self.live: set[greenlet] = set()
        self._ready: list[tuple[greenlet, tuple]] = []

    def start(self, run: Callable, *args) -> greenlet:
        """A new greenlet for ``run(*args)``: it starts at the next step."""
        fiber = greenlet(run)
        self.live.add(fiber)
        self._ready.append((fiber, args))
        return fiber

    def step(self) -> list[greenlet]:
        """Run every greenlet that can go on until it waits for the batch or ends, then the batch: the
        greenlets that ended. An exception a greenlet raises comes out here (after the others ran)."""
        ready, self._ready = self._ready, []
        ended, error = [], None
        for fiber, args in ready:
            try:
                fiber.switch(*args)
            except Exception as exc:  # noqa: PERF203 - one fiber's error must not stop the others
                error = error or exc
            if fiber.dead:
                self.live.discard(fiber)
                ended.append(fiber)
        if not self._ready and self.live:
            self._ready = [(fiber, ()) for fiber in self.flush()]
            if not self._ready:
                raise RuntimeError("greenlets are left that wait for no batch")
        if error is not None:
            raise error
        return ended
