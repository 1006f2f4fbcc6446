"""Tool calling for /v1/chat/completions: tools into the prompt, calls and reasoning out of the answer.

Two answer formats: "hermes" (Qwen2.5/Qwen3/ChatML: `<tool_call>{"name", "arguments"}</tool_call>` blocks) and
"llama3" (Llama 3.1+: the whole answer is `{"name", "parameters"}` JSON, maybe after `<|python_tag|>`). A leading
`<think>...</think>` (or the template's own markers) is reasoning. parse_answer reads a whole answer;
AnswerSplitter reads it as it streams and gives the same content, reasoning and calls however the text is
chopped. Stdlib only: no engine imports.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field

THINK, END_THINK, CALL, END_CALL, PYTHON_TAG = "<think>", "</think>", "<tool_call>", "</tool_call>", "<|python_tag|>"
FENCE = "```json"  # Qwen2.5-Coder answers a call as a fenced JSON object instead of a <tool_call> block
_FENCED = re.compile(r"```json\s*(.*?)\s*```", re.S)
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_USES_TOOLS = re.compile(r"\{[%{][^}]*\btools\b")
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_SEPARATORS = re.compile(r"[\s;]*")
_TOOL = "{type: 'function', function: {name, description?, parameters?}}"
_CHOICE = "'none', 'auto', 'required' or {type: 'function', function: {name}}"


class ToolError(ValueError):
    """A malformed `tools` or `tool_choice`; `field` names the offending field (OpenAI's error `param`)."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.message, self.field = message, field


def tool_format(template: str | None) -> str:
    """Answer format of a chat template: "llama3" (Llama 3.1 style), else "hermes" (also for no tool support)."""
    t = template or ""
    llama = PYTHON_TAG in t or "<|eom_id|>" in t or ('"parameters"' in t and "Environment: ipython" in t)
    return "llama3" if llama else "hermes"


def template_renders_tools(template: str | None) -> bool:
    """Whether the Jinja template uses the `tools` variable (else prepare_messages writes the tools in)."""
    return bool(template and _USES_TOOLS.search(template))


def opens_think(prompt: str, start: str = THINK) -> bool:
    """Whether the rendered prompt already opened the reasoning (then pass in_think=True)."""
    return prompt.rstrip().endswith(start)


def check_tools(tools, tool_choice) -> None:
    """Raise ToolError unless `tools` is None or a list of function tools and `tool_choice` is valid for them."""
    if not isinstance(tools if tools is not None else [], list):
        raise ToolError(f"'tools' must be a list of {_TOOL} objects", "tools")
    names = [_check_tool(tool, i) for i, tool in enumerate(tools or [])]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise ToolError(f"tool names must be unique; sent more than once: {', '.join(twice)}", "tools")
    if tool_choice is None or tool_choice in ("none", "auto"):
        return
    if not names:
        raise ToolError("'tool_choice' needs 'tools': send the tools, or leave tool_choice out", "tool_choice")
    fn = tool_choice.get("function") if isinstance(tool_choice, dict) else None
    if tool_choice != "required" and (not isinstance(fn, dict) or tool_choice.get("type") != "function"):
        raise ToolError(f"'tool_choice' must be {_CHOICE}; got {tool_choice!r}", "tool_choice")
    if fn is not None and fn.get("name") not in names:
        why = f"tool_choice names function {fn.get('name')!r}, which is not in 'tools' (there: {', '.join(names)})"
        raise ToolError(why, "tool_choice.function.name")


def _check_tool(tool, i: int) -> str:
    where = f"tools[{i}]"
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("function"), dict):
        raise ToolError(f"{where} must be {_TOOL}; got {tool!r}", where)
    fn, where = tool["function"], where + ".function"
    if not isinstance(fn.get("name"), str) or not _NAME.fullmatch(fn["name"]):
        why = "1 to 64 characters of A-Z, a-z, 0-9, '_', '.' or '-'"
        raise ToolError(f"{where}.name must be {why}; got {fn.get('name')!r}", f"{where}.name")
    for key, kind, what in (("description", str, "a string"), ("parameters", dict, "a JSON Schema object")):
        if fn.get(key) is not None and not isinstance(fn[key], kind):
            raise ToolError(f"{where}.{key} must be {what}; got {fn[key]!r}", f"{where}.{key}")
    return fn["name"]


def prepare_messages(
    messages: list[dict], tools: list[dict] | None, template: str | None
) -> tuple[list[dict], list[dict] | None]:
    """(messages, tools) for the chat template: tools and calls as HF templates take them when the template renders
    tools itself; else (tools None) written into the messages as Hermes text, results as user turns."""
    tools = tools or None
    if tools is None and not any(m.get("role") == "tool" or m.get("tool_calls") for m in messages):
        return messages, None
    if template_renders_tools(template):
        return [_for_template(m) for m in messages], tools
    out: list[dict] = []
    for m, previous in zip(messages, [{}, *messages], strict=False):
        if m.get("role") == "tool" and previous.get("role") == "tool":  # all results in one user turn
            out[-1] = {"role": "user", "content": out[-1]["content"] + "\n" + _as_text(m)["content"]}
        else:
            out.append(_as_text(m))
    if tools:
        system = out.pop(0)["content"] if out and out[0].get("role") == "system" else ""
        out.insert(0, {"role": "system", "content": _instructions(tools) + (f"\n\n{system}" if system else "")})
    return out, None


def _arguments(arguments):
    parsed = _json(arguments) if isinstance(arguments, str) else arguments
    return parsed if isinstance(parsed, dict) else arguments or {}


def _for_template(m: dict) -> dict:
    if not m.get("tool_calls"):
        return m
    calls = []
    for call in m["tool_calls"]:
        fn = call["function"]
        args = _arguments(fn.get("arguments"))
        calls.append({**call, "name": fn["name"], "arguments": args, "function": {**fn, "arguments": args}})
    return {**m, "tool_calls": calls}


def _as_text(m: dict) -> dict:
    if m.get("role") == "tool":
        return {"role": "user", "content": f"<tool_response>\n{m.get('content') or ''}\n</tool_response>"}
    if not m.get("tool_calls"):
        return m
    calls = [
        {"name": c["function"]["name"], "arguments": _arguments(c["function"].get("arguments"))}
        for c in m["tool_calls"]
    ]
    blocks = [f"{CALL}\n{json.dumps(call, ensure_ascii=False)}\n{END_CALL}" for call in calls]
    return {"role": "assistant", "content": "\n".join(([m["content"]] if m.get("content") else []) + blocks)}


def _instructions(tools: list[dict]) -> str:
    schemas = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        f"You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{schemas}\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within <tool_call></tool_call>"
        f' XML tags:\n{CALL}\n{{"name": <function-name>, "arguments": <args-json-object>}}\n{END_CALL}'
    )


def forced_prefix(fmt: str, tool_choice) -> str:
    """Text to append after the generation prompt so that the model must call a tool ("required") or the named one;
    "" for "auto", "none" and None. The prefix is part of the answer: the caller feeds it to parse_answer or
    AnswerSplitter.push ahead of the model's text, so that they see whole calls. It skips reasoning (in_think=False)."""
    if isinstance(tool_choice, dict):
        head = f'{{"name": {json.dumps(tool_choice["function"]["name"])}, '
        head += '"parameters": ' if fmt == "llama3" else '"arguments": '
    elif tool_choice == "required":
        head = '{"name": "'
    else:
        return ""
    return head if fmt == "llama3" else f"{CALL}\n{head}"


@dataclass
class ToolCall:
    name: str
    arguments: str  # a JSON object's text
    id: str = field(default_factory=lambda: "call_" + secrets.token_hex(12))

    def to_openai(self, index: int | None = None) -> dict:
        out = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return out if index is None else {"index": index, **out}


def _json(text: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _call(obj) -> ToolCall | None:
    """A call from {"name": str, "arguments" or "parameters": an object or its JSON text}, else None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters"))
    args = _json(args) if isinstance(args, str) else args
    return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False)) if isinstance(args, dict) else None


def _llama_calls(text: str) -> list[ToolCall]:
    """The calls when the whole text is `{...}` calls separated by ';' or newlines (after <|python_tag|>), else []."""
    text, decoder, calls, i = text.strip().removeprefix(PYTHON_TAG), json.JSONDecoder(), [], 0
    while (i := _SEPARATORS.match(text, i).end()) < len(text):
        try:
            obj, i = decoder.raw_decode(text, i)
        except (ValueError, RecursionError):
            return []
        if (call := _call(obj)) is None:
            return []
        calls.append(call)
    return calls


def parse_answer(
    text: str, fmt: str, tools: bool, think: bool = True, in_think: bool = False, markers=(THINK, END_THINK)
) -> tuple[str | None, str, list[ToolCall]]:
    """(reasoning or None, content, calls) of a whole answer; in_think: the prompt opened the reasoning already;
    markers: the reasoning's start and end (the template's, localspec/reasoning.py)."""
    start, end = markers
    reasoning, rest, calls = "", text, []
    if think and (in_think or text.lstrip().startswith(start)):
        reasoning, _, rest = (text if in_think else text.lstrip()[len(start) :]).partition(end)
    if tools and fmt == "llama3":
        calls = _llama_calls(rest)
        rest = "" if calls else rest
    elif tools and rest.lstrip().startswith(FENCE):  # the whole answer a fenced call, or it is content
        calls = _fenced_calls(rest)
        rest = "" if calls else rest
    elif tools:

        def take(match: re.Match) -> str:
            call = _call(_json(match.group(1)))
            calls.extend([call] if call else [])
            return "" if call else match.group(0)

        rest = _BLOCK.sub(take, rest)
    return reasoning.strip() or None, rest.strip(), calls


def _fenced_calls(text: str) -> list[ToolCall]:
    """The calls when the whole text is one ```json fence of `{"name", "arguments"}` objects, else []."""
    match = _FENCED.fullmatch(text.strip())
    return _llama_calls(match.group(1)) if match else []


def _partial(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a start of `tag`."""
    return next((n for n in range(min(len(text), len(tag) - 1), 0, -1) if text.endswith(tag[:n])), 0)


class AnswerSplitter:
    """Streams an answer as OpenAI deltas: {"content"}, {"reasoning_content"}, {"tool_calls": [one call]}.

    Text that may be the start of a tag waits until it is known; a hermes call goes out when its block closes, a
    llama3 answer opening with `{` or <|python_tag|> waits for finish(). Content and reasoning come without their
    surrounding whitespace (inner whitespace waits for the next text), so they add up to parse_answer's."""

    def __init__(
        self,
        fmt: str,
        tools: bool,
        think: bool = True,
        in_think: bool = False,
        markers=(THINK, END_THINK),
        keep_space: bool = False,
    ):
        """``keep_space``: content comes as the model wrote it (a chat's, `run`'s), white space and all, but
        for the white space right after the reasoning."""
        self.hermes, self.llama = tools and fmt != "llama3", tools and fmt == "llama3"
        self.start_tag, self.end_tag = markers
        self.keep_space, self.thought = keep_space, think and in_think
        self.think, self.state, self.buf = think, "think" if think and in_think else "start", ""
        self.calls: list[ToolCall] = []
        self._out: list[dict] = []
        self._space = {"content": "", "reasoning_content": ""}
        self._begun: set[str] = set()

    @property
    def called(self) -> bool:
        """Whether a call was made (finish_reason "tool_calls")."""
        return bool(self.calls)

    def push(self, text: str) -> list[dict]:
        self.buf += text
        while self._step():
            pass
        return self._take()

    def finish(self) -> list[dict]:
        if self.state == "call":
            self._close_call(self.buf, "")
        elif self.state == "hold":
            for call in (calls := (_llama_calls if self.llama else _fenced_calls)(self.buf)):
                self._add(call)
            self._emit("content", "" if calls else self.buf)
        else:
            self._emit("reasoning_content" if self.state == "think" else "content", self.buf)
        self.buf = ""
        return self._take()

    def _step(self) -> bool:
        """Move on as far as the text allows: True when the state changed."""
        if self.state == "start":
            return self._start()
        if self.state == "call":
            if (i := self.buf.find(END_CALL)) >= 0:
                self._close_call(self.buf[:i], END_CALL)
                self.buf, self.state = self.buf[i + len(END_CALL) :], "text"
            return i >= 0
        if self.state == "think":
            return self._until("reasoning_content", self.end_tag, "start")
        return self.state == "text" and self._until("content", CALL if self.hermes else "", "call")

    def _start(self) -> bool:
        head = self.buf.lstrip()
        if self.think and head.startswith(self.start_tag):
            self.buf, self.state, self.thought = head[len(self.start_tag) :], "think", True
        elif (self.llama and head.startswith(("{", PYTHON_TAG))) or (self.hermes and head.startswith(FENCE)):
            self.buf, self.state = head, "hold"
        elif not head or any(
            tag.startswith(head)
            for tag in [self.start_tag] * self.think + [PYTHON_TAG] * self.llama + [FENCE] * self.hermes
        ):
            return False
        else:
            self.state = "text"
        return True

    def _until(self, kind: str, tag: str, then: str) -> bool:
        """Emit the text before `tag` and go on after it to state `then` (True), or emit all but a possible start
        of the tag (False)."""
        i = self.buf.find(tag) if tag else -1
        cut = i if i >= 0 else len(self.buf) - (_partial(self.buf, tag) if tag else 0)
        self._emit(kind, self.buf[:cut])
        self.buf = self.buf[cut + len(tag) :] if i >= 0 else self.buf[cut:]
        if i >= 0:
            self.state, self.think = then, False
        return i >= 0

    def _close_call(self, body: str, end: str) -> None:
        if call := _call(_json(body)):
            self._add(call)
        else:
            self._emit("content", CALL + body + end)

    def _add(self, call: ToolCall) -> None:
        self._out.append({"tool_calls": [call.to_openai(index=len(self.calls))]})
        self.calls.append(call)

    def _emit(self, kind: str, text: str) -> None:
        if self.keep_space and kind == "content" and (kind in self._begun or not self.thought):
            text, self._space[kind] = self._space[kind] + text, ""
            if text:
                self._begun.add(kind)
                self._out.append({kind: text})
            return
        text = self._space[kind] + (text if kind in self._begun else text.lstrip())
        body = text.rstrip()
        self._space[kind] = text[len(body) :]
        if body and self._out and kind in self._out[-1]:
            self._out[-1][kind] += body
        elif body:
            self._begun.add(kind)
            self._out.append({kind: body})

    def _take(self) -> list[dict]:
        out, self._out = self._out, []
        return out
