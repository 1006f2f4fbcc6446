"""A stand-in for the Hugging Face Hub on 127.0.0.1: just what huggingface-hub's file downloads ask for.

    HEAD/GET /{repo}/resolve/{revision}/{file}   X-Repo-Commit, X-Linked-Etag (sha256), X-Linked-Size; Range
    GET /api/models/{repo}[/revision/{rev}]      repo info (its commit), for snapshot downloads
    GET /api/models/{repo}/tree/{rev}            the file listing, with sizes and sha256
    404 with X-Error-Code: RepoNotFound / EntryNotFound, as the Hub answers

Faults for the tests: `drop_once` cuts the first GET of a file after half its bytes (the client must resume
with a Range request); `corrupt` serves other bytes of the right size under the right checksum.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class Hub:
    def __init__(self) -> None:
        self.repos: dict[str, dict[str, bytes]] = {}
        self.drop_once: set[str] = set()
        self.corrupt: set[str] = set()
        self.gated: set[str] = set()  # repos that answer 401 without a token, 403 with one (no access granted)
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)
        self._server: ThreadingHTTPServer | None = None

    def add(self, repo: str, filename: str, data: bytes) -> None:
        self.repos.setdefault(repo, {})[filename] = data

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> Hub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                self._answer(body=False)

            def do_GET(self) -> None:
                self._answer(body=True)

            def _api(self, rest: str) -> None:
                repo = next((r for r in hub.repos if rest == r or rest.startswith(r + "/")), None)
                if repo is None:
                    return self._json(404, {"error": "Repository not found"}, "RepoNotFound")
                if rest[len(repo) :].startswith("/tree/"):
                    files = [
                        {
                            "type": "file",
                            "path": name,
                            "size": len(data),
                            "oid": hashlib.sha1(data).hexdigest(),
                            "lfs": {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 130},
                        }
                        for name, data in hub.repos[repo].items()
                    ]
                    return self._json(200, files)
                return self._json(
                    200,
                    {
                        "id": repo,
                        "modelId": repo,
                        "sha": COMMIT,
                        "private": False,
                        "siblings": [{"rfilename": n} for n in hub.repos[repo]],
                    },
                )

            def _json(self, status: int, payload, error: str | None = None) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                if error:
                    self.send_header("X-Error-Code", error)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _answer(self, body: bool) -> None:
                path = unquote(urlparse(self.path).path)
                hub.requests.append((self.command, path, self.headers.get("Range")))
                gated = next((r for r in hub.gated if f"/{r}/" in path + "/"), None)
                if gated is not None:  # as the Hub answers for a gated repo whose terms were not accepted
                    status = 403 if self.headers.get("Authorization") else 401
                    return self._json(status, {"error": f"Access to model {gated} is restricted."}, "GatedRepo")
                if path.startswith("/api/models/"):
                    return self._api(path[len("/api/models/") :])
                found = hub.lookup(path)
                if isinstance(found, str):
                    self.send_response(404)
                    self.send_header("X-Error-Code", found)
                    self.send_header("X-Error-Message", f"{found}: {path}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                key, data = found
                served = bytes(b ^ 0xFF for b in data) if key in hub.corrupt else data
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    start = int(rng[6:].split("-")[0] or 0)
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", COMMIT)
                etag = hashlib.sha256(data).hexdigest()
                self.send_header("ETag", f'"{etag}"')
                self.send_header("X-Linked-Etag", f'"{etag}"')
                self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("Content-Length", str(len(data) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()
                if not body:
                    return
                chunk = served[start:]
                if key in hub.drop_once:
                    hub.drop_once.discard(key)
                    self.wfile.write(chunk[: len(chunk) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)  # the connection drops mid-file
                    return
                self.wfile.write(chunk)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def lookup(self, path: str):
        """(repo/file key, bytes), or the Hub's error code."""
        parts = path.strip("/").split("/")
        if "resolve" not in parts:
            return "RepoNotFound"
        i = parts.index("resolve")
        repo, filename = "/".join(parts[:i]), "/".join(parts[i + 2 :])
        if repo not in self.repos:
            return "RepoNotFound"
        if filename not in self.repos[repo]:
            return "EntryNotFound"
        return f"{repo}/{filename}", self.repos[repo][filename]

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
