"""Request bodies of /v1/chat/completions and /v1/completions, checked field by field.

Unknown fields are ignored (clients send `user`, `metadata`, ...). A known field localspec cannot honour
exactly is refused with a 400 naming it, rather than silently changing the answer: more than one choice,
logit bias, penalties, the old `functions` API. Structured output comes as OpenAI's `response_format`
(json_object, json_schema) or llama-server's `json_schema` and `grammar` (GBNF) fields, one of them per request.
docs/serve.md has the table of every field real clients send.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from localspec.apps.server.errors import bad_request
from localspec.apps.server.tools import ToolError, check_tools
from localspec.chat.fim import Infill
from localspec.errors import ConfigError
from localspec.session import MAX_LOGPROBS, Request
from localspec.structured import grammar as structured
from localspec.structured.grammar import Grammar
from localspec.structured.tool_calls import SchemaError, ToolSpec, tool_spec

# field -> what a request may send without localspec changing the model's distribution
_REFUSED = {
    "n": (1, None),
    "logit_bias": (None, {}),
    "presence_penalty": (0, 0.0, None),
    "frequency_penalty": (0, 0.0, None),
    "repetition_penalty": (1, 1.0, None),
    "best_of": (1, None),
    "echo": (False, None),
    "functions": (None, []),
    "function_call": (None,),
}
_WHY = {
    "n": "one choice per request is supported; send n = 1 (or leave it out)",
    "functions": "the deprecated 'functions' API is not supported; send 'tools' instead",
    "function_call": "the deprecated 'function_call' is not supported; send 'tool_choice' instead",
}


@dataclass(frozen=True)
class Generation:
    """A checked request: the prompt's source and the generation settings."""

    model: str | None
    messages: list[dict] | None  # chat
    prompt: str | None  # completions
    request: Request
    stream: bool
    include_usage: bool
    tools: list[dict] | None = None  # offered to the model (None: none, or tool_choice 'none')
    tool_spec: ToolSpec | None = None  # what the calls follow: tool_choice, the functions' schemas
    one_call: bool = False  # parallel_tool_calls: false — the answer's first call only
    infill: Infill | None = None  # fill in the middle: /infill, or /v1/completions with a `suffix`
    native: bool = False  # answered in llama-server's own format (/infill), not OpenAI's


def parse_chat(body) -> Generation:
    body = _object(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty list of {role, content} objects", "messages")
    tools, choice = body.get("tools") or None, body.get("tool_choice")
    try:
        check_tools(tools, choice)
    except ToolError as exc:
        raise bad_request(exc.message, exc.field) from None
    if choice == "none":
        tools, choice = None, None
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise bad_request("'parallel_tool_calls' must be true or false", "parallel_tool_calls")
    logprobs = _chat_logprobs(body)
    checked = [_message(m, i) for i, m in enumerate(messages)]
    one_call = parallel is False
    request, stream, usage = _common(body, logprobs)
    if tools and request.grammar is not None:
        raise bad_request("structured output and 'tools' in one request are not supported yet; send one", "tools")
    try:
        spec = tool_spec(tools, choice, one_call) if tools else None
    except SchemaError as exc:  # a strict function whose parameter schema cannot be used
        raise bad_request(str(exc), f"tools[{exc.index}].function.parameters") from None
    return Generation(_model(body), checked, None, request, stream, usage, tools, spec, one_call)


def parse_completion(body) -> Generation:
    body = _object(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise bad_request("'prompt' must be a string (one prompt per request)", "prompt")
    logprobs = body.get("logprobs")
    if isinstance(logprobs, bool):  # some clients send the chat API's boolean here
        logprobs = 0 if logprobs else None
    logprobs = _number({"logprobs": logprobs}, "logprobs", int, 0, MAX_LOGPROBS)
    suffix = body.get("suffix")
    if suffix is not None and not isinstance(suffix, str):
        raise bad_request("'suffix' must be a string (the text after the completion)", "suffix")
    infill = Infill(prefix=prompt, suffix=suffix) if suffix else None
    return Generation(_model(body), None, prompt, *_common(body, logprobs), infill=infill)


def parse_infill(body) -> Generation:
    """llama-server's /infill (llama.vscode, llama.vim): `input_prefix` and `input_suffix`, the other files in
    `input_extra` ([{filename, text}]), a `prompt` after the prefix; `n_predict` (or `max_tokens`), `n_indent`
    and `t_max_predict_ms` (where the completion ends: engine/stopping.py) and the sampler fields as on
    /v1/completions."""
    body = _object(body)
    prefix, suffix = _text(body, "input_prefix", "", True), _text(body, "input_suffix", "", True)
    extra = body.get("input_extra") or []
    if not isinstance(extra, list):
        raise bad_request('\'input_extra\' must be an array of {"filename": string, "text": string}', "input_extra")
    files = []
    for i, chunk in enumerate(extra):
        where = f"input_extra[{i}]"
        if not isinstance(chunk, dict):
            raise bad_request(f'{where} must be an object {{"filename": string, "text": string}}', where)
        name = _text(chunk, "filename", where, False) if "filename" in chunk else "tmp"
        files.append((name, _text(chunk, "text", where, True)))
    predict = _number(body, "n_predict", int, -1)
    if predict is not None and "max_tokens" not in body:
        # -1: as much as the context holds; 0 (editors warming the cache with their files): one token, as
        # llama-server answers it
        body = {**body, "max_tokens": max(predict, 1) if predict >= 0 else None}
    infill = Infill(prefix, suffix, tuple(files), _text(body, "prompt", "", False))
    request, stream, usage = _common(body, None)
    limit = _number(body, "t_max_predict_ms", int, 0)
    request = replace(request, min_indent=_number(body, "n_indent", int, 0) or 0,
                      time_limit_s=limit / 1e3 if limit else None)  # fmt: skip
    return Generation(_model(body), None, None, request, stream, usage, infill=infill, native=True)


def _chat_logprobs(body: dict) -> int | None:
    """Chat's `logprobs` (true/false) and `top_logprobs` (0-20, with logprobs true): the alternatives per token,
    or None for no log-probabilities."""
    wanted = body.get("logprobs")
    if wanted is not None and not isinstance(wanted, bool):
        raise bad_request("'logprobs' must be true or false ('top_logprobs' says how many alternatives)", "logprobs")
    top = _number(body, "top_logprobs", int, 0, MAX_LOGPROBS)
    if top and not wanted:
        raise bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    return (top or 0) if wanted else None


def _object(body) -> dict:
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    for name, allowed in _REFUSED.items():
        if name in body and body[name] not in allowed:
            raise bad_request(_WHY.get(name, f"'{name}' is not supported: it would change the output"), name)
    return body


def _grammar(body: dict) -> Grammar | None:
    """The request's structured output: `response_format`, or llama-server's `json_schema` / `grammar`."""
    given = [name for name in ("response_format", "json_schema", "grammar") if body.get(name) is not None]
    fmt = body.get("response_format")
    if fmt is not None and isinstance(fmt, dict) and fmt.get("type") == "text":
        given.remove("response_format")
    if len(given) > 1:
        raise bad_request(f"send one of {', '.join(repr(g) for g in given)}, not several", given[1])
    if not given:
        return None
    name = given[0]
    try:
        if name == "grammar":
            if not isinstance(body["grammar"], str):
                raise bad_request("'grammar' must be a string (a GBNF grammar)", "grammar")
            return structured.gbnf(body["grammar"], "'grammar'")
        if name == "json_schema":
            return structured.json_schema(body["json_schema"], "'json_schema'")
        return _response_format(fmt)
    except ConfigError as exc:
        raise bad_request(str(exc), name) from None


def _response_format(fmt) -> Grammar:
    kinds = "'text', 'json_object' or 'json_schema'"
    if not isinstance(fmt, dict) or fmt.get("type") not in ("json_object", "json_schema"):
        raise bad_request(f"'response_format' must be an object whose type is {kinds}", "response_format")
    if fmt["type"] == "json_object":  # llama-server also takes a schema here
        schema = fmt.get("schema")
        return structured.json_object() if schema is None else structured.json_schema(schema, "response_format.schema")
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        raise bad_request(
            "'response_format' json_schema needs {json_schema: {name, schema: {...}, strict}}",
            "response_format.json_schema.schema",
        )
    return structured.json_schema(spec["schema"], "response_format.json_schema.schema")


def _model(body: dict) -> str | None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise bad_request("'model' must be a string", "model")
    return model


def _message(message, i: int) -> dict:
    where = f"messages[{i}]"
    roles = ("system", "user", "assistant", "developer", "tool")
    if not isinstance(message, dict) or message.get("role") not in roles:
        raise bad_request(f"{where} must be an object with role system, user, assistant or tool", where)
    role = "system" if message["role"] == "developer" else message["role"]
    content = message.get("content")
    if isinstance(content, list):  # content parts: text only
        if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            raise bad_request(f"{where}.content: only text parts are supported", f"{where}.content")
        content = "".join(p["text"] for p in content)
    if content is None and role == "assistant":
        content = ""
    if not isinstance(content, str):
        raise bad_request(f"{where}.content must be a string", f"{where}.content")
    out = {"role": role, "content": content}
    if role == "tool":
        out["tool_call_id"] = _text(message, "tool_call_id", where, required=True)
    if role == "assistant" and message.get("tool_calls"):
        out["tool_calls"] = [_call(call, f"{where}.tool_calls[{j}]") for j, call in enumerate(message["tool_calls"])]
    return out


def _call(call, where: str) -> dict:
    """An earlier answer's tool call, as the client sends it back."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or call.get("type", "function") != "function":
        raise bad_request(f"{where} must be {{id, type: 'function', function: {{name, arguments}}}}", where)
    name, arguments = _text(fn, "name", where + ".function", True), fn.get("arguments", "{}")
    if not isinstance(arguments, str):
        raise bad_request(f"{where}.function.arguments must be a JSON string", f"{where}.function.arguments")
    function = {"name": name, "arguments": arguments}
    return {"id": _text(call, "id", where, False), "type": "function", "function": function}


def _text(obj: dict, key: str, where: str, required: bool) -> str:
    value, name = obj.get(key), f"{where}.{key}" if where else key
    if value is None and not required:
        return ""
    if value is None:
        raise bad_request(f"'{name}' is required", name)
    if not isinstance(value, str):
        raise bad_request(f"'{name}' must be a string", name)
    return value


def _number(body: dict, name: str, kind: type, low: float | None = None, high: float | None = None):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float) if kind is float else int):
        raise bad_request(f"'{name}' must be {'a number' if kind is float else 'an integer'}", name)
    if (low is not None and value < low) or (high is not None and value > high):
        raise bad_request(f"'{name}' must be in [{low}, {high if high is not None else '∞'}], got {value}", name)
    return kind(value)


def _stop(body: dict) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if isinstance(stop, list) and len(stop) <= 16 and all(isinstance(s, str) and s for s in stop):
        return tuple(stop)
    raise bad_request("'stop' must be a string or a list of up to 16 non-empty strings", "stop")


def _common(body: dict, logprobs: int | None) -> tuple[Request, bool, bool]:
    tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    name = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    request = Request(
        max_tokens=_number({name: tokens}, name, int, 1),
        temperature=_number(body, "temperature", float, 0, 2),
        top_k=_number(body, "top_k", int, 0),
        top_p=_number(body, "top_p", float, 0, 1),
        min_p=_number(body, "min_p", float, 0, 1),
        stop=_stop(body),
        seed=_number(body, "seed", int, 0),
        logprobs=logprobs,
        grammar=_grammar(body),
    )
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad_request("'stream' must be true or false", "stream")
    options = body.get("stream_options")
    if options is not None and not stream:
        raise bad_request("'stream_options' is only allowed with \"stream\": true", "stream_options")
    options = options or {}
    if not isinstance(options, dict):
        raise bad_request("'stream_options' must be an object", "stream_options")
    return request, stream, bool(options.get("include_usage"))
