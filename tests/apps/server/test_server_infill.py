"""Fill in the middle through `localspec serve`: llama-server's `/infill` (whole and streamed, its own reply
format) and `/v1/completions` with `suffix` through the openai client, through llama.cpp on a tiny random GGUF
written here with Qwen2.5-Coder's FIM markers (SmolLM2 has none: llama.cpp finds the markers by their text, as
in Qwen2.5-Coder's files); bad requests and a model without FIM tokens on the scripted model."""

import json

import httpx
import pytest
from support.server import scripted_session, serve
from support.tiny_gguf import write_tiny_f32_llama

from localspec.apps.cli import build_parser
from localspec.config import settings_from_args
from localspec.session import Session

uvicorn = pytest.importorskip("uvicorn")

PREFIX = "def fibonacci(n):\n    if n < 2:\n        return n\n"
SUFFIX = "\n\nprint(fibonacci(10))\n"
EXTRA = [{"filename": "maths.py", "text": "def factorial(n):\n    if n < 2:\n        return 1\n"}]


FIM = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>")


@pytest.fixture(scope="module")
def coder(tmp_path_factory):
    cache = tmp_path_factory.mktemp("suffix")
    model = write_tiny_f32_llama(tmp_path_factory.mktemp("model") / "tiny-coder.gguf", specials=FIM)
    flags = ["serve", "--model", str(model), "--temperature", "0", "--ctx", "2048"]
    settings = settings_from_args(build_parser().parse_args(flags))
    settings = type(settings)(
        **{**settings.__dict__, "drafters": settings.drafters.with_options("suffix", cache_dir=str(cache))}
    )
    worker, running = serve(lambda: Session.open(settings), settings.model)
    yield running
    running.stop()
    worker.stop()


def infill(running, **body) -> httpx.Response:
    fields = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 24, "temperature": 0}
    return httpx.post(running.url + "/infill", json={**fields, **body}, timeout=120)


def test_infill_answers_in_llama_servers_format_whole_and_streamed(coder):
    whole = infill(coder, input_extra=EXTRA)
    assert whole.status_code == 200, whole.text
    reply = whole.json()
    assert reply["stop"] is True and reply["stop_type"] in ("eos", "limit") and reply["content"]
    assert reply["tokens_predicted"] == reply["timings"]["predicted_n"] > 0
    held = len(PREFIX) + len(SUFFIX) + len(EXTRA[0]["text"]) + len("maths.py\n")  # a byte vocabulary
    assert reply["tokens_evaluated"] > held  # the other file was in the prompt, with the markers
    assert reply["speculation"]["drafter"] == "suffix"
    events = [
        json.loads(line.removeprefix("data: "))
        for line in infill(coder, input_extra=EXTRA, stream=True).text.split("\n\n")
        if line.startswith("data: ")
    ]
    assert all(e["stop"] is False for e in events[:-1]) and events[-1]["stop"] is True
    assert events[-1]["tokens_cached"] >= reply["tokens_evaluated"] - 1  # the same prompt: reused from the cache
    assert "".join(e["content"] for e in events) == reply["content"]  # greedy: the same middle


def test_completions_with_a_suffix_fill_the_middle_like_infill(coder):
    client = coder.client()
    done = client.completions.create(model="tiny", prompt=PREFIX, suffix=SUFFIX, max_tokens=24, temperature=0)
    assert done.choices[0].text == infill(coder).json()["content"]  # the same prompt, the same greedy middle
    plain = client.completions.create(model="tiny", prompt=PREFIX, max_tokens=24, temperature=0)
    # the prompt held the suffix (a byte vocabulary: one token per byte), the three FIM markers and the
    # repository header (<|repo_name|>myproject, <|file_sep|>filename)
    header = 1 + len("myproject\n") + 1 + len("filename\n")
    assert done.usage.prompt_tokens == plain.usage.prompt_tokens + len(SUFFIX) + 3 + header


def test_bad_infill_requests_name_the_field_and_a_model_without_fim_tokens_says_so():
    worker, running = serve(scripted_session, "scripted")
    try:
        cases = [
            ({"input_suffix": "b"}, "input_prefix", "'input_prefix' is required"),
            ({"input_prefix": "a", "input_suffix": 3}, "input_suffix", "must be a string"),
            ({"input_prefix": "a", "input_suffix": "b", "input_extra": "c"}, "input_extra", "must be an array"),
            ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "x"}]}, "input_extra[0].text", ""),
            ({"input_prefix": "a", "input_suffix": "b", "n_predict": "8"}, "n_predict", "an integer"),
            ({"input_prefix": "a", "input_suffix": "b", "n_indent": -1}, "n_indent", "must be in"),
            ({"input_prefix": "a", "input_suffix": "b", "t_max_predict_ms": 0.5}, "t_max_predict_ms", "an integer"),
        ]
        for body, param, says in cases:
            reply = httpx.post(running.url + "/infill", json=body, timeout=30)
            assert reply.status_code == 400, reply.text
            error = reply.json()["error"]
            assert error["param"] == param and says in error["message"]
        for path, body in (("/infill", {"input_prefix": "ab", "input_suffix": "c"}),
                           ("/v1/completions", {"prompt": "ab", "suffix": "c"})):  # fmt: skip
            reply = httpx.post(running.url + path, json=body, timeout=30)
            assert reply.status_code == 400 and "no fill-in-the-middle tokens" in reply.json()["error"]["message"]
        bad = httpx.post(running.url + "/v1/completions", json={"prompt": "ab", "suffix": 5}, timeout=30)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "suffix"
        plain = httpx.post(running.url + "/v1/completions", json={"prompt": "ab", "suffix": ""}, timeout=30)
        assert plain.status_code == 200  # an empty suffix is a plain completion, as OpenAI's API takes it
    finally:
        running.stop()
        worker.stop()
