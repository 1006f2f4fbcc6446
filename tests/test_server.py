"""`localspec serve` through the official openai client, on a server started in the test (loopback only):
the real SmolLM2-135M for answers, a scripted model for auth, queueing and refusals."""

import json
import threading
import time

import httpx
import pytest
from fakes import ScriptedBackend
from openai import APIStatusError, OpenAI

from localspec.cli import build_parser
from localspec.config import settings_from_args
from localspec.drafters.ngram import NgramDrafter
from localspec.sampling import SamplingParams
from localspec.server.run import build, is_loopback
from localspec.session import Request, Session
from localspec.types import common_prefix

uvicorn = pytest.importorskip("uvicorn")


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
    worker, app = build(open_session, model, kw.pop("api_key", None), True, False, **kw)
    return worker, Running(app)


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
        ({"logprobs": True}, 400, "logprobs"),
        ({"response_format": {"type": "json_object"}}, 400, "response_format"),
        ({"temperature": "hot"}, 400, "temperature"),
        ({"max_tokens": 100000}, 400, "messages"),
        ({"model": "gpt-4"}, 404, "model"),
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
            p1, p2 = fresh.chat_prompt(conversation(topic, 1)), fresh.chat_prompt(conversation(topic, 2))
            # only what follows the part of the prompt its first request shares (the last prompt token is the
            # first step's)
            assert again.model_extra["timings"]["prompt_n"] == len(p2) - 1 - common_prefix(p1, p2) < len(p2) // 3
        # and the answer is the one a fresh start gives
        text = "".join(e.text for e in fresh.complete(p2, Request(max_tokens=8)))
        assert seconds[-1].choices[0].message.content == text


# -- the scripted model: auth, hosts, queueing -------------------------------------------------------------------
def scripted_session() -> Session:
    backend = ScriptedBackend(vocab_size=20, eog=19)
    return Session(backend, NgramDrafter(1, 3), SamplingParams(temperature=0), "scripted", max_tokens=8)


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


def test_only_loopback_binds_without_a_key():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")
