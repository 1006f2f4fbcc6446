"""A `localspec serve` app on a free loopback port in a thread, and the scripted sessions the server tests serve."""

import threading
import time

import uvicorn
from openai import OpenAI

from localspec.apps.server.run import build
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.stats import TokenEvent, TurnStats
from localspec.sampling import SamplingParams
from localspec.session import Session
from support.fakes import ScriptedBackend


class Running:
    """An app served by uvicorn on a free loopback port, in a thread."""

    def __init__(self, app) -> None:
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)
        self.port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def client(self, key: str = "none") -> OpenAI:
        return OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0, timeout=120)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


def serve(open_session, model: str, **kw):
    """The engine thread (the model loaded) and the app served; stop both with ``running.stop()`` then
    ``worker.stop()``."""
    worker, app = build(open_session, model, kw.pop("api_key", None), True, False, **kw)
    return worker, Running(app)


def scripted_session(n_ctx: int = 4096) -> Session:
    """A 20-token scripted model (token i is the letter chr(97 + i); 19 ends the answer) with an n-gram drafter."""
    backend = ScriptedBackend(vocab_size=20, eog=19, n_ctx=n_ctx)
    return Session(backend, NgramDrafter(1, 3), SamplingParams(temperature=0), "scripted", max_tokens=8)


def canned_session(answer: str, seen: list, n_ctx: int = 4096):
    """The scripted model whose answer is ``answer`` (in 3-character pieces); ``seen`` gets each prompt's text."""
    session = scripted_session(n_ctx)

    def complete(prompt, request, on_prefill=None):
        seen.append("".join(chr(ord("a") + t) for t in prompt))  # the scripted tokenizer's inverse
        stats = TurnStats(prompt_tokens=len(prompt), generated=len(answer) // 3 + 1)
        pieces = [answer[i : i + 3] for i in range(0, len(answer), 3)]
        for i, piece in enumerate(pieces):
            yield TokenEvent((1,), piece, 0, stats, "stop" if i == len(pieces) - 1 else None)

    session.complete = complete
    return session
