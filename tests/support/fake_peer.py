"""The stand-in llama-server (fake_llama_server.py) put on PATH as `llama-server`, and what it recorded."""

import json
import os
import sys
from pathlib import Path

from localspec.bench.peer import ServerConfig, find_llama_server

SUPPORT = Path(__file__).resolve().parent


class FakeServer:
    """Puts a `llama-server` wrapper around fake_llama_server.py first on PATH; reads what it recorded."""

    def __init__(self, tmp_path: Path, monkeypatch) -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        wrapper = self.bin / "llama-server"
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{SUPPORT / "fake_llama_server.py"}" "$@"\n')
        wrapper.chmod(0o755)
        self.log = tmp_path / "calls.jsonl"
        monkeypatch.setenv("PATH", f"{self.bin}{os.pathsep}{os.environ['PATH']}")
        monkeypatch.setenv("FAKE_LLAMA_SERVER_LOG", str(self.log))
        self.model = tmp_path / "target.gguf"
        self.model.write_bytes(b"GGUF")
        self.draft = tmp_path / "draft.gguf"
        self.draft.write_bytes(b"GGUF")

    def config(self, **overrides) -> ServerConfig:
        options = dict(binary=find_llama_server(), model=self.model, n_ctx=4096, threads=2, draft_model=self.draft)
        return ServerConfig(**{**options, **overrides})

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.log.read_text().splitlines()] if self.log.exists() else []

    def starts(self) -> list[dict]:
        return [r for r in self.records() if "argv" in r]

    def requests(self) -> list[dict]:
        return [r for r in self.records() if "request" in r]
