"""Names, limits and log-probabilities as real clients use them, on scripted models: any model name is answered,
/v1/models carries what clients read, a max_tokens beyond the room left is clipped, a prompt that does not fit
is refused with its numbers, and logprobs (whole and streamed, chat and completions) are the target's own."""

import json

import httpx
import numpy as np
import pytest
from support.fakes import WEATHER, ScriptedBackend
from support.server import canned_session, serve

from localspec.drafters.base import NoDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.sampling import SamplingParams
from localspec.session import Session

pytest.importorskip("uvicorn")


def session(drafter=None, n_ctx=4096, eog=None) -> Session:
    backend = ScriptedBackend(vocab_size=20, order=1, scale=3.0, n_ctx=n_ctx, eog=eog)
    return Session(backend, drafter or NgramDrafter(1, 3), SamplingParams(temperature=0), "scripted", max_tokens=8)


def post(running, path: str, body: dict) -> httpx.Response:
    return httpx.post(running.url + path, json=body, timeout=60)


def sse(reply: httpx.Response) -> list[dict]:
    """The chunks of a streamed reply, split the way clients split them: `data: ` lines up to `[DONE]`."""
    lines = [line.removeprefix("data: ") for line in reply.text.split("\n") if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_any_model_name_is_answered_and_each_new_name_logged_once():
    said: list[str] = []
    worker, running = serve(lambda: session(), "scripted", log=said.append)
    try:
        for name in ["openai/scripted", "gpt-4o", "gpt-4o", "scripted", None]:
            body = {"messages": [{"role": "user", "content": "abcabc"}], "max_tokens": 3}
            reply = post(running, "/v1/chat/completions", {**body, "model": name} if name else body)
            assert reply.status_code == 200, reply.text
            assert reply.json()["model"] == (name or "scripted")  # the name the client sent comes back
        assert said == [
            "requests for model 'openai/scripted' are answered by 'scripted'",
            "requests for model 'gpt-4o' are answered by 'scripted'",
        ]
    finally:
        running.stop()
        worker.stop()


def test_models_lists_the_served_model_with_what_clients_read():
    worker, running = serve(lambda: session(n_ctx=512), "scripted")
    try:
        data = httpx.get(running.url + "/v1/models", timeout=30).json()["data"]
        assert [m["id"] for m in data] == ["scripted"]
        model = data[0]
        assert model["object"] == "model" and model["owned_by"] == "localspec" and model["created"] > 1.7e9
        assert model["meta"]["n_ctx"] == 512 and model["meta"]["n_vocab"] == 20
        assert set(model["meta"]) >= {"n_params", "size"} and model["drafter"] == "ngram"
    finally:
        running.stop()
        worker.stop()


def test_max_tokens_beyond_the_room_left_is_clipped_and_ends_with_length():
    worker, running = serve(lambda: session(n_ctx=90), "scripted")
    try:
        prompt = "abcdefghij" * 3  # 80 tokens in the ChatML template: room for 10
        for stream in (False, True):
            body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 8192, "stream": stream}
            body |= {"stream_options": {"include_usage": True}} if stream else {}
            reply = post(running, "/v1/chat/completions", body)
            assert reply.status_code == 200, reply.text
            last = sse(reply)[-1] if stream else reply.json()
            finish = [c["choices"][0]["finish_reason"] for c in sse(reply) if c["choices"]][-1] if stream else None
            assert last["usage"]["completion_tokens"] == 10
            assert (finish if stream else last["choices"][0]["finish_reason"]) == "length"
        body = {"messages": [{"role": "user", "content": prompt + "abcdefghij"}], "max_tokens": 4}
        reply = post(running, "/v1/chat/completions", body)  # 90 tokens: no room at all
        error = reply.json()["error"]
        assert reply.status_code == 400 and error["code"] is None and error["type"] == "context_length_exceeded"
        assert "90 tokens" in error["message"] and "holds 90" in error["message"] and error["param"] == "messages"
        reply = post(running, "/v1/completions", {"prompt": "abcdefghij" * 9, "max_tokens": 4})
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "prompt"
    finally:
        running.stop()
        worker.stop()


def logprobs_of(running, path: str, body: dict, stream: bool) -> tuple[str, list]:
    """(the answer's text, its tokens' (token, logprob, top tokens)) as a client reads them, whole or streamed."""
    reply = post(running, path, {**body, "stream": stream})
    assert reply.status_code == 200, reply.text
    choices = [c["choices"][0] for c in sse(reply)] if stream else [reply.json()["choices"][0]]
    chat = path.endswith("chat/completions")
    text = "".join(
        (c["delta"] if stream else c["message"]).get("content") or "" if chat else c["text"] for c in choices
    )
    entries = []
    for c in choices:
        if c["logprobs"] is None:
            continue
        if chat:
            entries += [
                (e["token"], e["logprob"], [t["token"] for t in e["top_logprobs"]]) for e in c["logprobs"]["content"]
            ]
        else:
            lp = c["logprobs"]
            entries += [
                (t, p, list(top))
                for t, p, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True)
            ]
    return text, entries


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_logprobs_whole_and_streamed_equal_plain_decodings(path):
    chat = path.endswith("chat/completions")
    prompt = "abcabcabcab"
    body = {"max_tokens": 24, "temperature": 0}
    body |= {"messages": [{"role": "user", "content": prompt}], "logprobs": True, "top_logprobs": 3} if chat else {
        "prompt": prompt, "logprobs": 3}  # fmt: skip
    found = {}
    for label, drafter in (("ngram", NgramDrafter(1, 3)), ("plain", NoDrafter())):
        worker, running = serve(lambda d=drafter: session(d), "scripted")
        try:
            for stream in (False, True):
                found[label, stream] = logprobs_of(running, path, body, stream)
        finally:
            running.stop()
            worker.stop()
    text, entries = found["plain", False]
    assert len(entries) == 24 and "".join(t for t, _, _ in entries) == text
    assert all(found[key] == (text, entries) for key in found)  # speculated = plain, streamed = whole
    backend = ScriptedBackend(vocab_size=20, order=1, scale=3.0)  # the first token's score, by hand
    last = "\n" if chat else prompt[-1]  # order 1: the row follows the prompt's last character (ChatML's newline)
    row = backend.logits_after([ord(last) - 97]).astype(np.float64)
    logz = row.max() + np.log(np.exp(row - row.max()).sum())
    first = ord(entries[0][0]) - 97
    assert entries[0][1] == pytest.approx(row[first] - logz, abs=1e-6)
    assert entries[0][2] == [chr(97 + i) for i in np.argsort(-row, kind="stable")[:3]]


def test_parallel_tool_calls_false_keeps_the_first_call():
    two = (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>'
    )
    worker, running = serve(lambda: canned_session(two, []), "scripted")
    try:
        for parallel, cities in ((None, ["Paris", "Rome"]), (True, ["Paris", "Rome"]), (False, ["Paris"])):
            body = {"messages": [{"role": "user", "content": "Weather?"}], "tools": [WEATHER]}
            body |= {} if parallel is None else {"parallel_tool_calls": parallel}
            whole = post(running, "/v1/chat/completions", body).json()["choices"][0]
            calls = whole["message"]["tool_calls"]
            streamed = [
                call for c in sse(post(running, "/v1/chat/completions", {**body, "stream": True})) if c["choices"]
                for call in c["choices"][0]["delta"].get("tool_calls") or []
            ]  # fmt: skip
            for found in (calls, streamed):
                assert [json.loads(c["function"]["arguments"])["city"] for c in found] == cities
            assert whole["finish_reason"] == "tool_calls"
    finally:
        running.stop()
        worker.stop()


def test_a_grammar_past_its_limits_ends_that_request_alone_with_a_clear_error(monkeypatch):
    from localspec.structured import constraint

    monkeypatch.setitem(constraint.LIMITS, "step_max_items", 300)  # the ambiguous rule passes it within ~60 tokens
    ambiguous = 'root ::= x x x x "s"\nx ::= x x | "r" | "k" | ""\n'  # the scripted model writes rkrk.., never s
    worker, running = serve(lambda: session(eog=19), "scripted")
    try:
        body = {"prompt": "ab", "max_tokens": 2000, "temperature": 0, "grammar": ambiguous}
        whole = post(running, "/v1/completions", body)
        assert whole.status_code == 400, whole.text
        message = whole.json()["error"]["message"]
        assert "grammar became too costly to follow" in message and "Too many items (limit 300" in message
        streamed = post(running, "/v1/completions", {**body, "stream": True}).text.split("\n\n")
        chunks = [json.loads(line.removeprefix("data: ")) for line in streamed if line.startswith("data: ")]
        assert "".join(c["choices"][0]["text"] for c in chunks[:-1]).startswith("rkrk")  # what it had streamed,
        assert "too costly" in chunks[-1]["error"]["message"]  # then the error as the stream's last event
        after = post(running, "/v1/completions", {"prompt": "ab", "max_tokens": 4, "grammar": 'root ::= "ab"'})
        assert after.status_code == 200 and after.json()["choices"][0]["text"] == "ab"  # the server goes on
    finally:
        running.stop()
        worker.stop()


def test_an_unexpected_error_is_one_line_to_the_client_and_its_traceback_in_the_servers_log(capfd):
    def broken():
        s = session()

        def complete(prompt, request, on_prefill=None):
            raise KeyError("a bug deep inside")
            yield  # a generator, as the real one

        s.complete = complete
        return s

    worker, running = serve(broken, "scripted")
    try:
        reply = post(running, "/v1/completions", {"prompt": "ab", "max_tokens": 4})
        assert reply.status_code == 500 and "a bug deep inside" in reply.json()["error"]["message"]
        assert "Traceback" not in reply.text
        log = capfd.readouterr().err
        assert "Traceback (most recent call last)" in log and "in complete" in log and "KeyError" in log
        assert httpx.get(running.url + "/v1/models", timeout=30).status_code == 200  # the server goes on
    finally:
        running.stop()
        worker.stop()
