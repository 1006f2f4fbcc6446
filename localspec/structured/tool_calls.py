"""Tool calls that parse: the grammar an answer follows when a request offers tools.

- ``tool_choice`` auto: free text (and reasoning) until the model opens a call; the call is then constrained
  to one of the offered functions, its arguments to that function's parameter schema; free text again after
  it. Nothing is constrained before a call opens (a lazy grammar), so an answer in prose is the model's own.
- ``required`` or a named function: a call from the first token, after the reasoning where the prompt opened
  one (the constraint starts after the reasoning block).
- ``parallel_tool_calls`` false: at most one call.

Two answer formats, read back by localspec/chat/answers.py: "hermes" blocks
``<tool_call>\\n{"name": .., "arguments": {..}}\\n</tool_call>`` and "llama3" answers ``{"name": ..,
"parameters": {..}}`` (after ``<|python_tag|>``). A marker that is one special token of the vocabulary is
written as that token (the model emits it as one, and free text can never contain it); a marker that is text
ends the free text before it with a lazy lexeme (its first occurrence opens the call).

The call's JSON is compact with fixed separators (grammar.JSON_LAYOUT), so that its braces, quotes, keys and a
function's name once chosen are forced: the grammar drafter proposes them for free.

``strict``: a function sent with ``"strict": true`` gets its parameter schema exactly, and a schema that
cannot be compiled is an error; without it such a schema falls back to any JSON object (the call still
parses, its arguments are unchecked).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace

from localspec.chat.answers import CALL, END_CALL, FENCE, PYTHON_TAG
from localspec.errors import ConfigError
from localspec.structured import grammar as structured
from localspec.structured.grammar import JSON_LAYOUT, Grammar

ANY_OBJECT = {"type": "object"}
ANY = "/(?s:.*)/"  # any text


@dataclass(frozen=True)
class ToolSpec:
    """What a request's tools ask of the answer (checked where the request is read)."""

    functions: tuple[tuple[str, dict], ...]  # (name, parameter schema) of each function a call may name
    required: bool  # a call from the first token ('required' or a named function), else 'auto'
    one_call: bool  # parallel_tool_calls false: at most one call


class SchemaError(ConfigError):
    """A strict function's parameter schema that cannot be used; ``index``: the function's in ``tools``."""

    def __init__(self, message: str, index: int) -> None:
        super().__init__(message)
        self.index = index


def tool_spec(tools: list[dict], tool_choice, one_call: bool = False) -> ToolSpec:
    """The spec of checked OpenAI ``tools`` and ``tool_choice`` (not 'none'). Raises SchemaError for a strict
    function whose parameter schema cannot be used."""
    named = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
    functions = []
    for i, tool in enumerate(tools):
        fn = tool["function"]
        if named is None or fn["name"] == named:
            try:
                functions.append((fn["name"], _parameters(fn)))
            except ConfigError as exc:
                raise SchemaError(str(exc), i) from None
    return ToolSpec(tuple(functions), named is not None or tool_choice == "required", one_call)


def _parameters(fn: dict) -> dict:
    schema = fn.get("parameters") or ANY_OBJECT
    try:
        structured.json_schema(schema, f"the parameters of function {fn['name']!r}")
    except ConfigError:
        if fn.get("strict") is True:
            raise
        return ANY_OBJECT  # not strict: the call still parses, its arguments are unchecked
    return schema


def tool_grammar(
    spec: ToolSpec,
    fmt: str,
    special: Callable[[str], int | None],
    think: tuple[str, str] | None = None,
    in_think: bool = False,
) -> Grammar:
    """The answer's grammar. ``fmt``: "hermes" or "llama3"; ``special(text)``: the id of the special token
    that is ``text``, else None; ``think``: the model's reasoning markers (None: it does not reason);
    ``in_think``: the prompt opened the reasoning."""
    marks = _Markers(special)
    key = "parameters" if fmt == "llama3" else "arguments"
    rules = ["body: " + " | ".join(f"fn{i}" for i in range(len(spec.functions))), f"ANY: {ANY}", "WS: /[ \\t\\n]*/"]
    for i, (name, schema) in enumerate(spec.functions):  # each schema its own root: its $refs resolve there
        opening = json.dumps({"name": name, key: 0}, ensure_ascii=False)[: -len("0}")]
        rules.append(f'fn{i}: {json.dumps(opening, ensure_ascii=False)} args{i} "}}"')
        rules.append(f"args{i}: %json {json.dumps({**schema, 'x-guidance': JSON_LAYOUT}, ensure_ascii=False)}")
    head = _reasoning(think, in_think, marks, rules)
    # where the reasoning may open the answer with a text marker, no other text may start with it: the lexer
    # keeps the longest lexeme and would read the reasoning as free text, a call's marker in it as a call
    free = ANY
    if think is not None and not in_think and marks.token(think[0]) is None:
        free = f"{ANY} & ~/{_regex(think[0])}(?s:.*)/"
    rules.append(f"TEXT: {free}")
    start = _llama3(spec, marks, rules) if fmt == "llama3" else _hermes(spec, marks, rules)
    lark = f"%llguidance {{}}\nstart: {head}{start}\n" + "\n".join(rules) + "\n"
    return replace(structured.lark(lark, "the tools' grammar"), kind="tools")


class _Markers:
    """A marker as the grammar writes it: its special token (``<[id]>``), else its text."""

    def __init__(self, special: Callable[[str], int | None]) -> None:
        self.special, self._ids = special, {}  # each marker looked up once (tokenized by the model)

    def token(self, text: str) -> str | None:
        if text not in self._ids:
            self._ids[text] = self.special(text)
        token = self._ids[text]
        return None if token is None else f"<[{token}]>"

    def __call__(self, text: str) -> str:
        return self.token(text) or json.dumps(text)


def _hermes(spec: ToolSpec, marks: _Markers, rules: list[str]) -> str:
    close = marks(END_CALL)
    if spec.required:  # the answer is its calls, from the first token
        rules.append(f'call: {marks(CALL)} "\\n" body "\\n" {close}')
        return "call WS" if spec.one_call else "call (WS call)* WS"
    # free text never holds the marker as text, nor opens with a ```json fence or a bare `{"name"` object: the
    # answer parser would read a call there that nothing checked (Qwen2.5-Coder often writes a call either way,
    # bare ones after a tool's result: they are held as calls)
    rules.append(f'UNFENCED: TEXT & ~/[ \\t\\n]*{_regex(FENCE)}(?s:.*)/ & ~/[ \\t\\n]*\\{{[ \\t\\n]*"name"(?s:.*)/')
    rules.append(f"FREE: UNFENCED & ~/(?s:.*){_regex(CALL)}(?s:.*)/")
    more = "" if spec.one_call else '("\\n" body)*'
    rules.append(f'fenced: {json.dumps(FENCE)} "\\n" body {more} "\\n```" WS')
    # a bare call opens the answer (white space before it would be lexed as free text, which may not go on
    # into a call: such an opening is refused)
    rules.append(f"bare: body {more} WS")
    opened = marks.token(CALL)
    if opened is not None:  # the special token opens a call
        rules.append(f'call: {opened} "\\n" body "\\n" {close} FREE')
        return "(FREE call? | fenced | bare)" if spec.one_call else "(FREE call* | fenced | bare)"
    # a text marker: free text up to its first occurrence (lazy: the lexer would not give a greedy lexeme
    # back), then the call; after the last call, free text again
    rules += [f"opened[lazy]: UNFENCED {json.dumps(CALL)}", f'call: opened "\\n" body "\\n" {close}']
    return "(call? FREE | fenced | bare)" if spec.one_call else "(call* FREE | fenced | bare)"


def _llama3(spec: ToolSpec, marks: _Markers, rules: list[str]) -> str:
    tag = marks(PYTHON_TAG)
    rules.append("SEP: /[ \\t\\n]*;?[ \\t\\n]*/")
    calls = "body WS" if spec.one_call else "body (SEP body)* WS"
    if spec.required:
        return f"{tag}? {calls}"
    # the whole answer is calls or text; text cannot open with "{" or the tag (it would be a call unchecked)
    rules.append(f"PROSE: TEXT & ~/[{{](?s:.*)/ & ~/{_regex(PYTHON_TAG)}(?s:.*)/")
    return f"(PROSE | {tag}? {calls})"


def _reasoning(think: tuple[str, str] | None, in_think: bool, marks: _Markers, rules: list[str]) -> str:
    """The reasoning the answer may open with ('' for a model that does not reason), as a rule prefix."""
    if think is None:
        return ""
    start, end = think
    if marks.token(end) is not None:
        rules.append(f"reasoning: ANY {marks(end)} WS")
    else:
        rules += [f"reasoned[lazy]: ANY {json.dumps(end)}", "reasoning: reasoned WS"]
    if in_think:  # the prompt opened it: the constraint starts after its end
        return "reasoning "
    rules.append(f"opening: {marks(start)} reasoning")
    return "opening? "


def _regex(text: str) -> str:
    """``text`` as a literal inside a Lark /regex/."""
    return "".join("\\" + c if c in "\\^$.|?*+()[]{}/-" else c for c in text)
