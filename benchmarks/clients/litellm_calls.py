"""LiteLLM's OpenAI-compatible provider (`openai/NAME` with `api_base`), what several agents use underneath: a
chat, a streamed chat, a tool call and structured output (`response_format` json_schema, strict). Runs inside
the LiteLLM venv: `python litellm_calls.py BASE_URL MODEL` prints one JSON object."""

import json
import os
import sys
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no fetch of the price list from the internet

import litellm  # noqa: E402

REQUIREMENT = "litellm==1.110.2"
COUNTRY = {
    "type": "object",
    "properties": {"capital": {"type": "string"}, "population": {"type": "integer"}},
    "required": ["capital", "population"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def main(base: str, model: str) -> dict:
    common = {"model": f"openai/{model}", "api_base": base, "api_key": "sk-local", "temperature": 0}
    out = {}
    started = time.perf_counter()
    reply = litellm.completion(
        messages=[{"role": "user", "content": "Name three primary colours."}], max_tokens=40, **common
    )
    out["chat"] = {
        "content": reply.choices[0].message.content,
        "finish_reason": reply.choices[0].finish_reason,
        "usage": dict(reply.usage),
        "wall_s": round(time.perf_counter() - started, 2),
    }
    started, pieces, last = time.perf_counter(), [], None
    stream = litellm.completion(
        messages=[{"role": "user", "content": "Count from 1 to 10."}],
        max_tokens=60,
        stream=True,
        stream_options={"include_usage": True},
        **common,
    )
    for chunk in stream:
        last = chunk
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    usage = getattr(last, "usage", None)
    out["stream"] = {
        "content": "".join(pieces),
        "chunks": len(pieces),
        "usage": dict(usage) if usage else None,
        "wall_s": round(time.perf_counter() - started, 2),
    }
    started = time.perf_counter()
    reply = litellm.completion(
        messages=[{"role": "user", "content": "What is the weather in Paris right now?"}],
        tools=[WEATHER],
        tool_choice="auto",
        max_tokens=80,
        **common,
    )
    calls = reply.choices[0].message.tool_calls or []
    out["tool_call"] = {
        "calls": [{"name": c.function.name, "arguments": c.function.arguments} for c in calls],
        "finish_reason": reply.choices[0].finish_reason,
        "wall_s": round(time.perf_counter() - started, 2),
    }
    started = time.perf_counter()
    reply = litellm.completion(
        messages=[{"role": "user", "content": "Give the capital and population of France."}],
        response_format={"type": "json_schema", "json_schema": {"name": "country", "strict": True, "schema": COUNTRY}},
        max_tokens=80,
        **common,
    )
    content = reply.choices[0].message.content or ""
    try:
        value = json.loads(content)
        valid = set(value) == {"capital", "population"} and isinstance(value["population"], int)
    except (ValueError, TypeError):
        valid = False
    out["response_format"] = {"content": content, "valid": valid, "wall_s": round(time.perf_counter() - started, 2)}
    out["ok"] = bool(
        valid
        and out["chat"]["content"]
        and out["stream"]["chunks"] > 1
        and out["stream"]["usage"]
        and any(c["name"] == "get_weather" and "Paris" in c["arguments"] for c in out["tool_call"]["calls"])
    )
    out["version"] = __import__("importlib.metadata").metadata.version("litellm")
    return out


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2]), default=str))
