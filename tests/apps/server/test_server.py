"""`localspec serve` through the official openai client, on a server started in the test (loopback only):
the real SmolLM2-135M for answers, a scripted model for auth, queueing and refusals."""

import json
import threading
import time

import httpx
import pytest
from openai import APIStatusError
from support.fakes import TIME, WEATHER
from support.server import canned_session, scripted_session, serve

from localspec.apps.cli import build_parser
from localspec.apps.server.run import is_loopback
from localspec.apps.server.shaping import chat_prompt
from localspec.config import settings_from_args
from localspec.session import Request, Session
from localspec.structured.grammar import json_object
from localspec.types import common_prefix

uvicorn = pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def smollm(tmp_path_factory):
    cache = tmp_path_factory.mktemp("suffix")
    args = build_parser().parse_args(["serve", "--temperature", "0", "--ctx", "2048"])
    settings = settings_from_args(args)
    settings = type(settings)(
        **{**settings.__dict__, "drafters": settings.drafters.with_options("suffix", cache_dir=str(cache))}
    )
    worker, running = serve(lambda: Session.open(settings).keep_states(256 * 2**20), settings.model)
    running.settings = settings
    yield running
    running.stop()
    worker.stop()


def ask(client, **kw):
    fields = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 24, "temperature": 0}
    return client.chat.completions.create(**{"model": "smollm2-135m", **fields, **kw})


@pytest.mark.model
def test_chat_streamed_and_whole_agree_and_carry_the_figures(smollm):
    client = smollm.client()
    whole = ask(client)
    text = whole.choices[0].message.content
    assert text and whole.choices[0].finish_reason in ("stop", "length")
    assert (
        whole.usage.completion_tokens > 0
        and whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    )
    extra = whole.model_extra
    assert (
        extra["timings"]["predicted_n"] == whole.usage.completion_tokens
        and extra["timings"]["predicted_per_second"] > 0
    )
    assert set(extra["speculation"]) >= {
        "num_spec_steps",
        "num_draft_tokens",
        "num_accepted_draft_tokens",
        "mean_acceptance_length",
        "acceptance_by_position",
    }
    assert extra["speculation"]["drafter"] == "suffix"
    assert extra["speculation"]["mode"] == "fast"  # the default; `serve --exact` says "exact"
    chunks = list(ask(client, stream=True, stream_options={"include_usage": True}))
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(pieces) > 1 and "".join(pieces) == text  # chunks before the end, the same greedy text
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens and chunks[-1].choices == []
    assert any(c.choices and c.choices[0].finish_reason for c in chunks)


@pytest.mark.model
def test_completions_models_health_metrics(smollm):
    client = smollm.client()
    done = client.completions.create(model="smollm2-135m", prompt="1, 2, 3,", max_tokens=8, temperature=0)
    assert done.choices[0].text.strip().startswith("4")
    assert [m.id for m in client.models.list().data] == ["smollm2-135m"]
    assert httpx.get(smollm.url + "/health").json()["status"] == "ok"
    metrics = httpx.get(smollm.url + "/metrics").text
    assert "localspec_generation_tokens_total" in metrics and "localspec_queue_length 0" in metrics


@pytest.mark.model
@pytest.mark.parametrize(
    "fields, status, param",
    [
        ({"n": 2}, 400, "n"),
        ({"logit_bias": {"1": 3}}, 400, "logit_bias"),
        ({"frequency_penalty": 0.5}, 400, "frequency_penalty"),
        ({"logprobs": "yes"}, 400, "logprobs"),
        ({"top_logprobs": 3}, 400, "top_logprobs"),
        ({"logprobs": True, "top_logprobs": 21}, 400, "top_logprobs"),
        ({"max_tokens": 0}, 400, "max_tokens"),
        ({"max_completion_tokens": -5}, 400, "max_completion_tokens"),
        ({"stream_options": {"include_usage": True}}, 400, "stream_options"),
        ({"parallel_tool_calls": "yes"}, 400, "parallel_tool_calls"),
        ({"response_format": {"type": "xml"}}, 400, "response_format"),
        ({"response_format": {"type": "json_schema"}}, 400, "response_format.json_schema.schema"),
        ({"json_schema": {"type": "strin"}}, 400, "json_schema"),
        ({"grammar": "root ::= missing"}, 400, "grammar"),
        ({"grammar": 'root ::= "a"', "json_schema": {"type": "object"}}, 400, "grammar"),
        ({"temperature": "hot"}, 400, "temperature"),
        ({"messages": []}, 400, "messages"),
    ],
)
def test_bad_requests_are_4xx_naming_the_field(smollm, fields, status, param):
    body = {"model": "smollm2-135m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **fields}
    reply = httpx.post(smollm.url + "/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == status and reply.json()["error"]["param"] == param, reply.text


@pytest.mark.model
def test_malformed_json_and_unknown_fields(smollm):
    reply = httpx.post(smollm.url + "/v1/chat/completions", content=b"{not json", timeout=30)
    assert reply.status_code == 400 and "not JSON" in reply.json()["error"]["message"]
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "user": "me", "metadata": {"a": 1}}
    assert httpx.post(smollm.url + "/v1/chat/completions", json=body, timeout=60).status_code == 200


@pytest.mark.model
def test_a_client_that_leaves_mid_stream_stops_it_and_the_next_answer_is_right(smollm):
    client = smollm.client()
    story = [{"role": "user", "content": "Tell me a long story about a lighthouse."}]
    reference = ask(client).choices[0].message.content
    body = {"messages": story, "max_tokens": 400, "temperature": 0, "stream": True}
    with httpx.stream("POST", smollm.url + "/v1/chat/completions", json=body, timeout=60) as reply:
        lines = reply.iter_lines()
        assert next(lines).startswith("data: ") and next(lines) == "" and next(lines).startswith("data: ")
    assert ask(client).choices[0].message.content == reference  # the cache was rolled back consistently
    metrics = httpx.get(smollm.url + "/metrics").text
    generated = [line for line in metrics.splitlines() if line.startswith("localspec_generation_tokens_total")]
    assert generated  # the server is alive and counting


PROSE = (
    "The harbour town wakes early. Fishing boats leave before dawn, gulls follow them out past the breakwater, "
    "and the bakery on the corner sells its first loaves to the crews. By noon the market is full of voices. "
)


def conversation(topic: str, turns: int) -> list[dict]:
    messages = [{"role": "system", "content": f"You are a guide to {topic}. " + PROSE * 2}]
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"Question {i} about {topic}?"},
            {"role": "assistant", "content": "Yes."},
        ]
    return messages + [{"role": "user", "content": f"One more fact about {topic}, please."}]


@pytest.mark.model
def test_four_conversations_taking_turns_prefill_only_their_new_tokens(smollm):
    client = smollm.client()
    topics = ["lighthouses", "volcanoes", "glaciers", "deserts"]
    firsts = [ask(client, messages=conversation(t, 1), max_tokens=8) for t in topics]  # A, B, C, D
    assert all(f.model_extra["timings"]["prompt_n"] > 100 for f in firsts[1:])  # they share little
    seconds = [ask(client, messages=conversation(t, 2), max_tokens=8) for t in topics]  # A, B, C, D again
    with Session.open(smollm.settings) as fresh:
        for topic, again in zip(topics, seconds, strict=True):
            p1, p2 = (chat_prompt(fresh, conversation(topic, turns), None, None)[0] for turns in (1, 2))
            # only what follows the part of the prompt its first request shares
            timings = again.model_extra["timings"]
            assert timings["prompt_n"] == len(p2) - common_prefix(p1, p2) < len(p2) // 3
            assert timings["cache_n"] == common_prefix(p1, p2)
        # and the answer is the one a fresh start gives
        text = "".join(e.text for e in fresh.complete(p2, Request(max_tokens=8)))
        assert seconds[-1].choices[0].message.content == text


@pytest.mark.model
def test_six_clients_of_two_requests_each_get_a_fresh_servers_answers(smollm):
    def question(client: int, turn: int) -> list[dict]:
        return [{"role": "user", "content": f"Client {client}, question {turn}: name a fruit and a number."}]

    answers: dict = {}

    def client_loop(i: int) -> None:
        client = smollm.client()
        for turn in range(2):
            answers[i, turn] = ask(client, messages=question(i, turn), max_tokens=12).choices[0].message.content

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert sorted(answers) == [(i, turn) for i in range(6) for turn in range(2)]  # all answered, none lost
    with Session.open(smollm.settings) as fresh:  # nothing cached: each prompt prefilled from the start
        for (i, turn), text in answers.items():
            fresh.backend.truncate(0)
            prompt = chat_prompt(fresh, question(i, turn), None, None)[0]
            expected = "".join(e.text for e in fresh.complete(prompt, Request(12)))
            assert text == expected.strip(), (i, turn)


# -- the scripted model: auth, hosts, queueing -------------------------------------------------------------------
def test_api_key_and_host_checks():
    worker, running = serve(scripted_session, "scripted", api_key="sesame")
    try:
        with pytest.raises(APIStatusError) as exc:
            running.client("wrong").models.list()
        assert exc.value.status_code == 401
        assert [m.id for m in running.client("sesame").models.list().data] == ["scripted"]
        assert httpx.get(running.url + "/health").status_code == 200  # health needs no key
    finally:
        running.stop()
        worker.stop()
    worker, running = serve(scripted_session, "scripted")
    try:
        assert httpx.get(running.url + "/health", headers={"Host": "evil.example"}).status_code == 403
        assert httpx.get(running.url + "/health", headers={"Host": "localhost:1234"}).status_code == 200
        assert "access-control-allow-origin" not in httpx.get(running.url + "/health").headers
    finally:
        running.stop()
        worker.stop()


def test_queue_overflow_is_503_with_retry_after_and_nothing_is_lost():
    release = threading.Event()

    def blocking_session():
        session = scripted_session()
        complete = session.complete

        def slow(prompt, request, on_prefill=None):
            release.wait(timeout=30)
            return complete(prompt, request, on_prefill)

        session.complete = slow
        return session

    worker, running = serve(blocking_session, "scripted", queue_limit=2)
    body = {"messages": [{"role": "user", "content": "abc"}], "max_tokens": 4}
    replies = []

    def send():
        replies.append(httpx.post(running.url + "/v1/chat/completions", json=body, timeout=60))

    try:
        senders = [threading.Thread(target=send) for _ in range(3)]  # one runs (blocked), two wait
        for s in senders:
            s.start()
            time.sleep(0.3)
        refused = httpx.post(running.url + "/v1/chat/completions", json=body, timeout=60)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        release.set()
        for s in senders:
            s.join(timeout=30)
        assert [r.status_code for r in replies] == [200, 200, 200]
        assert len({json.dumps(r.json()["choices"]) for r in replies}) == 1
    finally:
        release.set()
        running.stop()
        worker.stop()


def test_same_request_and_seed_give_the_same_sampled_answer():
    # the n-gram drafter starts every request afresh, so equal requests draft alike (see the stop note on
    # drafters that learn across requests: equal in distribution, not yet equal token for token)
    worker, running = serve(scripted_session, "scripted")
    try:
        client = running.client()

        def sample(seed):
            return (
                ask(
                    client,
                    model="scripted",
                    messages=[{"role": "user", "content": "abcabc"}],
                    temperature=1.5,
                    seed=seed,
                    max_tokens=30,
                )
                .choices[0]
                .message.content
            )

        assert sample(7) == sample(7) and sample(8) == sample(8)
        assert len({sample(seed) for seed in range(6)}) > 1  # the seed does reach the sampler
    finally:
        running.stop()
        worker.stop()


STRICT = {"name": "f", "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": "0"}}}}
TOOL_ANSWER = (
    "<think>\nThe user wants the weather.\n</think>\n\nLet me check.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
)


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_and_reasoning_reach_the_client(stream):
    worker, running = serve(lambda: canned_session(TOOL_ANSWER, []), "scripted")
    try:
        client = running.client()
        fields = {
            "model": "scripted",
            "messages": [{"role": "user", "content": "Weather in Paris?"}],
            "tools": [WEATHER],
        }
        if not stream:
            reply = client.chat.completions.create(**fields)
            choice = reply.choices[0]
            message, finish = choice.message, choice.finish_reason
            content, reasoning, calls = message.content, message.model_extra["reasoning_content"], message.tool_calls
        else:
            chunks = list(client.chat.completions.create(**fields, stream=True))
            deltas = [c.choices[0].delta for c in chunks if c.choices]
            content = "".join(d.content or "" for d in deltas)
            reasoning = "".join((d.model_extra or {}).get("reasoning_content") or "" for d in deltas)
            calls = [call for d in deltas for call in d.tool_calls or []]
            finish = next(c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason)
        assert content == "Let me check." and reasoning == "The user wants the weather." and finish == "tool_calls"
        assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
            ("get_weather", {"city": "Paris"})
        ]
        assert calls[0].id.startswith("call_") and calls[0].type == "function"
    finally:
        running.stop()
        worker.stop()


def test_tool_results_and_earlier_calls_go_into_the_prompt_and_bad_tools_are_400():
    seen: list = []
    worker, running = serve(lambda: canned_session("It is sunny.", seen), "scripted")
    try:
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
        messages = [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
        ]
        reply = running.client().chat.completions.create(model="scripted", messages=messages, tools=[WEATHER])
        assert reply.choices[0].message.content == "It is sunny." and reply.choices[0].finish_reason == "stop"
        # ChatML renders no tools: they, the earlier call and its result are written in as Hermes text
        assert '<tools>\n{"type": "function", "function": {"name": "get_weather"' in seen[-1]
        assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>' in seen[-1]
        assert "<|im_start|>user\n<tool_response>\nsunny, 21 C\n</tool_response><|im_end|>" in seen[-1]
        for body, param in [
            ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
            (
                {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                "tool_choice.function.name",
            ),
            ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
            ({"functions": [{"name": "f"}]}, "functions"),
            (
                {"tools": [WEATHER, {"type": "function", "function": {**STRICT, "strict": True}}]},
                "tools[1].function.parameters",
            ),
        ]:
            body = {"messages": [{"role": "user", "content": "hi"}], **body}
            answer = httpx.post(running.url + "/v1/chat/completions", json=body, timeout=30)
            assert answer.status_code == 400 and answer.json()["error"]["param"] == param, answer.text
    finally:
        running.stop()
        worker.stop()


def test_tools_are_refused_where_the_server_answers_in_a_grammar():
    def session():
        made = canned_session("{}", [])
        made.grammar = json_object()
        return made

    worker, running = serve(session, "scripted")
    try:
        body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER]}
        answer = httpx.post(running.url + "/v1/chat/completions", json=body, timeout=30)
        assert answer.status_code == 400 and answer.json()["error"]["param"] == "tools", answer.text
        assert "--json-schema" in answer.json()["error"]["message"]
        del body["tools"]
        assert httpx.post(running.url + "/v1/chat/completions", json=body, timeout=30).status_code == 200
    finally:
        running.stop()
        worker.stop()


@pytest.mark.model
def test_a_tool_round_trip_on_the_real_model(smollm):
    client = smollm.client()
    question = [{"role": "user", "content": "What is the weather in Paris?"}]
    forced = {"type": "function", "function": {"name": "get_weather"}}
    whole = ask(client, messages=question, tools=[WEATHER], tool_choice=forced, max_tokens=80).choices[0]
    chunks = list(ask(client, messages=question, tools=[WEATHER], tool_choice=forced, max_tokens=80, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    streamed_calls = [(c.function.name, c.function.arguments) for d in deltas for c in d.tool_calls or []]
    whole_calls = [(c.function.name, c.function.arguments) for c in whole.message.tool_calls or []]
    # the streamed answer is the whole one, split the same way; the grammar (structured/tool_calls.py) makes the
    # 135M model's call one that parses, to the named function, its arguments to the tool's schema
    assert streamed_calls == whole_calls and "".join(d.content or "" for d in deltas) == (whole.message.content or "")
    assert whole.finish_reason == "tool_calls" and {name for name, _ in whole_calls} == {"get_weather"}
    assert isinstance(json.loads(whole_calls[0][1])["city"], str)
    required = ask(client, messages=question, tools=[WEATHER, TIME], tool_choice="required", max_tokens=60)
    calls = required.choices[0].message.tool_calls
    assert calls and all(c.function.name in ("get_weather", "get_time") for c in calls)
    assert all(isinstance(json.loads(c.function.arguments), dict) for c in calls)
    # the call and its result go back in; the model answers in text
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    result = [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny, 21 degrees."},
    ]
    after = ask(client, messages=question + result, tools=[WEATHER], max_tokens=24)
    before = ask(client, messages=question, tools=[WEATHER], max_tokens=1)
    assert after.usage.prompt_tokens > before.usage.prompt_tokens + 20 and after.choices[0].message.content


def test_only_loopback_binds_without_a_key():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")


@pytest.mark.parametrize("idle_s,requests,saved", [(0.05, 1, 1), (60.0, 2, 0)])
def test_the_engine_saves_the_conversation_once_no_request_follows_an_answer(monkeypatch, idle_s, requests, saved):
    """worker.IDLE_S after an answer with nothing queued, the engine thread saves the live conversation
    (Session.idle), once however long it then waits; requests that come sooner do not wait for a save."""
    from localspec.apps.server import worker as worker_module

    monkeypatch.setattr(worker_module, "IDLE_S", idle_s)
    calls = []

    def session():
        made = scripted_session()
        made.idle = lambda: calls.append(threading.current_thread().name)
        return made

    worker, running = serve(session, "scripted")
    try:
        client = running.client()
        message = [{"role": "user", "content": "abc"}]
        for _ in range(requests):
            client.chat.completions.create(model="scripted", messages=message, max_tokens=4)
        time.sleep(0.5)
        assert calls == ["localspec-engine"] * saved  # on the engine thread
    finally:
        running.stop()
        worker.stop()
