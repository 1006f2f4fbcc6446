"""`localspec serve`: load the model on the engine thread, then serve the API with uvicorn until Ctrl-C or
SIGTERM (then what waits or runs is cancelled, and the session closes, saving its caches)."""

from __future__ import annotations

import ipaddress
import signal
import socket
import sys

from localspec.apps.server.app import Server, create_app
from localspec.apps.server.metrics import Metrics
from localspec.apps.server.slots import SlotWorker
from localspec.apps.server.worker import QUEUE_LIMIT, Worker
from localspec.config import CACHE_RAM_MIB, CACHE_RAM_SHARE
from localspec.cpus import available_memory
from localspec.errors import ConfigError
from localspec.session import Session


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on {host}:{port} ({exc.strerror}); choose another --port or --host"
            ) from None


def cache_ram_for(asked: int | None, free: int | None) -> tuple[int, str]:
    """Bytes for saved conversation states and how that was chosen: what ``--cache-ram`` asked (bytes), else
    a share of the memory ``free`` once the model is loaded, capped at the default (the cap alone where the
    platform does not tell)."""
    if asked is not None:
        return asked, "--cache-ram"
    cap = CACHE_RAM_MIB * 2**20
    if free is None:
        return cap, "free memory unknown; --cache-ram sets it"
    share = int(free * CACHE_RAM_SHARE)
    if share >= cap:
        return cap, "--cache-ram sets it"
    return share, f"{CACHE_RAM_SHARE:.0%} of the {free // 2**20} MiB free after loading; --cache-ram sets it"


def build(
    open_session, model: str, api_key: str | None, loopback: bool, cors: bool, queue_limit=QUEUE_LIMIT, log=None,
    parallel: int = 1,
):  # fmt: skip
    """The engine thread (started: the model is loaded) and the ASGI app over it; ``log`` takes the server's
    notices (default: stderr); ``parallel``: requests answered at once (apps/server/slots.py)."""
    if parallel < 1:
        raise ConfigError(f"--parallel must be at least 1, got {parallel}")
    worker = (
        Worker(open_session, Metrics(), queue_limit)
        if parallel == 1
        else SlotWorker(open_session, Metrics(), queue_limit, parallel)
    )
    worker.start()
    return worker, create_app(Server(worker, model, api_key, loopback, log), cors)


def serve(
    settings, host: str, port: int, api_key: str | None, cors: bool, cache_ram: int | None, say=print, parallel=1
) -> int:
    """``cache_ram``: bytes for saved conversation states, None: sized from free memory (``cache_ram_for``);
    ``parallel``: requests answered at once."""
    import uvicorn

    loopback = is_loopback(host)
    if not loopback and not api_key:
        raise ConfigError(f"--host {host} serves other machines: give --api-key KEY (clients send it as Bearer)")
    _check_free(host, port)  # before the model loads, not after
    kept = {}

    def open_session() -> Session:
        session = Session.open(settings)  # sized after loading: what the weights and cache leave free
        if parallel > 1:
            return session
        kept["bytes"], kept["why"] = cache_ram_for(cache_ram, available_memory())
        return session.keep_states(kept["bytes"])

    worker, app = build(open_session, settings.model, api_key, loopback, cors, parallel=parallel)
    say(f"localspec serve — {worker.session.load_report()}", file=sys.stderr)
    if parallel > 1:
        say(
            f"{parallel} requests at once, their steps batched together (--parallel), each in "
            f"{worker.slots[0].text.context_size} tokens of the {worker.session.text.context_size}-token context · "
            "each slot "
            f"keeps its last conversation, no states in RAM · more wait in arrival order (up to "
            f"{worker.queue_limit}; more get 503)",
            file=sys.stderr,
        )
    else:
        say(
            f"context {worker.session.text.context_size} tokens · conversation states in RAM up to "
            f"{kept['bytes'] // 2**20} MiB ({kept['why']}) · one request at a time, in arrival order (up to "
            f"{worker.queue_limit} waiting; more get 503; --parallel N answers several at once)",
            file=sys.stderr,
        )
    say(
        f"OpenAI-compatible API on http://{host}:{port}/v1 (model {settings.model!r}); editors' autocomplete on "
        f"http://{host}:{port}/infill",
        file=sys.stderr,
    )

    class Server(uvicorn.Server):
        def handle_exit(self, sig, frame) -> None:
            """Ctrl-C or SIGTERM: in-flight answers end now, then the server shuts down and the session
            closes (uvicorn's own handler would re-raise the signal afterwards and kill the process before
            the session saved its caches); a second Ctrl-C stops waiting for open connections."""
            worker.cancel_all()
            self.force_exit = self.should_exit and sig == signal.SIGINT
            self.should_exit = True

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=5)
    try:
        Server(config).run()
    finally:
        worker.stop()
    return 0
