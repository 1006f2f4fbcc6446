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

from localspec.chat.answers import CALL, END_CALL, PYTHON_TAG
from localspec.errors import ConfigError
from localspec.structured import grammar as structured
from localspec.structured.grammar import JSON_LAYOUT, Grammar

ANY_OBJECT = {"type": "object"}


@dataclass(frozen=True)
class ToolSpec:
    """What a request's tools ask of the answer (checked where the request is read)."""

    functions: tuple[tuple[str, dict], ...]  # (name, parameter schema) of each function a call may name
    required: bool  # a call from the first token ('required' or a named function), else 'auto'
    one_call: bool  # parallel_tool_calls false: at most one call


def tool_spec(tools: list[dict], tool_choice, one_call: bool = False) -> ToolSpec:
    """The spec of checked OpenAI ``tools`` and ``tool_choice`` (not 'none'). Raises ConfigError for a strict
    function whose parameter schema cannot be used."""
    named = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
    functions = []
    for tool in tools:
        fn = tool["function"]
        if named is None or fn["name"] == named:
            functions.append((fn["name"], _parameters(fn)))
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
    body = {
        "anyOf": [
            {
                "type": "object",
                "properties": {"name": {"const": name}, key: schema},
                "required": ["name", key],
                "additionalProperties": False,
            }
            for name, schema in spec.functions
        ],
        "x-guidance": JSON_LAYOUT,
    }
    rules = [f"body: %json {json.dumps(body, ensure_ascii=False)}", "ANY: /(?s:.*)/"]
    head = _reasoning(think, in_think, marks, rules)
    start = _llama3(spec, marks, rules) if fmt == "llama3" else _hermes(spec, marks, rules)
    text = f"%llguidance {{}}\nstart: {head}{start}\n" + "\n".join(rules) + "\n"
    return replace(structured.lark(text, "the tools' grammar"), kind="tools")


class _Markers:
    """A marker as the grammar writes it: its special token (``<[id]>``), else its text."""

    def __init__(self, special: Callable[[str], int | None]) -> None:
        self.special = special

    def token(self, text: str) -> str | None:
        token = self.special(text)
        return None if token is None else f"<[{token}]>"

    def __call__(self, text: str) -> str:
        return self.token(text) or json.dumps(text)


def _hermes(spec: ToolSpec, marks: _Markers, rules: list[str]) -> str:
    close = marks(END_CALL)
    if spec.required:  # the answer is its calls, from the first token
        rules.append(f'call: {marks(CALL)} "\\n" body "\\n" {close}')
        return "call" if spec.one_call else 'call ("\\n" call)*'
    opened = marks.token(CALL)
    if opened is not None:  # free text cannot contain a special token: the token opens a call
        rules.append(f'call: {opened} "\\n" body "\\n" {close} ANY')
        return "ANY call?" if spec.one_call else "ANY call*"
    # a text marker: free text up to its first occurrence (lazy), then the call; after the last call, free
    # text that never contains the marker (else it could open a call the grammar does not check)
    rules += [
        f"opened[lazy]: ANY {json.dumps(CALL)}",
        f'call: opened "\\n" body "\\n" {close}',
        f"FREE: ANY & ~/(?s:.*){_regex(CALL)}(?s:.*)/",
    ]
    return "call? FREE" if spec.one_call else "call* FREE"


def _llama3(spec: ToolSpec, marks: _Markers, rules: list[str]) -> str:
    tag = marks(PYTHON_TAG)
    calls = "body" if spec.one_call else 'body (";" " "? body)*'
    if spec.required:
        return f"{tag}? {calls}"
    # the whole answer is calls or text; text cannot open with "{" or the tag (it would be a call unchecked)
    rules.append(f"PROSE: ANY & ~/[{{](?s:.*)/ & ~/{_regex(PYTHON_TAG)}(?s:.*)/")
    return f"(PROSE | {tag}? {calls})"


def _reasoning(think: tuple[str, str] | None, in_think: bool, marks: _Markers, rules: list[str]) -> str:
    """The reasoning the answer may open with ('' for a model that does not reason), as a rule prefix."""
    if think is None:
        return ""
    start, end = think
    if marks.token(end) is not None:
        rules.append(f"reasoning: ANY {marks(end)} /[ \\t\\n]*/")
    else:
        rules += [f"reasoned[lazy]: ANY {json.dumps(end)}", "reasoning: reasoned /[ \\t\\n]*/"]
    if in_think:  # the prompt opened it: the constraint starts after its end
        return "reasoning "
    rules.append(f"opening: {marks(start)} reasoning")
    return "opening? "


def _regex(text: str) -> str:
    """``text`` as a literal inside a Lark /regex/."""
    return "".join("\\" + c if c in "\\^$.|?*+()[]{}/-" else c for c in text)
