"""Structured output through `localspec serve` on the real SmolLM2-135M, asked as clients ask: the OpenAI SDK's
`response_format` (json_schema through `chat.completions.parse` with a Pydantic model, and json_object),
llama-server's `json_schema` and `grammar` (GBNF) body fields on chat and /v1/completions. The answers must
parse and follow the schema at T = 0 and T = 0.8, where the unconstrained 135M model rarely writes JSON at all."""

import json
import re
from typing import Annotated

import httpx
import pytest
from pydantic import BaseModel, Field

from localspec.apps.cli import build_parser
from localspec.config import settings_from_args
from localspec.session import Session

uvicorn = pytest.importorskip("uvicorn")
from support.server import serve  # noqa: E402


class Person(BaseModel):  # bounded: the 135M model, held to a schema, may otherwise list one language forever
    name: str = Field(max_length=40)
    age: int
    languages: list[Annotated[str, Field(max_length=20)]] = Field(max_length=3)


QUESTION = [{"role": "user", "content": "Describe Ada Lovelace: her name, age at death and the languages she knew."}]


@pytest.fixture(scope="module")
def smollm(tmp_path_factory):
    cache = tmp_path_factory.mktemp("suffix")
    args = build_parser().parse_args(["serve", "--ctx", "2048"])  # the server's own default temperature
    settings = settings_from_args(args)
    settings = type(settings)(
        **{**settings.__dict__, "drafters": settings.drafters.with_options("suffix", cache_dir=str(cache))}
    )
    worker, running = serve(lambda: Session.open(settings), settings.model)
    yield running
    running.stop()
    worker.stop()


@pytest.mark.model
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_parse_with_a_pydantic_model_gets_an_answer_that_follows_the_schema(smollm, temperature):
    client = smollm.client()
    for seed in (1, 2):
        done = client.chat.completions.parse(
            model="smollm2-135m",
            messages=QUESTION,
            response_format=Person,
            max_tokens=200,
            temperature=temperature,
            seed=seed,
        )
        choice = done.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        person = choice.message.parsed  # the SDK validated it against the Pydantic model
        assert isinstance(person, Person) and isinstance(person.age, int)
        extra = done.model_extra["speculation"]
        assert extra["drafter"] == "grammar+suffix" and extra["grammar"]["kind"] == "json_schema"
        assert extra["grammar"]["forced_drafted"] > 0 and extra["grammar"]["masks"] >= done.usage.completion_tokens


@pytest.mark.model
def test_json_object_and_llama_server_fields(smollm):
    client = smollm.client()
    done = client.chat.completions.create(
        model="smollm2-135m",
        messages=[{"role": "user", "content": "Give me a JSON object about a cat."}],
        response_format={"type": "json_object"},
        max_tokens=120,
        temperature=0,
    )
    if done.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(done.choices[0].message.content), dict)
    else:  # cut by max_tokens: still a valid beginning of an object
        assert done.choices[0].message.content.startswith("{")
    body = {
        "messages": QUESTION,
        "json_schema": {
            "type": "object",
            "properties": {"age": {"type": "integer"}},
            "required": ["age"],
            "additionalProperties": False,
        },
        "max_tokens": 40,
        "temperature": 0.8,
        "seed": 3,
    }
    reply = httpx.post(smollm.url + "/v1/chat/completions", json=body, timeout=120).json()
    assert isinstance(json.loads(reply["choices"][0]["message"]["content"])["age"], int)
    for seed in range(3):
        body = {"prompt": "Is the sky blue? Answer:", "grammar": 'root ::= " yes" | " no"', "seed": seed}
        reply = httpx.post(smollm.url + "/v1/completions", json=body, timeout=120).json()
        assert reply["choices"][0]["text"] in (" yes", " no") and reply["choices"][0]["finish_reason"] == "stop"


@pytest.mark.model
def test_structured_output_with_tools_is_refused_clearly(smollm):
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {}}}}
    body = {"messages": QUESTION, "tools": [tool], "response_format": {"type": "json_object"}}
    reply = httpx.post(smollm.url + "/v1/chat/completions", json=body, timeout=60)
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "tools"


@pytest.mark.model
@pytest.mark.parametrize("stream", [False, True])
def test_a_grammars_answer_keeps_its_white_space_on_chat(smollm, stream):
    """A chat answer's content is otherwise trimmed; under a grammar it is what the grammar matched: a list whose
    items end in a newline ends in one (llama-server's answers do; trimmed, they failed the grammar's own check)."""
    grammar = 'root ::= " " item item\nitem ::= "- " [a-z ]+ "\\n"\n'
    body = {"messages": QUESTION, "grammar": grammar, "max_tokens": 60, "temperature": 0, "stream": stream}
    with httpx.stream("POST", smollm.url + "/v1/chat/completions", json=body, timeout=120) as reply:
        if stream:
            chunks = [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: {")]
            text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
            finish = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1]
        else:
            choice = json.loads(reply.read())["choices"][0]
            text, finish = choice["message"]["content"], choice["finish_reason"]
    assert finish == "stop", text
    assert re.fullmatch(r" (- [a-z ]+\n){2}", text), repr(text)
