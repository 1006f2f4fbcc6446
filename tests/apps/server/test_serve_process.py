"""`localspec serve` as a user runs it, a process on the real SmolLM2-135M: SIGTERM ends an answer in flight,
saves the suffix cache (0600) and exits cleanly; --no-persist writes nothing."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from localspec.bench.peer import free_port
from localspec.drafters.suffix.store import MAGIC, AnswerStore


def start(tmp_path, *flags):
    port = free_port()
    env = {**os.environ, "LOCALSPEC_CACHE": str(tmp_path / "cache"), "LOCALSPEC_DATA": str(tmp_path / "data")}
    command = [sys.executable, "-m", "localspec", "serve", "--port", str(port), "--temperature", "0", "--ctx", "1024"]
    proc = subprocess.Popen([*command, *flags], env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    proc.kill()
    pytest.fail(f"localspec serve did not start: {proc.communicate()[1][-2000:]}")


def chat(url: str, content: str, **fields) -> dict:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 16, **fields}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=120).json()


@pytest.mark.model
def test_sigterm_ends_the_answer_in_flight_and_saves_the_suffix_cache(tmp_path):
    proc, url = start(tmp_path)
    try:
        assert chat(url, "Name a colour.")["usage"]["completion_tokens"] > 0
        body = {"messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 900, "stream": True}
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as reply:
            lines = reply.iter_lines()
            assert next(lines).startswith("data: ")
            proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            rest = list(lines)  # the stream ends: finish chunk and [DONE], long before 900 tokens
        assert "data: [DONE]" in rest and time.monotonic() - sent < 10
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    err = proc.stderr.read()
    assert "Traceback" not in err, err
    kept = re.search(r"conversation states in RAM up to (\d+) MiB \((.*)\)", err)
    assert kept and int(kept[1]) > 0 and "--cache-ram sets it" in kept[2], err  # sized by default, said how
    assert "one request at a time, in arrival order" in err and "/infill" in err  # what it serves, and how
    [path] = (tmp_path / "cache" / "suffix").glob("*.bin")
    assert path.stat().st_mode & 0o777 == 0o600
    header = json.loads(path.read_bytes()[len(MAGIC) :].split(b"\n", 1)[0])
    answers = list(AnswerStore(path, header["tokenizer"]).answers.values())
    assert len(answers) == 2 and len(answers[0]) > 0 and 0 < len(answers[1]) < 900  # the whole one, the cut one


@pytest.mark.model
def test_no_persist_keeps_served_content_off_disk(tmp_path):
    proc, url = start(tmp_path, "--no-persist")
    try:
        assert chat(url, "Name a colour.")["usage"]["completion_tokens"] > 0
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    assert not list((tmp_path / "cache").glob("suffix/*.bin"))


def test_a_port_in_use_is_one_clear_line_before_the_model_loads(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        env = {**os.environ, "LOCALSPEC_CACHE": str(tmp_path), "LOCALSPEC_DATA": str(tmp_path)}
        result = subprocess.run(
            [sys.executable, "-m", "localspec", "serve", "--port", str(port)],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr and "--port" in result.stderr
    assert "localspec serve —" not in result.stderr  # refused before loading the model
