"""Request bodies captured from real clients (benchmarks/clients/run.py, stored with the client's name and version
in clients/*.jsonl) replayed against the app on a scripted model, each reply read the way that client reads it:
the OpenAI SDK's types and server-sent-event framing for the SDK-based clients (aider through LiteLLM, LiteLLM,
`llm`), plain `data:` lines for Open WebUI's browser side; plus what each one requires beyond that."""

import json
import re
from pathlib import Path

import httpx
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from support.server import canned_session, serve

pytest.importorskip("uvicorn")

CAPTURED = sorted((Path(__file__).parent / "clients").glob("*.jsonl"))
ANSWER = "Hello from localspec."
ROOMY = 2**17  # the scripted tokenizer makes a token of every character: room for Open WebUI's 26k-character tools


def captured() -> list:
    cases = []
    for path in CAPTURED:
        for i, line in enumerate(path.read_text().splitlines()):
            record = json.loads(line)
            if record["method"] == "POST" and record["path"].endswith(("/chat/completions", "/completions")):
                cases.append(pytest.param(record, id=f"{path.stem}-{i}"))
    return cases


def events(text: str) -> list[str]:
    """Server-sent events as the OpenAI SDK frames them: fields up to a blank line, `data:` lines joined."""
    out, data = [], []
    for line in text.split("\n"):
        if not line:
            if data:
                out.append("\n".join(data))
            data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    return out


def answering(tools: bool):
    """The scripted model answering plain text, or a call of the first tool the prompt offers (the ChatML
    template writes the tools into the system prompt as Hermes text)."""
    session = canned_session(ANSWER, [], ROOMY)
    if tools:

        def complete(prompt, request, on_prefill=None):
            text = "".join(chr(ord("a") + t) for t in prompt)
            name = re.search(r'"name": "([^"]+)"', text[text.index("<tools>") :]).group(1)
            call = f'<tool_call>\n{{"name": "{name}", "arguments": {{}}}}\n</tool_call>'
            answer = canned_session(call, [], ROOMY)
            return answer.complete(prompt, request, on_prefill)

        session.complete = complete
    return session


@pytest.fixture(scope="module")
def servers():
    started = {tools: serve(lambda t=tools: answering(t), "served-name") for tools in (False, True)}
    yield {tools: running for tools, (_, running) in started.items()}
    for worker, running in started.values():
        running.stop()
        worker.stop()


@pytest.mark.skipif(not CAPTURED, reason="no captured bodies yet: run benchmarks/clients/run.py")
@pytest.mark.parametrize("record", captured())
def test_a_captured_request_gets_what_its_client_reads(record, servers):
    body, client = record["body"], record["client"]
    reply = httpx.post(servers[bool(body.get("tools"))].url + record["path"], json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    chat = record["path"].endswith("/chat/completions")
    if body.get("stream"):
        read_stream(reply, body, client, chat)
    else:
        read_whole(reply.json(), body, client, chat)


def read_whole(data: dict, body: dict, client: str, chat: bool) -> None:
    if not chat:
        assert Completion.model_validate(data).choices[0].text == ANSWER
        return
    reply = ChatCompletion.model_validate(data)
    assert reply.model == body.get("model", "served-name")  # the client's own name comes back
    usage = data["usage"]  # llm calls usage.model_dump() on every whole answer; Zed's type requires it
    assert {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(usage)
    message = reply.choices[0].message
    if body.get("tools"):
        assert reply.choices[0].finish_reason == "tool_calls" and message.tool_calls[0].function.name
    else:
        assert message.content == ANSWER and reply.choices[0].finish_reason == "stop"


def read_stream(reply: httpx.Response, body: dict, client: str, chat: bool) -> None:
    payloads = events(reply.text)
    assert payloads[-1] == "[DONE]"  # every client here stops at it
    chunks = [json.loads(p) for p in payloads[:-1]]
    for chunk in chunks:  # LiteLLM's raw parser reads these keys of every chunk; Zed needs choices and index
        assert {"id", "created", "model", "choices"} <= set(chunk)
        assert all("index" in c for c in chunk["choices"])
    if not chat:
        assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == ANSWER
        return
    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks]
    text = "".join(c.choices[0].delta.content or "" for c in parsed if c.choices)
    calls: dict[int, dict] = {}  # accumulated by index, as llm, Cline and the AI SDK do
    for c in parsed:
        for call in (c.choices[0].delta.tool_calls or []) if c.choices else []:
            calls.setdefault(call.index, {"name": call.function.name, "arguments": ""})
            calls[call.index]["arguments"] += call.function.arguments or ""
    finishes = [c.choices[0].finish_reason for c in parsed if c.choices and c.choices[0].finish_reason]
    if body.get("tools"):
        assert calls and all(call["name"] for call in calls.values()) and finishes == ["tool_calls"]
    else:
        assert text == ANSWER and finishes == ["stop"]
    if (body.get("stream_options") or {}).get("include_usage"):  # llm, OpenCode, Continue: usage at the end
        last = chunks[-1]
        assert last["choices"] == [] and {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(last["usage"])


def test_every_capture_names_its_client_and_version():
    for path in CAPTURED:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            assert record["client"] and record["version"] and path.stem == f"{record['client']}-{record['version']}"
