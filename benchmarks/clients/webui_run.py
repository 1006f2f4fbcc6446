"""Open WebUI (its own venv) started against the recording proxy, and the Playwright driver (another venv) that
chats through it in headless Chromium (Debian's `chromium` package: `apt-get install chromium`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import venvs

from localspec.bench.peer import free_port

HERE = Path(__file__).resolve().parent
CHROMIUM = "/usr/bin/chromium"
REQUIREMENT = "open-webui==0.12.4"
DRIVER = "playwright==1.65.3"  # drives the system's Chromium: no browser download


def _wait(url: str, timeout: float) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as reply:
                if reply.status == 200:
                    return True
        except OSError:
            time.sleep(2)
    return False


def run(work: Path, front, model: str, mode: str = "chat") -> dict:
    """``mode``: "chat" (two turns of a coding chat) or "tools" (webui.py's tool question in 5 new chats)."""
    if not Path(CHROMIUM).exists():
        return {"ok": False, "error": f"no {CHROMIUM}: apt-get install chromium"}
    app = venvs.client_env("open-webui", REQUIREMENT)
    driver = venvs.client_env("webui-driver", DRIVER)
    version = venvs.version(app, "open-webui")
    front.label = {"client": "open-webui", "version": version, "system": "localspec"}
    with urllib.request.urlopen(front.url + "/v1/models", timeout=30) as reply:  # the id Open WebUI will list
        model = json.load(reply)["data"][0]["id"]
    port, data = free_port(), work / "open-webui-data"
    data.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "DATA_DIR": str(data),
        "OPENAI_API_BASE_URL": front.url + "/v1",  # the two settings a user gives it
        "OPENAI_API_KEY": "sk-local",
        "WEBUI_AUTH": "False",  # single-user mode: no sign-up page
        "ENABLE_OLLAMA_API": "False",
        "OFFLINE_MODE": "True",  # no model hub or update checks from this machine
        "HF_HUB_OFFLINE": "1",
        "RAG_EMBEDDING_ENGINE": "openai",  # no local sentence-transformers model to download
        "DEFAULT_MODELS": model,
        "ENABLE_VERSION_UPDATE_CHECK": "False",
    }
    started = time.perf_counter()
    with open(work / "open-webui.log", "wb") as log:  # the child keeps its own copy of the descriptor
        server = _start(app, port, env, log, work)
    try:
        if not _wait(f"http://127.0.0.1:{port}/health", 600):
            return {"ok": False, "version": version, "error": "Open WebUI did not start", "log": _tail(work)}
        startup = round(time.perf_counter() - started, 1)
        done = subprocess.run(
            [
                str(driver / "bin" / "python"),
                str(HERE / "webui.py"),
                f"http://127.0.0.1:{port}",
                model,
                str(work / "screenshots"),
                mode,
            ],
            capture_output=True,
            text=True,
            timeout=1200,
        )
        if done.returncode != 0:
            return {"ok": False, "version": version, "error": done.stderr[-3000:], "log": _tail(work)}
        return {
            "version": version,
            "driver": venvs.version(driver, "playwright"),
            "startup_s": startup,
            **json.loads(done.stdout),
        }
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


def _start(app: Path, port: int, env: dict, log, cwd: Path) -> subprocess.Popen:
    """Open WebUI in the work folder (it writes its secret key file where it starts)."""
    argv = [str(app / "bin" / "open-webui"), "serve", "--host", "127.0.0.1", "--port", str(port)]
    return subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)


def _tail(work: Path) -> str:
    return (work / "open-webui.log").read_text(errors="replace")[-3000:]
