"""A recording reverse proxy: real clients talk to it as to the server behind it, and every request body they send
is kept (with the client's name and version), so that tests can replay what real clients send without installing
them. Responses, streamed ones too, pass through untouched; the proxy costs a loopback hop, the same for every
system it fronts."""

from __future__ import annotations

import json
import threading
import time

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

KEPT_HEADERS = ("user-agent", "content-type", "accept", "x-stainless-lang", "x-stainless-package-version")


class Capture:
    """``with Capture(upstream) as proxy:`` point the client at ``proxy.url``; ``proxy.label`` says which client
    the requests that follow come from; ``proxy.requests`` holds what was sent."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.label: dict = {}
        self.requests: list[dict] = []
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(1800.0, connect=10.0))
        route = Route("/{path:path}", self._forward, methods=["GET", "POST", "OPTIONS", "DELETE"])
        config = uvicorn.Config(Starlette(routes=[route]), host="127.0.0.1", port=0, log_level="error")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Capture:
        self._thread.start()
        while not self._server.started:
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def __exit__(self, *exc) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)

    async def _forward(self, request: Request) -> StreamingResponse:
        raw = await request.body()
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", errors="replace")
        headers = {k: v for k, v in request.headers.items() if k.lower() in KEPT_HEADERS}
        record = {
            **self.label,
            "method": request.method,
            "path": "/" + request.path_params["path"],
            "headers": headers,
            "body": body,
        }
        self.requests.append(record)
        send = {k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")}
        upstream = self._client.build_request(
            request.method, self.upstream + record["path"], params=request.query_params, headers=send, content=raw
        )
        reply = await self._client.send(upstream, stream=True)
        record["status"] = reply.status_code
        passed = {k: v for k, v in reply.headers.items() if k.lower() not in ("content-length", "transfer-encoding")}
        return StreamingResponse(
            self._tee(reply, record),
            status_code=reply.status_code,
            headers=passed,
            background=BackgroundTask(reply.aclose),
        )

    async def _tee(self, reply: httpx.Response, record: dict):
        """Pass the reply through, keeping the server's figures (llama-server's `timings`, localspec's
        `speculation`) from the last place they appear."""
        kept = bytearray()
        async for part in reply.aiter_raw():
            kept += part
            yield part
        for line in reversed(kept.decode("utf-8", errors="replace").replace("data: ", "\n").split("\n")):
            if '"timings"' in line:
                try:
                    answer = json.loads(line)
                except ValueError:
                    continue
                record["timings"], record["speculation"] = answer.get("timings"), answer.get("speculation")
                break
