"""Tool calling: template detection, prompt preparation, parsing whole and streamed answers, request checks."""

import json
import random

import pytest
from support.fakes import TIME, WEATHER

from localspec.apps.server.tools import (
    ToolError,
    check_tools,
    grammar_knows_calls,
    opens_think,
    prepare_messages,
    template_renders_tools,
    tool_format,
)
from localspec.chat.answers import AnswerSplitter, ToolCall, parse_answer

QWEN = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n" }}
    {%- for tool in tools %}{{- tool | tojson }}{%- endfor %}
    {{- '<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "assistant" and message.tool_calls %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}
            {{- '<tool_call>\\n{"name": "' }}{{- tool_call.name }}{{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}{{- '}\\n</tool_call>' }}
        {%- endfor %}
    {%- endif %}
{%- endfor %}"""

LLAMA = """{%- if not tools is defined %}{%- set tools = none %}{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}{{- "Environment: ipython\\n" }}{%- endif %}
{{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
{%- if builtin_tools is defined %}{{- "<|python_tag|>" + tool_call.name }}{%- endif %}
{%- if message.role == "ipython" %}{{- "<|eom_id|>" }}{%- endif %}"""

CHATML = """{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}\
{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM<|im_end|>\n' }}{% endif %}\
{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}\
{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"""


def names_args(calls):
    return [(c.name, json.loads(c.arguments)) for c in calls]


def test_detects_formats_and_tool_support():
    assert tool_format(QWEN) == "hermes"
    assert tool_format(LLAMA) == "llama3"
    assert tool_format('{{ "Environment: ipython" }} {"parameters": x}') == "llama3"
    assert tool_format("Environment: ipython") == "hermes"
    assert tool_format(CHATML) == "hermes"
    assert tool_format(None) == "hermes"
    assert template_renders_tools(QWEN) and template_renders_tools(LLAMA)
    assert not template_renders_tools(CHATML)
    assert not template_renders_tools("tools are nice {{ message.content }}")
    assert not template_renders_tools(None)
    assert opens_think("<|im_start|>assistant\n<think>\n") and not opens_think("<|im_start|>assistant\n")


CALL_W = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
CALL_T = '<tool_call>\n{"name": "get_time", "arguments": "{\\"tz\\": \\"UTC\\"}"}\n</tool_call>'


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ("  Hello there.\n", "Hello there.", []),
        (CALL_W, "", [("get_weather", {"city": "Paris"})]),
        (CALL_W + "\n" + CALL_T, "", [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "UTC"})]),
        ("Let me look.\n" + CALL_W + "\nDone.", "Let me look.\n\nDone.", [("get_weather", {"city": "Paris"})]),
        ("<tool_call>\n{not json}\n</tool_call>", "<tool_call>\n{not json}\n</tool_call>", []),
        (
            '<tool_call>{"name": "x", "arguments": [1]}</tool_call>',
            '<tool_call>{"name": "x", "arguments": [1]}</tool_call>',
            [],
        ),
        (CALL_W[: -len("</tool_call>")], "", [("get_weather", {"city": "Paris"})]),  # cut before the close
        ('A <tool_call>{"name": "get_we', 'A <tool_call>{"name": "get_we', []),
        ('<tool_call>{"name": "é", "arguments": {"v": "ü"}}</tool_call>', "", [("é", {"v": "ü"})]),
    ],
)
def test_parse_hermes(text, content, calls):
    reasoning, got, parsed = parse_answer(text, "hermes", tools=True)
    assert (reasoning, got, names_args(parsed)) == (None, content, calls)


def test_parse_arguments_reserialized_and_ids():
    _, _, [call] = parse_answer('<tool_call>{"name": "f", "arguments": {"v":"ü",  "n":1}}</tool_call>', "hermes", True)
    assert call.arguments == '{"v": "ü", "n": 1}'
    assert call.id.startswith("call_") and len(call.id) == 29
    assert call.to_openai() == {
        "id": call.id,
        "type": "function",
        "function": {"name": "f", "arguments": call.arguments},
    }
    assert call.to_openai(index=2)["index"] == 2
    assert ToolCall("f", "{}").id != ToolCall("f", "{}").id


def test_parse_without_tools_keeps_blocks():
    assert parse_answer(CALL_W, "hermes", tools=False) == (None, CALL_W, [])
    assert (
        parse_answer('{"name": "f", "parameters": {}}', "llama3", tools=False)[1] == '{"name": "f", "parameters": {}}'
    )


def test_parse_reasoning():
    text = "\n<think>\nThe user wants weather.\n</think>\n\n" + CALL_W
    reasoning, content, calls = parse_answer(text, "hermes", tools=True)
    assert (reasoning, content, names_args(calls)) == (
        "The user wants weather.",
        "",
        [("get_weather", {"city": "Paris"})],
    )
    assert parse_answer("Planning...\n</think>\n\nHi!", "hermes", False, in_think=True) == ("Planning...", "Hi!", [])
    assert parse_answer("<think>still thinking", "hermes", False) == ("still thinking", "", [])
    assert parse_answer("<think>\n\n</think>\n\nHi", "hermes", False) == (None, "Hi", [])
    assert parse_answer("<think>a</think>b", "hermes", False, think=False) == (None, "<think>a</think>b", [])
    assert parse_answer("Hi <think>a</think>", "hermes", False) == (None, "Hi <think>a</think>", [])


@pytest.mark.parametrize(
    ("text", "content", "calls"),
    [
        ('{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [("get_weather", {"city": "Paris"})]),
        ('<|python_tag|>{"name": "get_time", "arguments": {}}', "", [("get_time", {})]),
        (
            '{"name": "get_time", "parameters": {}}; {"name": "get_weather", "parameters": {"city": "Rome"}}',
            "",
            [("get_time", {}), ("get_weather", {"city": "Rome"})],
        ),
        ('{"name": "a", "parameters": {}}\n{"name": "b", "parameters": {}}', "", [("a", {}), ("b", {})]),
        ("The weather is sunny.", "The weather is sunny.", []),
        ('{"name": "Bob", "age": 3}', '{"name": "Bob", "age": 3}', []),
        ('{"name": "a", "parameters": {}} and more', '{"name": "a", "parameters": {}} and more', []),
        ("<|python_tag|>brave_search.call(query='x')", "<|python_tag|>brave_search.call(query='x')", []),
    ],
)
def test_parse_llama3(text, content, calls):
    reasoning, got, parsed = parse_answer(text, "llama3", tools=True)
    assert (reasoning, got, names_args(parsed)) == (None, content, calls)


def split(text, sizes, **kw):
    """The splitter's (reasoning, content, calls) when `text` comes in pieces of the given sizes (cycled)."""
    splitter, deltas, i, k = AnswerSplitter(**kw), [], 0, 0
    while i < len(text):
        deltas += splitter.push(text[i : i + sizes[k % len(sizes)]])
        i, k = i + sizes[k % len(sizes)], k + 1
    deltas += splitter.finish()
    assert all(len(d) == 1 for d in deltas)
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    content = "".join(d.get("content", "") for d in deltas)
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert [c["index"] for c in calls] == list(range(len(calls)))
    assert [c["id"] for c in calls] == [c.id for c in splitter.calls]
    assert splitter.called == bool(calls)
    return reasoning or None, content, [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


TEXTS = [
    ("Hello <b>world</b> < <t <tool <tool_cal", {}),
    ("  \n<think>\nHmm, < and </thin and </th.\n</think>\n\nSure: " + CALL_W + "\n\n" + CALL_T + "\nBye.  ", {}),
    ("Check <tool_call>{bad json}</tool_call> then " + CALL_W + " end", {}),
    ("<think>cut off </thi", {}),
    ("reasoning only\n</think>\n" + CALL_T, {"in_think": True}),
    ("no close " + CALL_W[:-5], {}),
    ('<tool_call>{"name": "x", "arguments": {}}', {}),
    ("<tool_call><tool_call>" + CALL_W[11:], {}),
    ("<think>a</think>b " + CALL_W, {"think": False}),
    (CALL_W + " trailing", {"tools": False}),
    ('{"name": "get_weather", "parameters": {"city": "Paris"}}', {"fmt": "llama3"}),
    ('  <|python_tag|>{"name": "a", "parameters": {}};\n{"name": "b", "arguments": {"x": [1, 2]}}', {"fmt": "llama3"}),
    ('{"name": "Bob"} is JSON', {"fmt": "llama3"}),
    ("<|python_ta but not", {"fmt": "llama3"}),
    ("<think>let me see</think>\n" + '{"name": "a", "parameters": {}}', {"fmt": "llama3"}),
    ("Plain { text } here", {"fmt": "llama3"}),
    ("<", {}),
    ("", {}),
    # Qwen2.5-Coder's fenced calls: a whole-answer fence is a call, anything else stays content
    ('```json\n{\n  "name": "get_weather",\n  "arguments": {"city": "Paris"}\n}\n```', {}),
    ('```json\n{"name": "a", "arguments": {}}\n```\nand more text', {}),
    ("```json\n[1, 2]\n```", {}),
    ("```python\nprint(1)\n```", {}),
    ("``` not json", {}),
    # a bare `{"name"` object (Qwen2.5-Coder after a tool's result) is a call; other JSON is content
    ('{"name": "get_current_timestamp", "arguments": {}}', {}),
    ('\n{ "name": "a", "arguments": {"x": 1}}\n{"name": "b", "arguments": {}}\n', {}),
    ('{"name": "Bob", "age": 3}', {}),
    ('{"city": "Paris"}', {}),
    ('{"na', {}),
    ("{ plain braces }", {}),
]


@pytest.mark.parametrize(("text", "kw"), TEXTS)
def test_splitter_matches_parse_answer(text, kw):
    kw = {"fmt": "hermes", "tools": True, **kw}
    expected = parse_answer(text, **kw)
    expected = (expected[0], expected[1], names_args(expected[2]))
    rng = random.Random(len(text))
    chunkings = [[1], [len(text) or 1], [2, 3], [7]] + [[rng.randint(1, 12) for _ in range(30)] for _ in range(8)]
    for sizes in chunkings:
        assert split(text, sizes, **kw) == expected, sizes


def test_a_fenced_json_answer_is_a_call_only_with_tools():
    text = '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'
    assert names_args(parse_answer(text, "hermes", tools=True)[2]) == [("get_weather", {"city": "Paris"})]
    assert parse_answer(text, "hermes", tools=False) == (None, text, [])
    s = AnswerSplitter("hermes", tools=True)
    assert s.push("```python\nx = 1") == [{"content": "```python\nx = 1"}]  # code streams as it comes


def test_a_bare_call_object_is_a_call_and_other_json_streams_as_content():
    text = '{"name": "get_current_timestamp", "arguments": {}}'
    assert names_args(parse_answer(text, "hermes", tools=True)[2]) == [("get_current_timestamp", {})]
    assert parse_answer(text, "hermes", tools=False) == (None, text, [])
    s = AnswerSplitter("hermes", tools=True)
    assert s.push('{"na') == [], "may still open a call: held"
    assert s.push("me") == [] and s.push('": "get_time", "arguments": {}}') == []
    [delta] = s.finish()
    assert delta["tool_calls"][0]["function"] == {"name": "get_time", "arguments": "{}"}
    s = AnswerSplitter("hermes", tools=True)
    assert s.push('{"city"') == [{"content": '{"city"'}], "JSON that is no call streams as it comes"


def test_no_partial_tag_leaks():
    s = AnswerSplitter("hermes", tools=True)
    assert s.push("Hello <too") == [{"content": "Hello"}]
    assert s.push('l_call>\n{"name": "get_time", ') == []
    assert s.push('"arguments": {}}\n</tool') == []
    [delta] = s.push("_call>")
    assert delta["tool_calls"][0]["function"] == {"name": "get_time", "arguments": "{}"}
    assert s.push(" ok") == [{"content": "  ok"}]  # the space held back after "Hello" comes now
    assert s.finish() == [] and s.called

    s = AnswerSplitter("hermes", tools=True)
    assert s.push("\n<thi") == [] and s.push("nk>Let me think. </th") == [{"reasoning_content": "Let me think."}]
    assert s.push("ink>\n\nAnswer") == [{"content": "Answer"}]
    assert s.finish() == [] and not s.called


def test_llama3_streams_plain_text_and_holds_json():
    s = AnswerSplitter("llama3", tools=True)
    assert s.push("It is") == [{"content": "It is"}] and s.push(" sunny.") == [{"content": " sunny."}]
    s = AnswerSplitter("llama3", tools=True)
    assert s.push('{"name": "a", "parameters": {}}') == []
    assert [d["tool_calls"][0]["function"]["name"] for d in s.finish()] == ["a"]


def test_prepare_messages_unchanged_without_tools():
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert prepare_messages(messages, None, CHATML) == (messages, None)
    assert prepare_messages(messages, [], QWEN) == (messages, None)


HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris and the time?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "{}"}},
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {"role": "tool", "tool_call_id": "call_2", "name": "get_time", "content": "12:00"},
]


def test_prepare_messages_for_a_template_that_renders_tools():
    messages, tools = prepare_messages(HISTORY, [WEATHER, TIME], QWEN)
    assert tools == [WEATHER, TIME]
    assert messages[:2] == HISTORY[:2] and messages[3:] == HISTORY[3:]
    first = messages[2]["tool_calls"][0]
    assert first["function"] == {"name": "get_weather", "arguments": {"city": "Paris"}}
    assert (first["name"], first["arguments"], first["id"]) == ("get_weather", {"city": "Paris"}, "call_1")
    assert HISTORY[2]["tool_calls"][0]["function"]["arguments"] == '{"city": "Paris"}'  # input left alone


def test_prepare_messages_for_plain_chatml():
    messages, tools = prepare_messages(HISTORY, [WEATHER, TIME], CHATML)
    assert tools is None
    system = messages[0]["content"]
    assert system.startswith("# Tools") and system.endswith("\n\nBe brief.")
    assert "<tools>\n" + json.dumps(WEATHER) + "\n" + json.dumps(TIME) + "\n</tools>" in system
    assert '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>' in system
    assert messages[1] == HISTORY[1]
    assert messages[2] == {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
    }
    assert messages[3:] == [
        {
            "role": "user",
            "content": "<tool_response>\nsunny\n</tool_response>\n<tool_response>\n12:00\n</tool_response>",
        }
    ]
    # the model's own rendering of its calls parses back to them
    assert names_args(parse_answer(messages[2]["content"], "hermes", True)[2]) == [
        ("get_weather", {"city": "Paris"}),
        ("get_time", {}),
    ]


def test_prepare_messages_adds_a_system_message():
    messages, _ = prepare_messages([{"role": "user", "content": "Hi"}], [TIME], CHATML)
    assert messages[0]["role"] == "system" and json.dumps(TIME) in messages[0]["content"]
    assert messages[1] == {"role": "user", "content": "Hi"}
    kept = [{"role": "assistant", "content": "Sure.", "tool_calls": HISTORY[2]["tool_calls"][1:]}]
    messages, tools = prepare_messages(kept, None, CHATML)
    assert tools is None and messages[0]["content"].startswith("Sure.\n<tool_call>\n")


def test_the_grammar_constrains_calls_only_in_the_formats_it_writes():
    assert grammar_knows_calls(QWEN) and grammar_knows_calls(CHATML) and grammar_knows_calls(None)
    assert grammar_knows_calls(LLAMA)
    own = "{% for t in tools %}{{ t | tojson }}{% endfor %}<|channel|>commentary to=functions.{{ name }}"
    assert not grammar_knows_calls(own), "a template with its own call format is left unconstrained"


def test_check_tools_accepts_good_requests():
    for choice in (None, "auto", "none", "required", {"type": "function", "function": {"name": "get_time"}}):
        check_tools([WEATHER, TIME], choice)
    check_tools(None, None)
    check_tools([], "auto")


@pytest.mark.parametrize(
    ("tools", "choice", "field", "words"),
    [
        ({"name": "x"}, None, "tools", "must be a list"),
        ([{"name": "x"}], None, "tools[0]", "type: 'function'"),
        ([{"type": "function", "function": "x"}], None, "tools[0]", "function: {name"),
        ([{"type": "function", "function": {"name": "bad name"}}], None, "tools[0].function.name", "1 to 64"),
        ([{"type": "function", "function": {"name": "x" * 65}}], None, "tools[0].function.name", "1 to 64"),
        ([{"type": "function", "function": {"name": "ok\n"}}], None, "tools[0].function.name", "1 to 64"),
        ([TIME, {"type": "function", "function": {}}], None, "tools[1].function.name", "got None"),
        (
            [{"type": "function", "function": {"name": "a", "description": 3}}],
            None,
            "tools[0].function.description",
            "string",
        ),
        (
            [{"type": "function", "function": {"name": "a", "parameters": []}}],
            None,
            "tools[0].function.parameters",
            "object",
        ),
        ([TIME, TIME], None, "tools", "unique"),
        ([TIME], "always", "tool_choice", "'none', 'auto', 'required'"),
        ([TIME], {"type": "function"}, "tool_choice", "{type: 'function', function: {name}}"),
        ([TIME], {"function": {"name": "get_time"}}, "tool_choice", "'required'"),
        ([TIME], {"type": "function", "function": {"name": "nope"}}, "tool_choice.function.name", "not in 'tools'"),
        (None, "required", "tool_choice", "needs 'tools'"),
    ],
)
def test_check_tools_errors(tools, choice, field, words):
    with pytest.raises(ToolError) as caught:
        check_tools(tools, choice)
    assert caught.value.field == field
    assert words in str(caught.value)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("module", ["localspec.apps.server.tools", "localspec.chat.answers"])
def test_the_tool_modules_import_only_the_stdlib_and_the_answer_parser(module):
    import ast
    import importlib
    import sys
    from pathlib import Path

    tree = ast.parse(Path(importlib.import_module(module).__file__).read_text(encoding="utf-8"))
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    allowed = sys.stdlib_module_names | {"__future__"}
    assert imported and all(name.split(".")[0] in allowed or name == "localspec.chat.answers" for name in imported)
