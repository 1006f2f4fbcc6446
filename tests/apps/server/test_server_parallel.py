"""`serve --parallel N` (apps/server/slots.py) through the real openai client on the real SmolLM2-135M: several
requests answered at once with the answers one request at a time gives (up to near ties of batched kernels,
tests/backends/llama_cpp/test_llama_slots.py), one client's overflow or disconnect ending only its own answer,
and the drafters and modes slots cannot run refused at start."""

import threading

import httpx
import pytest
from openai import BadRequestError
from support.server import serve

from localspec.apps.cli import build_parser
from localspec.apps.server.shaping import chat_prompt
from localspec.config import settings_from_args
from localspec.engine.exact import DEFAULT_MARGIN
from localspec.errors import ConfigError
from localspec.session import Request, Session

pytestmark = pytest.mark.model
QUESTIONS = ["Name three colours.", "What is 2 + 2?", "Name a fruit.", "Say hello in French."]


def settings_for(*flags, cache):
    args = build_parser().parse_args(["serve", "--temperature", "0", "--ctx", "4096", *flags])
    settings = settings_from_args(args)
    return type(settings)(
        **{**settings.__dict__, "drafters": settings.drafters.with_options("suffix", cache_dir=str(cache))}
    )


@pytest.fixture(scope="module")
def parallel(tmp_path_factory):
    settings = settings_for(cache=tmp_path_factory.mktemp("suffix"))
    worker, running = serve(lambda: Session.open(settings), settings.model, parallel=4)
    running.settings, running.worker = settings, worker
    yield running
    running.stop()
    worker.stop()


def ask(client, question: str, **kw):
    messages = [{"role": "user", "content": question}]
    return client.chat.completions.create(
        model="m", messages=messages, max_tokens=24, temperature=0, logprobs=True, top_logprobs=2, **kw
    )


def at_once(running, questions) -> dict:
    answers, errors = {}, {}

    def one(i, question):
        try:
            answers[i] = ask(running.client(), question)
        except Exception as exc:  # noqa: BLE001 - the test reports it
            errors[i] = exc

    threads = [threading.Thread(target=one, args=(i, q)) for i, q in enumerate(questions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    return answers


def alone(session, question: str) -> tuple[list[bytes], list[float]]:
    """The answer's token bytes decoding alone (None: its end), and each token's top-two logit gap."""
    session.backend.truncate(0)
    prompt = chat_prompt(session, [{"role": "user", "content": question}], None, None)[0]
    pieces, gaps = [], []
    for event in session.complete(prompt, Request(24, logprobs=2)):
        # the end of the answer is None (the server reports no token for it, but its finish reason)
        pieces += [None if session.text.ends_generation(s.token) else session.backend.tokenizer.token_bytes(s.token)
                   for s in event.logprobs]  # fmt: skip
        gaps += [s.top[0][1] - s.top[1][1] for s in event.logprobs]
    return pieces, gaps


def test_four_requests_at_once_are_answered_together_as_one_at_a_time(parallel):
    batcher = parallel.worker.slots[0].backend._batcher
    before = batcher.batched
    answers = at_once(parallel, QUESTIONS)
    assert batcher.batched > before, "the requests' steps shared batches"
    with Session.open(parallel.settings) as lone:
        for i, question in enumerate(QUESTIONS):
            pieces, gaps = alone(lone, question)
            choice = answers[i].choices[0]
            got = [bytes(t.bytes) for t in choice.logprobs.content] + [None] * (choice.finish_reason == "stop")
            # the same tokens, or they leave the lone answer only where its top two were a near tie (a batch of
            # several slots computes a row with other kernels than a lone step)
            diverged = next((j for j, (a, b) in enumerate(zip(got, pieces, strict=False)) if a != b), None)
            why = (i, diverged, len(got), len(pieces), answers[i].usage.completion_tokens, got[-3:], pieces[-3:])
            assert (got == pieces) if diverged is None else gaps[diverged] < DEFAULT_MARGIN["llama.cpp"], why
    figures = answers[0].model_extra["timings"]
    assert figures["predicted_n"] == answers[0].usage.completion_tokens


def test_one_clients_overflow_and_another_leaving_end_only_their_own(parallel):
    client, results = parallel.client(), {}

    def overflow():
        try:
            ask(client, "word " * 3000)  # more than a slot's 1,024 tokens
        except BadRequestError as exc:
            results["overflow"] = exc

    def leave():
        body = {"messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 300, "stream": True}
        with httpx.stream("POST", parallel.url + "/v1/chat/completions", json=body, timeout=60) as reply:
            lines = reply.iter_lines()
            results["left"] = next(lines).startswith("data: ")

    def stay():
        results["stay"] = ask(client, QUESTIONS[0])

    threads = [threading.Thread(target=f) for f in (overflow, leave, stay)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert results["overflow"].status_code == 400 and "context" in str(results["overflow"])
    assert results["left"] and results["stay"].choices[0].finish_reason in ("stop", "length")
    assert results["stay"].usage.completion_tokens > 0
    assert ask(client, QUESTIONS[1]).choices[0].message.content  # and the server goes on


def test_what_slots_cannot_run_is_refused_at_start(tmp_path):
    settings = settings_for("--exact", cache=tmp_path)
    with pytest.raises(ConfigError, match="--exact"):
        serve(lambda: Session.open(settings), settings.model, parallel=2)
    settings = settings_for("--drafter", "lookahead", cache=tmp_path)
    with pytest.raises(ConfigError, match="trees"):
        serve(lambda: Session.open(settings), settings.model, parallel=2)
    settings = settings_for(cache=tmp_path)
    with pytest.raises(ConfigError, match="at least 1"):
        serve(lambda: Session.open(settings), settings.model, parallel=0)


def test_the_slots_draft_from_one_memory_of_past_answers(parallel):
    """Every slot's suffix drafter keeps its past answers in one shared store and tree (drafters/suffix/past.py)."""
    drafters = [s.drafter for s in parallel.worker.slots]
    assert len(drafters) == 4 and all(d.name == "suffix" for d in drafters)
    assert len({id(d.past) for d in drafters}) == 1 and drafters[0].past.users == 4
