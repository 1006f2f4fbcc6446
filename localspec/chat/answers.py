"""An answer's parts: reasoning, content and tool calls, read from the model's text whole (parse_answer) or as
it streams (AnswerSplitter, which gives the same parts however the text is chopped).

Two call formats: "hermes" (Qwen2.5/Qwen3/ChatML: `<tool_call>{"name", "arguments"}</tool_call>` blocks, or the
whole answer such calls in a ```json fence or bare, as Qwen2.5-Coder often writes them) and
"llama3" (Llama 3.1+: the whole answer is `{"name", "parameters"}` JSON, maybe after `<|python_tag|>`). A leading
`<think>...</think>` (or the template's own markers) is reasoning. The chat, `run` and the HTTP server all split
answers here. Stdlib only.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field

THINK, END_THINK, CALL, END_CALL, PYTHON_TAG = "<think>", "</think>", "<tool_call>", "</tool_call>", "<|python_tag|>"
FENCE = "```json"  # Qwen2.5-Coder answers a call as a fenced JSON object instead of a <tool_call> block
_FENCED = re.compile(r"```json\s*(.*?)\s*```", re.S)
_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_SEPARATORS = re.compile(r"[\s;]*")


@dataclass
class ToolCall:
    name: str
    arguments: str  # a JSON object's text
    id: str = field(default_factory=lambda: "call_" + secrets.token_hex(12))

    def to_openai(self, index: int | None = None) -> dict:
        out = {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}
        return out if index is None else {"index": index, **out}


def json_or_none(text: str):
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _call(obj) -> ToolCall | None:
    """A call from {"name": str, "arguments" or "parameters": an object or its JSON text}, else None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters"))
    args = json_or_none(args) if isinstance(args, str) else args
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
    text: str, fmt: str, tools: bool, think=True, in_think=False, markers=(THINK, END_THINK), keep_space=False
) -> tuple[str | None, str, list[ToolCall]]:
    """(reasoning or None, content, calls) of a whole answer; in_think: the prompt opened the reasoning already;
    markers: the reasoning's start and end (the template's, localspec/chat/reasoning.py); keep_space: the
    content as the model wrote it (AnswerSplitter's), else without its surrounding white space."""
    start, end = markers
    reasoning, rest, calls = "", text, []
    if think and (in_think or text.lstrip().startswith(start)):
        reasoning, _, rest = (text if in_think else text.lstrip()[len(start) :]).partition(end)
    if tools and fmt == "llama3":
        calls = _llama_calls(rest)
        rest = "" if calls else rest
    elif tools and _held(rest.lstrip()):  # the whole answer fenced or bare calls, or it is content
        calls = _held_calls(rest)
        rest = "" if calls else rest
    elif tools:

        def take(match: re.Match) -> str:
            call = _call(json_or_none(match.group(1)))
            calls.extend([call] if call else [])
            return "" if call else match.group(0)

        rest = _BLOCK.sub(take, rest)
    reasoning = reasoning.strip() or None
    if not keep_space:
        rest = rest.strip()
    elif reasoning is not None:  # the white space right after the reasoning goes, as AnswerSplitter's does
        rest = rest.lstrip()
    return reasoning, rest, calls


def _held(head: str) -> bool:
    """Whether a hermes answer opening with ``head`` is read whole as calls: a ```json fence or a bare
    `{"name"` object."""
    return head.startswith(FENCE) or (head[:1] == "{" and head[1:].lstrip().startswith('"name"'))


def _may_be_held(head: str) -> bool:
    """Whether ``head`` may still grow into an opening _held takes (the answer waits to know)."""
    return FENCE.startswith(head) or (head[:1] == "{" and '"name"'.startswith(head[1:].lstrip()))


def _held_calls(text: str) -> list[ToolCall]:
    """The calls when the whole text is one ```json fence of `{"name", "arguments"}` objects or such objects
    bare, else []."""
    if not text.lstrip().startswith(FENCE):
        return _llama_calls(text)
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
            for call in (calls := (_llama_calls if self.llama else _held_calls)(self.buf)):
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
        elif (self.llama and head.startswith(("{", PYTHON_TAG))) or (self.hermes and _held(head)):
            self.buf, self.state = head, "hold"
        elif (
            not head
            or (self.hermes and _may_be_held(head))
            or any(tag.startswith(head) for tag in [self.start_tag] * self.think + [PYTHON_TAG] * self.llama)
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
        if call := _call(json_or_none(body)):
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
