"""The engine thread: it owns the Session (llama.cpp must always be called from the same OS thread) and
runs one generation at a time, first come first served.

A request waits in a bounded queue (`Busy` beyond it: the server answers 503). The asyncio side gets the
answer's pieces through a `Job`: each piece is handed over with ``loop.call_soon_threadsafe``. A job whose
client left while it waited is dropped without running; one whose client leaves mid-answer stops at the
next step (closing the engine's generator rolls its cache back).
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from localspec.apps.server.metrics import Metrics
from localspec.apps.server.replies import token_logprobs
from localspec.session import Session

QUEUE_LIMIT = 16  # requests waiting for the engine; more are refused with 503 and Retry-After
# after an answer, this long without a request and the live conversation's state is saved where the request left
# the one before it (Session.idle, PromptStates.keep_live): an editor's next completion comes later than this
IDLE_S = 0.25


class Busy(Exception):
    pass


@dataclass
class Piece:
    text: str = ""
    tokens: int = 0
    done: bool = False
    finish: str | None = None
    record: dict | None = None  # the turn's figures (TurnStats.to_dict), with the last piece
    error: Exception | None = None
    logprobs: list[dict] | None = None  # the piece's tokens' log-probabilities (replies.token_logprobs), if asked


@dataclass(eq=False)
class Job:
    """One generation: ``work(session)`` returns the engine's event stream; pieces go to ``out``."""

    work: Callable[[Session], object]
    loop: asyncio.AbstractEventLoop
    out: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    queued_at: float = field(default_factory=time.perf_counter)
    shape: object = None  # the answer's shape (shaping.Shape), set on the engine thread before its first piece

    def send(self, piece: Piece) -> None:
        self.loop.call_soon_threadsafe(self.out.put_nowait, piece)


class Worker:
    def __init__(self, open_session: Callable[[], Session], metrics: Metrics, queue_limit: int = QUEUE_LIMIT):
        self._open, self.metrics, self.queue_limit = open_session, metrics, queue_limit
        self._jobs: queue.Queue[Job | None] = queue.Queue()
        self._waiting = 0
        self._lock = threading.Lock()
        self._loaded = threading.Event()
        self.session: Session | None = None
        self.card: dict = {}  # the model's figures for /v1/models, read on this thread once it loaded
        self.load_error: Exception | None = None
        self._running: set[Job] = set()  # touched by the engine thread; read by stop()
        self._idle_due = False  # an answer ended since the last idle save (engine thread)
        self._thread = threading.Thread(target=self._run, name="localspec-engine", daemon=True)

    def start(self) -> None:
        """Start the thread and wait for the model to load; raises what the load raised."""
        self._thread.start()
        self._loaded.wait()
        if self.load_error is not None:
            raise self.load_error

    def submit(self, job: Job) -> None:
        with self._lock:
            if self._waiting >= self.queue_limit:
                raise Busy
            self._waiting += 1
            self.metrics.queued(self._waiting)
        self._jobs.put(job)

    def stop(self) -> None:
        """Cancel what waits and runs, and close the session (it saves its caches)."""
        self.cancel_all()
        self._jobs.put(None)
        self._thread.join(timeout=30)

    def cancel_all(self) -> None:
        """Drop what waits, stop what runs at its next step (SIGTERM: before the HTTP side shuts down)."""
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancelled.set()
                job.send(Piece(done=True, finish="cancelled"))
        for job in list(self._running):
            job.cancelled.set()

    def _run(self) -> None:
        try:
            self.session = self._open()
            self.card = self.session.text.model_card()
        except Exception as exc:  # a missing or broken model: the server does not start
            self.load_error = exc
            self._loaded.set()
            return
        self._loaded.set()
        try:
            while (job := self._next()) is not None:
                if not self._take(job):
                    continue
                self._running.add(job)
                try:
                    self._generate(job, self.session)
                finally:
                    self._running.discard(job)
                self._idle_due = True
        finally:
            self.session.close()

    def _next(self) -> Job | None:
        """The next job; after an answer, one IDLE_S without a job first saves the conversation (Session.idle)."""
        if self._idle_due:
            self._idle_due = False
            try:
                return self._jobs.get(timeout=IDLE_S)
            except queue.Empty:
                try:
                    self.session.idle()
                except Exception as exc:  # a copy llama.cpp refused: the next request prefills what it needs
                    print(f"localspec: the conversation's state was not saved: {exc}", file=sys.stderr)
        return self._jobs.get()

    def _take(self, job: Job) -> bool:
        """A job leaves the queue: whether it is still wanted (its client may have left while it waited)."""
        with self._lock:
            self._waiting -= 1
            self.metrics.queued(self._waiting)
        return not job.cancelled.is_set()

    def _generate(self, job: Job, session: Session) -> None:
        events, last = None, None
        try:
            events = job.work(session)
            for event in events:
                last = event
                scores = None if event.logprobs is None else token_logprobs(event.logprobs, session)
                job.send(Piece(event.text, len(event.tokens), logprobs=scores))
                if job.cancelled.is_set():
                    break
        except Exception as exc:  # a bad request (context overflow) or a bug: the client is told, the server goes on
            job.send(Piece(done=True, error=exc))
            return
        except BaseException as exc:  # a compiled library's panic (pyo3's PanicException is no Exception)
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            error = RuntimeError(f"{type(exc).__name__}: {exc}")
            error.__cause__ = exc  # its traceback goes into the server's log with it
            job.send(Piece(done=True, error=error))
            return
        finally:
            if events is not None:
                events.close()  # rolls the cache back when the client left early
        record = last.stats.to_dict() if last is not None else {}
        record["drafter_name"] = record.get("method") or session.drafter.name  # grammar+suffix under a grammar
        finish = "cancelled" if job.cancelled.is_set() else (last.finish_reason if last else "length")
        self.metrics.answered(record, time.perf_counter() - job.queued_at)
        job.send(Piece(done=True, finish=finish, record=record))
