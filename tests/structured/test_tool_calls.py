"""The tools' grammar (localspec/structured/tool_calls.py) on a byte vocabulary with special tokens: which answers
it lets through, with the call markers as special tokens (Qwen's <tool_call>) and as text (a vocabulary without
them), for tool_choice auto, required and a named function, one call or several, strict schemas, llama3 answers
and reasoning that comes first."""

import llguidance
import pytest

from localspec.errors import ConfigError
from localspec.structured.tool_calls import tool_grammar, tool_spec

SPECIALS = ["<tool_call>", "</tool_call>", "<think>", "</think>", "<|python_tag|>"]
EOS = 256 + len(SPECIALS)
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
GOOD = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


class Vocabulary:
    """Every byte a token, then the special tokens, then the end of the answer."""

    eos_token_id, bos_token_id = EOS, None
    special_token_ids = list(range(256, EOS + 1))
    tokens = [bytes([b]) for b in range(256)] + [b"\xff" + s.encode() for s in SPECIALS] + [b"\xff<eos>"]

    def __call__(self, data: bytes) -> list[int]:
        return list(data)


TOKENIZER = llguidance.LLTokenizer(llguidance.TokenizerWrapper(Vocabulary()))


def special(text: str) -> int | None:
    return 256 + SPECIALS.index(text) if text in SPECIALS else None


def no_special(text: str) -> None:
    return None


def tokens(answer: str, markers: bool) -> list[int]:
    """The answer's tokens; with markers, each special marker in it is its one token."""
    out, i = [], 0
    while i < len(answer):
        mark = next((s for s in SPECIALS if markers and answer.startswith(s, i)), None)
        out += [special(mark)] if mark else list(answer[i].encode())
        i += len(mark) if mark else 1
    return out


def allowed(grammar, answer: str, markers: bool = True) -> bool:
    """Whether the grammar lets the whole answer through and then lets it end."""
    matcher = llguidance.LLMatcher(TOKENIZER, grammar.text, log_level=0)
    ids = tokens(answer, markers)
    return matcher.validate_tokens(ids) == len(ids) and matcher.consume_tokens(ids) and matcher.is_accepting()


def grammar(tools=(WEATHER, TIME), choice="auto", one_call=False, fmt="hermes", markers=True, **kw):
    return tool_grammar(tool_spec(list(tools), choice, one_call), fmt, special if markers else no_special, **kw)


@pytest.mark.parametrize("markers", [True, False])
def test_auto_lets_prose_through_and_checks_every_call(markers):
    g = grammar(markers=markers)
    call = f"<tool_call>\n{GOOD}\n</tool_call>"
    assert allowed(g, "It is sunny, I think.", markers)
    assert allowed(g, "", markers)
    assert allowed(g, f"Let me look.{call}", markers)
    assert allowed(g, f"{call}\n{call} done", markers)
    assert allowed(g, '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>', markers)
    assert not allowed(g, '<tool_call>\n{"name": "get_wether", "arguments": {"city": "Paris"}}\n</tool_call>', markers)
    assert not allowed(g, '<tool_call>\n{"name": "get_weather", "arguments": {"town": "Paris"}}\n</tool_call>', markers)
    assert not allowed(g, '<tool_call>\n{"name": "get_weather", "arguments": {"city": 3}}\n</tool_call>', markers)
    assert not allowed(g, "<tool_call>\n{'name': 'get_weather'}</tool_call>", markers)
    assert not allowed(g, f"<tool_call>\n{GOOD}", markers), "an open call cannot end the answer"
    assert not allowed(g, f"<tool_call>\n{GOOD.replace(': ', ':')}\n</tool_call>", markers), "compact layout only"


def test_the_marker_as_text_is_never_free_text():
    """A spelled-out '<tool_call>' would be read back as a call that nothing checked: with the marker as text it
    opens a checked call, and where the marker is a special token it is refused in prose."""
    assert not allowed(grammar(markers=False), "Write <tool_call> then JSON.", markers=False)
    assert not allowed(grammar(markers=True), 'Write <tool_call>{"name": "rm"}</tool_call>', markers=False)
    assert allowed(grammar(markers=True), "Write a tool call then JSON.", markers=False)


def test_schemas_with_references_resolve_in_their_own_function():
    """Each function's parameters are a root of their own: '#/$defs/...' (pydantic, zod) resolves there."""
    point = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    params = {
        "type": "object",
        "properties": {"at": {"$ref": "#/$defs/Point"}},
        "required": ["at"],
        "$defs": {"Point": point},
    }
    move = {"type": "function", "function": {"name": "move", "parameters": params, "strict": True}}
    g = grammar(tools=[move, TIME], choice="required")
    assert allowed(g, '<tool_call>\n{"name": "move", "arguments": {"at": {"x": 3}}}\n</tool_call>')
    assert not allowed(g, '<tool_call>\n{"name": "move", "arguments": {"at": {"x": "3"}}}\n</tool_call>')


def test_calls_may_end_with_white_space():
    call = f"<tool_call>\n{GOOD}\n</tool_call>"
    assert allowed(grammar(choice="required"), call + "\n")
    assert allowed(grammar(choice="required"), call + "\n" + call + "\n")
    llama = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert allowed(grammar(fmt="llama3", choice="required"), llama + "\n")
    assert allowed(grammar(fmt="llama3", choice="required"), llama + "; " + llama)


@pytest.mark.parametrize("markers", [True, False])
def test_a_fenced_call_is_held_like_a_tool_call_block(markers):
    """Qwen2.5-Coder often answers a call as one ```json fence, which the answer parser reads as a call."""
    g = grammar(markers=markers)
    assert allowed(g, f"```json\n{GOOD}\n```", markers)
    assert allowed(g, f"```json\n{GOOD}\n{GOOD}\n```\n", markers)
    assert not allowed(g, '```json\n{"name": "rm", "arguments": {}}\n```', markers)
    assert not allowed(g, '```json\n{"name": "get_weather"}\n```', markers)
    assert allowed(g, 'Here: ```python\nprint("hi")\n```', markers), "other fences are prose"
    assert not allowed(grammar(one_call=True, markers=markers), f"```json\n{GOOD}\n{GOOD}\n```", markers)


@pytest.mark.parametrize("markers", [True, False])
def test_a_bare_call_object_is_held_like_a_tool_call_block(markers):
    """After a tool's result Qwen2.5-Coder may answer a call as a bare JSON object, read back as a call: it
    must be a checked one, and other JSON stays prose."""
    g = grammar(markers=markers)
    assert allowed(g, GOOD, markers)
    assert allowed(g, f"{GOOD}\n{GOOD}\n", markers)
    assert not allowed(g, f"\n{GOOD}", markers), "opening the answer only: never an unchecked call"
    assert not allowed(g, '{"name": "rm", "arguments": {}}', markers)
    assert not allowed(g, '{ "name": "get_weather", "arguments": {"city": "Paris"}}', markers), "compact only"
    assert allowed(g, '{"city": "Paris"} is JSON', markers), "other JSON is prose"
    assert allowed(g, "{ plain braces }", markers)
    assert not allowed(grammar(one_call=True, markers=markers), f"{GOOD}\n{GOOD}", markers)


def test_one_call_at_most_without_parallel_calls():
    call = f"<tool_call>\n{GOOD}\n</tool_call>"
    for markers in (True, False):
        g = grammar(one_call=True, markers=markers)
        assert allowed(g, f"ok {call}", markers)
        assert not allowed(g, f"{call}\n{call}", markers)


def test_required_and_named_calls_start_at_the_first_token():
    call = f"<tool_call>\n{GOOD}\n</tool_call>"
    required = grammar(choice="required")
    assert allowed(required, call) and allowed(required, f"{call}\n{call}")
    assert not allowed(required, f"Sure. {call}")
    assert not allowed(required, "No call.")
    named = grammar(choice={"type": "function", "function": {"name": "get_time"}})
    assert allowed(named, '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>')
    assert not allowed(named, call), "the named function only"


def test_a_strict_schema_that_does_not_compile_is_an_error_and_a_loose_one_any_object():
    broken = {"type": "object", "properties": {"n": {"type": "integer", "minimum": "zero"}}}
    strict = {"type": "function", "function": {"name": "f", "parameters": broken, "strict": True}}
    with pytest.raises(ConfigError, match="parameters of function 'f'"):
        tool_spec([strict], "auto")
    loose = {"type": "function", "function": {"name": "f", "parameters": broken}}
    g = grammar(tools=[loose], choice="required")
    assert allowed(g, '<tool_call>\n{"name": "f", "arguments": {"n": "x", "m": [1]}}\n</tool_call>')


def test_llama3_answers_are_prose_or_calls_with_parameters():
    g = grammar(fmt="llama3")
    call = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert allowed(g, "Paris is sunny.")
    assert allowed(g, call) and allowed(g, "<|python_tag|>" + call)
    assert not allowed(g, '{"name": "get_weather", "arguments": {"city": "Paris"}}')
    assert not allowed(g, "{not a call}")
    assert allowed(grammar(fmt="llama3", choice="required"), call)
    assert not allowed(grammar(fmt="llama3", choice="required"), "Paris is sunny.")


@pytest.mark.parametrize("markers", [True, False])
def test_the_constraint_starts_after_the_reasoning(markers):
    call = f"<tool_call>\n{GOOD}\n</tool_call>"
    think = ("<think>", "</think>")
    opened = grammar(choice="required", think=think, in_think=True, markers=markers)
    assert allowed(opened, "The user wants weather; {free} text.</think>\n\n" + call, markers)
    assert not allowed(opened, "No reasoning end. " + call, markers)
    may = grammar(choice="required", think=think, markers=markers)
    assert allowed(may, "<think>hmm</think>" + call, markers) and allowed(may, call, markers)
    assert allowed(grammar(think=think, markers=markers), "<think>hmm</think>Sunny.", markers)
    # a call's marker written inside the reasoning opens no call there (the parser splits the reasoning off)
    if not markers:  # (a special <tool_call> token has no place in reasoning text)
        assert allowed(grammar(think=think, markers=False), "<think>I'll emit <tool_call> next</think>Sunny.", False)
