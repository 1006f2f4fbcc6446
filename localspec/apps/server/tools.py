"""Tool calling for /v1/chat/completions: the tools into the prompt, and the request's checks. Reading the calls
back out of the answer is localspec/chat/answers.py's (the chat and `run` split answers the same way)."""

from __future__ import annotations

import json
import re

from localspec.chat.answers import CALL, END_CALL, PYTHON_TAG, THINK, json_or_none

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_USES_TOOLS = re.compile(r"\{[%{][^}]*\btools\b")
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


def grammar_knows_calls(template: str | None) -> bool:
    """Whether the answer's calls come in a format the tools' grammar (structured/tool_calls.py) writes: the
    template's own Hermes `<tool_call>` blocks or Llama 3.1 JSON, or the Hermes instructions prepare_messages
    writes in for a template that renders no tools. Another template's own format (gpt-oss channels, Mistral's
    [TOOL_CALLS]) is left unconstrained: a grammar in the wrong format would forbid the model's own tokens."""
    return not template_renders_tools(template) or CALL in (template or "") or tool_format(template) == "llama3"


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
    parsed = json_or_none(arguments) if isinstance(arguments, str) else arguments
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
