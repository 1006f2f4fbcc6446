"""The HTTP side: Starlette routes over the engine thread (worker.py).

Starlette is a small, well-kept ASGI toolkit with streaming responses and a test story; uvicorn serves it.
FastAPI would add pydantic models, but every field here is checked by hand anyway (requests.py) so that each
refusal names the field and says what to send instead.

Security: loopback by default; on loopback without an API key, a Host header other than localhost,
127.0.0.1 or [::1] is refused (DNS rebinding); with a key every /v1 route and /metrics needs
`Authorization: Bearer KEY`; bodies over 8 MiB are refused; no CORS headers unless asked for.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
from dataclasses import replace

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from localspec.apps.server import replies
from localspec.apps.server.errors import ApiError, bad_request
from localspec.apps.server.requests import Generation, parse_chat, parse_completion, parse_infill
from localspec.apps.server.shaping import Shape, chat_prompt
from localspec.apps.server.worker import Busy, Job, Piece, Worker
from localspec.errors import ContextOverflow, LocalspecError
from localspec.session import Session

BODY_LIMIT = 8 * 2**20
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")


class Server:
    def __init__(self, worker: Worker, model: str, api_key: str | None = None, loopback: bool = True, log=None) -> None:
        self.worker, self.model, self.api_key, self.loopback = worker, model, api_key, loopback
        self.log = log or (lambda line: print(line, file=sys.stderr, flush=True))
        self.names = {model}  # model names requests sent; each new one is logged once
        self.created = int(time.time())

    # -- checks every request passes -----------------------------------------------------------------------
    def check(self, request: HttpRequest, needs_key: bool = True) -> None:
        host = request.headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if self.loopback and not self.api_key and name not in LOCAL_HOSTS:
            raise ApiError(403, f"Host {host!r} is not this machine; the server answers localhost only", None)
        if needs_key and self.api_key:
            given = request.headers.get("authorization", "")
            if given != f"Bearer {self.api_key}":
                raise ApiError(401, "missing or wrong API key: send Authorization: Bearer KEY", None, "auth_error")

    async def body(self, request: HttpRequest):
        if int(request.headers.get("content-length") or 0) > BODY_LIMIT:
            raise ApiError(413, f"the request body is over {BODY_LIMIT // 2**20} MiB")
        data = bytearray()
        async for part in request.stream():
            data += part
            if len(data) > BODY_LIMIT:
                raise ApiError(413, f"the request body is over {BODY_LIMIT // 2**20} MiB")
        try:
            return json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise bad_request(f"the request body is not JSON: {exc}") from None

    def answer_as(self, name: str | None) -> str:
        """The name the reply carries: clients pick their own (`openai/NAME`, a preset, `gpt-4o`), and whatever
        they send is answered by the served model, as llama-server does; the first request under a new name
        is logged."""
        if not name:
            return self.model
        if name not in self.names:
            self.names.add(name)
            self.log(f"requests for model {name!r} are answered by {self.model!r}")
        return name

    # -- routes --------------------------------------------------------------------------------------------
    async def health(self, request: HttpRequest) -> Response:
        self.check(request, needs_key=False)
        return JSONResponse({"status": "ok", "model": self.model})

    async def models(self, request: HttpRequest) -> Response:
        self.check(request)
        session = self.worker.session
        model = {"id": self.model, "object": "model", "created": self.created, "owned_by": "localspec",
                 "meta": self.worker.card, "drafter": session.drafter.name if session else None}  # fmt: skip
        return JSONResponse({"object": "list", "data": [model]})

    async def metrics(self, request: HttpRequest) -> Response:
        self.check(request)
        return PlainTextResponse(self.worker.metrics.text(), media_type="text/plain; version=0.0.4")

    async def chat(self, request: HttpRequest) -> Response:
        self.check(request)
        return await self._generate(request, parse_chat(await self.body(request)), chat=True)

    async def completions(self, request: HttpRequest) -> Response:
        self.check(request)
        return await self._generate(request, parse_completion(await self.body(request)), chat=False)

    async def infill(self, request: HttpRequest) -> Response:
        self.check(request)
        return await self._generate(request, parse_infill(await self.body(request)), chat=False)

    async def _generate(self, request: HttpRequest, gen: Generation, chat: bool) -> Response:
        name = self.answer_as(gen.model)
        job = Job(lambda session: _events(session, gen, job), asyncio.get_running_loop())
        try:
            self.worker.submit(job)
        except Busy:
            raise ApiError(503, "the server is busy: too many requests are waiting", None, "server_busy") from None
        rid = replies.new_id("chatcmpl" if chat else "cmpl")
        first = await _next(request, job)
        if first is None:
            return Response(status_code=499)  # the client left while it waited
        if first.error is not None:
            raise _api_error(first.error)
        if gen.stream:
            sse = (_native_sse(job, first, name) if gen.native else
                   self._sse(request, job, first, gen, rid, name, chat))  # fmt: skip
            return StreamingResponse(sse, media_type="text/event-stream")
        return await self._whole(request, job, first, gen, rid, name, chat)

    async def _whole(self, request, job: Job, piece: Piece, gen: Generation, rid: str, name: str, chat: bool):
        parts, scores = [], [] if gen.request.logprobs is not None else None
        while not piece.done:
            parts.append(piece.text)
            if scores is not None:
                scores += piece.logprobs or []
            piece = await _next(request, job)
            if piece is None:
                return Response(status_code=499)  # the client left: its generation stopped
        if piece.error is not None:
            raise _api_error(piece.error)
        text, record = "".join(parts), piece.record or {}
        if gen.native:
            return JSONResponse(replies.native_reply(name, text, piece.finish, record))
        if not chat:
            return JSONResponse(replies.completion_reply(rid, name, text, piece.finish, record, scores))
        message, called = job.shape.message(text)
        if gen.one_call and called:
            message["tool_calls"] = message["tool_calls"][:1]
        finish = replies.chat_finish(piece.finish, called)
        return JSONResponse(replies.chat_reply(rid, name, message, finish, record, scores))

    async def _sse(self, request, job: Job, piece: Piece, gen: Generation, rid: str, name: str, chat: bool):
        splitter = job.shape.splitter() if chat else None
        scores = _Scores(chat) if gen.request.logprobs is not None else None
        try:
            yield _data(replies.chunk(rid, name, chat, first=True))
            while not piece.done:
                if scores is not None:
                    scores.add(piece.logprobs)
                for delta in splitter.push(piece.text) if chat else [{"text": piece.text}] * bool(piece.text):
                    if _kept(delta, gen):
                        yield _data(replies.chunk(rid, name, chat, delta, logprobs=scores and scores.take()))
                piece = await job.out.get()  # a client that leaves closes this generator (finally below)
            if piece.error is not None:
                yield _data(_api_error(piece.error).body())
                return
            for delta in splitter.finish() if chat else []:
                if _kept(delta, gen):
                    yield _data(replies.chunk(rid, name, chat, delta, logprobs=scores and scores.take()))
            record = piece.record or {}
            finish = replies.chat_finish(piece.finish, chat and splitter.called)
            last = replies.chunk(rid, name, chat, finish=finish, logprobs=scores and scores.take())
            figures = {"timings": replies.timings(record), "speculation": replies.speculation(record)}
            yield _data({**last, **figures})
            if gen.include_usage:  # the figures on the last chunk too, where llama-server puts its timings
                usage = {"choices": [], "usage": replies.usage(record), **figures}
                yield _data({**replies.chunk(rid, name, chat), **usage})
            yield "data: [DONE]\n\n"
        finally:
            job.cancelled.set()  # a client that left stops its generation at the next step


async def _native_sse(job: Job, piece: Piece, name: str):
    """llama-server's own stream (/infill): a `{"content", "stop": false}` event per piece, then the whole
    reply's figures with `"stop": true`; no [DONE]."""
    try:
        while not piece.done:
            if piece.text:
                yield _data({"content": piece.text, "stop": False})
            piece = await job.out.get()
        if piece.error is not None:
            yield _data(_api_error(piece.error).body())
            return
        yield _data(replies.native_reply(name, "", piece.finish, piece.record or {}))
    finally:
        job.cancelled.set()


def _events(session: Session, gen: Generation, job: Job):
    """On the engine thread: the prompt, checked against the context, and the answer's events (the answer's
    shape goes to the job, read once its first piece arrived)."""
    if gen.messages is not None:
        if gen.tools and gen.request.grammar is None and session.grammar is not None:
            why = "this server answers in the grammar it was started with (--json-schema / --grammar), so its "
            raise ApiError(400, why + "answers cannot be tool calls: send no 'tools', or serve without it", "tools")
        prompt, job.shape = chat_prompt(session, gen.messages, gen.tools, gen.tool_spec)
        if gen.request.grammar is not None:  # the content is what the grammar matched, white space and all
            job.shape = replace(job.shape, verbatim=True)
        elif job.shape.grammar is not None:  # the tools' calls parse (structured/tool_calls.py)
            gen = replace(gen, request=replace(gen.request, grammar=job.shape.grammar))
    elif gen.infill is not None:
        prompt, job.shape = session.text.infill_prompt(gen.infill, gen.request.max_tokens), Shape()
    else:
        prompt, job.shape = session.text.text_prompt(gen.prompt), Shape()
    room = session.text.context_size - len(prompt)
    if room < 1:
        raise ApiError(
            400,
            f"the prompt is {len(prompt)} tokens and the context holds {session.text.context_size}: no room for an "
            "answer; shorten the conversation (or serve with a larger --ctx)",
            "messages" if gen.messages is not None else "input_prefix" if gen.native else "prompt",
            "context_length_exceeded",
        )
    # clients send fixed max_tokens (4096, 8192) whatever the model: what does not fit is clipped to the room
    # left, and the answer then ends with finish_reason "length", as llama-server does
    asked = gen.request.max_tokens
    return session.complete(prompt, replace(gen.request, max_tokens=min(asked or room, room)))


async def _next(request: HttpRequest, job: Job) -> Piece | None:
    """The job's next piece; None when the client disconnected meanwhile (the job is then cancelled)."""
    getting = asyncio.ensure_future(job.out.get())
    leaving = asyncio.ensure_future(_disconnected(request))
    done, _ = await asyncio.wait({getting, leaving}, return_when=asyncio.FIRST_COMPLETED)
    leaving.cancel()
    if getting in done:
        return getting.result()
    getting.cancel()
    job.cancelled.set()
    return None


async def _disconnected(request: HttpRequest) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _kept(delta: dict, gen: Generation) -> bool:
    """Whether a streamed delta goes out: under parallel_tool_calls false, no call after the first."""
    return not (gen.one_call and delta.get("tool_calls", [{}])[0].get("index", 0) > 0)


class _Scores:
    """Streamed log-probabilities: each piece's go out with the next chunk that carries text (a piece whose text
    the splitter holds back, a tool call's opening, waits), the rest with the finishing chunk."""

    def __init__(self, chat: bool) -> None:
        self.chat, self.pending, self.offset = chat, [], 0

    def add(self, entries: list[dict] | None) -> None:
        self.pending += entries or []

    def take(self) -> dict | None:
        entries, self.pending = self.pending, []
        if self.chat:
            return replies.chat_logprobs(entries)
        shaped = replies.completion_logprobs(entries, self.offset)
        self.offset += sum(len(e["token"]) for e in entries)
        return shaped


def _data(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


def _api_error(exc: Exception, log: bool = True) -> ApiError:
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ContextOverflow):
        return ApiError(400, str(exc), "messages", "context_length_exceeded")
    if isinstance(exc, LocalspecError):
        return ApiError(400, str(exc))
    # a bug: one line to the client, the whole traceback in the server's log (the exception carries it across
    # threads), so that it can be diagnosed; a route's own exceptions uvicorn logs itself (``log`` False)
    if log:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    return ApiError(500, f"internal error: {exc!r} (please report it)", None, "server_error")


async def _error_response(request: HttpRequest, exc: Exception) -> Response:
    error = exc if isinstance(exc, ApiError) else _api_error(exc, log=False)
    headers = {"Retry-After": "1"} if error.status == 503 else None
    return JSONResponse(error.body(), status_code=error.status, headers=headers)


def create_app(server: Server, cors: bool = False) -> Starlette:
    routes = [
        Route("/health", server.health),
        Route("/v1/models", server.models),
        Route("/metrics", server.metrics),
        Route("/v1/chat/completions", server.chat, methods=["POST"]),
        Route("/v1/completions", server.completions, methods=["POST"]),
        Route("/infill", server.infill, methods=["POST"]),
    ]
    middleware = [Middleware(CORSMiddleware, allow_origins=["*"], allow_headers=["*"])] if cors else []
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={ApiError: _error_response, Exception: _error_response},
    )
