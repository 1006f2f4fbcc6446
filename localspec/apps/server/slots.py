"""`serve --parallel N`: N requests answered at once, their forward passes batched together.

The engine thread loads the model once and splits it into N sessions over slots of it (localspec/slots.py). A
request takes a free slot and runs as a greenlet on the engine thread (engine/fibers.py): every step of every
running request goes into one batch. A request that finds every slot busy waits in the queue, in arrival
order; a bad request, an overflow or a disconnect ends that request alone. A freed slot is reused last-in
first-out, so a client's next turn usually finds its conversation still in that slot's cache.
"""

from __future__ import annotations

import queue

from localspec.apps.server.worker import Worker
from localspec.session import Session
from localspec.slots import slot_sessions


class SlotWorker(Worker):
    """The engine thread of `serve --parallel N` (see the module doc)."""

    def __init__(self, open_session, metrics, queue_limit: int, parallel: int) -> None:
        super().__init__(open_session, metrics, queue_limit)
        self.parallel = parallel
        self.slots: list[Session] = []

    def _run(self) -> None:
        try:
            self.session = self._open()
            self.card = self.session.text.model_card()
            self.slots, fibers = slot_sessions(self.session, self.parallel)
        except Exception as exc:  # the server does not start: it says why
            if self.session is not None:
                self.session.close()
            self.load_error = exc
            self._loaded.set()
            return
        self._loaded.set()
        free, stopping = list(self.slots), False
        try:
            while fibers.live or not stopping:
                while free and not stopping:
                    try:
                        job = self._jobs.get(block=not fibers.live)
                    except queue.Empty:
                        break
                    if job is None:
                        stopping = True
                        break
                    if self._take(job):
                        fibers.start(self._answer, job, free.pop(), free)  # the slot freed last: its cache is warm
                if fibers.live:
                    fibers.step()
        finally:
            for slot in self.slots:
                slot.close()
            self.session.close()

    def _answer(self, job, slot: Session, free: list[Session]) -> None:
        self._running.add(job)
        try:
            self._generate(job, slot)
        finally:
            self._running.discard(job)
            free.append(slot)
