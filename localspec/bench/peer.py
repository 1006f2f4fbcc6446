"""llama.cpp's own llama-server as the peer of `localspec bench`: what a local user would run instead.

One LlamaServer is one server process for one model and one speculation type, on a free loopback port. It
is started with the localspec session's context, threads, batch and GPU layers, answers greedy /completion
requests given as token ids (so both systems see the very same prompt), and is stopped by its PID —
terminate, then kill — also on Ctrl-C or an error (use it as a context manager).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from localspec.errors import LocalspecError
from localspec.sampling import SamplingParams

# `server:TYPE` methods of the bench -> llama-server's own flags (`--spec-type`; see llama-server --help)
SPEC_TYPES = {
    "plain": [],
    "ngram-mod": ["--spec-type", "ngram-mod"],
    "ngram-simple": ["--spec-type", "ngram-simple"],
    "draft-simple": ["--spec-type", "draft-simple"],
    "draft-eagle3": ["--spec-type", "draft-eagle3"],  # its head: -md EAGLE3.gguf
    "draft-mtp": ["--spec-type", "draft-mtp"],  # the model's own MTP layers (a GGUF that keeps them)
    # several types at once: the server takes an n-gram draft when there is one, else the draft model's
    # (localspec's counterpart: the suffix+draft chain)
    "ngram-mod+draft-simple": ["--spec-type", "ngram-mod,draft-simple"],
}
DRAFT_TYPES = ("draft-simple", "draft-eagle3", "ngram-mod+draft-simple")  # the types that load a second model
LOG_TAIL = 6  # lines of the server's log an error quotes


class PeerError(LocalspecError):
    """The peer server is missing, did not start, died, or answered an error."""


def find_llama_server(spec: str | None = None) -> Path:
    """`--peer llama-server=PATH` (the binary or the folder holding it), else `llama-server` on PATH."""
    if spec:
        path = Path(spec).expanduser()
        if path.is_dir():
            path = path / "llama-server"
        if path.is_file() and os.access(path, os.X_OK):
            return path.resolve()
        raise PeerError(
            f"--peer llama-server={spec}: no executable llama-server there; pass the binary (or its "
            f"folder) of a llama.cpp build (cmake --build build --target llama-server)"
        )
    found = shutil.which("llama-server")
    if found:
        return Path(found).resolve()
    raise PeerError(
        "--peer llama-server: no llama-server on PATH; install llama.cpp (its llama-server binary) or "
        "pass --peer llama-server=PATH/TO/llama-server"
    )


def _env(binary: Path) -> dict:
    """A llama.cpp build keeps its shared libraries next to its binaries."""
    libs = [str(binary.parent), os.environ.get("LD_LIBRARY_PATH")]
    return {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(p for p in libs if p)}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Reply:
    tokens: list[int]  # the output token ids
    timings: dict  # the server's own: prompt_n, prompt_ms, predicted_n, predicted_ms, draft_n, ...


def _libc_prctl():
    try:
        return ctypes.CDLL(None).prctl if sys.platform == "linux" else None
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()  # looked up here: the child between fork and exec must not import or load anything


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: the server gets SIGTERM if localspec itself is killed (SIGKILL leaves no `finally`)."""
    _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class LlamaServer:
    def __init__(
        self,
        binary: Path,
        model: Path,
        spec_type: str,
        *,
        n_ctx: int,
        threads: int,
        log_path: Path,
        n_batch: int = 512,
        gpu_layers: int = 0,
        draft_model: Path | None = None,
        n_parallel: int = 1,
        start_timeout: float = 300.0,
        request_timeout: float = 1800.0,
    ) -> None:
        if spec_type not in SPEC_TYPES:
            raise PeerError(f"unknown llama-server speculation type {spec_type!r}; choose from {', '.join(SPEC_TYPES)}")
        if spec_type in DRAFT_TYPES and draft_model is None:
            raise PeerError(f"server:{spec_type} needs a draft model or head (-md FILE.gguf)")
        self.binary, self.model, self.spec_type, self.log_path = Path(binary), Path(model), spec_type, Path(log_path)
        self.n_ctx, self.threads, self.n_batch, self.gpu_layers = n_ctx, threads, n_batch, gpu_layers
        self.draft_model, self.n_parallel = draft_model, n_parallel
        self.start_timeout, self.request_timeout = start_timeout, request_timeout
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None

    def argv(self, port: int) -> list[str]:
        ngl = "all" if self.gpu_layers < 0 else str(self.gpu_layers)
        args = [
            str(self.binary),
            "-m",
            str(self.model),
            "-c",
            str(self.n_ctx * self.n_parallel),  # n_ctx for each slot
            "-t",
            str(self.threads),
            "-tb",
            str(self.threads),
            "-b",
            str(self.n_batch),
            "-ub",
            str(self.n_batch),
            "-ngl",
            ngl,
            "-np",
            str(self.n_parallel),  # 1: the whole context serves the one request, as in localspec
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-webui",
            *SPEC_TYPES[self.spec_type],
        ]
        if self.spec_type in DRAFT_TYPES:
            args += ["-md", str(self.draft_model)]
        return args

    # -- lifetime -------------------------------------------------------------------------------------
    def start(self) -> LlamaServer:
        for _ in range(3):  # the free port may be taken between our probe and the server's bind: retry
            self.port = free_port()
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.log_path, "ab") as log:
                # own session: a Ctrl-C at the terminal reaches localspec, which then stops the server itself
                self.proc = subprocess.Popen(
                    self.argv(self.port),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=_env(self.binary),
                    start_new_session=True,
                    preexec_fn=_die_with_parent if _PRCTL else None,
                )
            try:
                if self._wait_healthy():
                    return self
            except BaseException:
                self.stop()
                raise
            if "bind" not in self.log_tail().lower():
                break
        rc = self.proc.returncode if self.proc else None
        self.stop()
        raise PeerError(f"llama-server ({self.spec_type}) did not start (exit code {rc}); {self._tail_text()}")

    def _wait_healthy(self) -> bool:
        """True once /health answers 200; False if the process exits first. Times out with an error."""
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(self._url("/health"), timeout=5) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, OSError):  # not listening yet, or 503 while the model loads
                pass
            time.sleep(0.1)
        raise PeerError(
            f"llama-server ({self.spec_type}) was not ready after {self.start_timeout:.0f} s; {self._tail_text()}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate by PID, kill after `timeout` seconds; idempotent."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- requests -------------------------------------------------------------------------------------
    def complete(
        self, prompt: Sequence[int], n_predict: int, sampling: SamplingParams | None = None, seed: int | None = None
    ) -> Reply:
        """Completion of the prompt's token ids with localspec's sampling settings (default: greedy) and seed;
        no prompt cache, so every request prefills it all."""
        body = {
            "prompt": [int(t) for t in prompt],
            "n_predict": n_predict,
            **(sampling or SamplingParams(temperature=0.0)).server_fields(),
            **({} if seed is None else {"seed": int(seed)}),
            "cache_prompt": False,
            "return_tokens": True,
            "stream": False,
        }
        request = urllib.request.Request(
            self._url("/completion"), data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.request_timeout) as r:
                reply = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            raise PeerError(
                f"llama-server ({self.spec_type}) answered HTTP {exc.code}: {_error_message(exc)}; {self._tail_text()}"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            state = "it exited" if self._exited() else "no valid answer"
            raise PeerError(
                f"llama-server ({self.spec_type}) failed a request ({state}: {exc}); {self._tail_text()}"
            ) from None
        if not isinstance(reply.get("tokens"), list) or not isinstance(reply.get("timings"), dict):
            raise PeerError(
                f"llama-server ({self.spec_type}) sent no tokens/timings (a llama.cpp without "
                f"`return_tokens`?); {self._tail_text()}"
            )
        return Reply([int(t) for t in reply["tokens"]], reply["timings"])

    def _exited(self, wait: float = 2.0) -> bool:
        """A dropped connection: did the process die (give it a moment to be reaped)?"""
        if self.proc is None:
            return True
        try:
            self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            return False
        return True

    def _url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def log_tail(self, n: int = LOG_TAIL) -> str:
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            return ""
        return " | ".join(line.strip() for line in lines[-n:] if line.strip())

    def _tail_text(self) -> str:
        tail = self.log_tail()
        return f"last lines of its log: {tail}" if tail else "its log is empty"


def _error_message(exc: urllib.error.HTTPError) -> str:
    try:
        error = json.loads(exc.read()).get("error", {})
        return error.get("message", str(error)) if isinstance(error, dict) else str(error)
    except (ValueError, OSError, AttributeError):
        return exc.reason


@dataclass(frozen=True)
class ServerConfig:
    """How to start the peer for one localspec session: its model, context, threads, batch, GPU layers."""

    binary: Path
    model: Path
    n_ctx: int
    threads: int
    n_batch: int = 512
    gpu_layers: int = 0
    draft_model: Path | None = None  # for draft-simple
    eagle_head: Path | None = None  # for draft-eagle3
    n_parallel: int = 1  # -np: slots of n_ctx each (bench --concurrency)

    def server(self, spec_type: str, log_path: Path) -> LlamaServer:
        return LlamaServer(
            self.binary,
            self.model,
            spec_type,
            n_ctx=self.n_ctx,
            threads=self.threads,
            log_path=log_path,
            n_batch=self.n_batch,
            gpu_layers=self.gpu_layers,
            draft_model=self.eagle_head if spec_type == "draft-eagle3" else self.draft_model,
            n_parallel=self.n_parallel,
        )


@contextmanager
def running(config: ServerConfig | None, types: Sequence[str], log_dir: Path) -> Iterator[dict[str, LlamaServer]]:
    """Fresh servers, one per type, all stopped on the way out (also when one fails to start)."""
    servers: dict[str, LlamaServer] = {}
    try:
        for spec_type in types if config else ():
            servers[spec_type] = config.server(spec_type, Path(log_dir) / f"llama-server-{spec_type}.log").start()
        yield servers
    finally:
        for server in servers.values():
            server.stop()


def server_version(binary: Path) -> str | None:
    """What `llama-server --version` says (it prints to stderr), for the bench JSON."""
    try:
        done = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, env=_env(Path(binary))
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if "version" in line.lower()]
    return lines[0] if lines else None
