"""A chat answer's shape: the prompt with the tools offered (and the grammar their calls follow:
localspec/structured/tool_calls.py), and how the model's text splits into content, reasoning and tool calls
(tools.py), whole or as it streams."""

from __future__ import annotations

from dataclasses import dataclass

from localspec.apps.server.tools import grammar_knows_calls, opens_think, prepare_messages, tool_format
from localspec.chat.answers import AnswerSplitter, parse_answer
from localspec.chat.reasoning import markers
from localspec.session import Session
from localspec.structured.grammar import Grammar
from localspec.structured.tool_calls import ToolSpec, tool_grammar


@dataclass(frozen=True)
class Shape:
    fmt: str = "hermes"  # the template's tool-call format
    tools: bool = False  # calls are parsed out of the answer
    in_think: bool = False  # the prompt opened the reasoning
    think: tuple[str, str] = markers(None)  # the reasoning's start and end markers (the template's)
    verbatim: bool = False  # content as the model wrote it, white space and all (a grammar's answer)
    grammar: Grammar | None = None  # what the answer follows where tools are offered (calls that parse)

    def splitter(self) -> AnswerSplitter:
        keep = self.verbatim
        return AnswerSplitter(self.fmt, self.tools, in_think=self.in_think, markers=self.think, keep_space=keep)

    def message(self, text: str) -> tuple[dict, bool]:
        """The whole answer as an assistant message, and whether it called tools."""
        reasoning, content, calls = parse_answer(
            text,
            self.fmt,
            self.tools,
            in_think=self.in_think,
            markers=self.think,
            keep_space=self.verbatim,
        )
        message = {"role": "assistant", "content": content if content or not calls else None}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = [call.to_openai() for call in calls]
        return message, bool(calls)


def chat_prompt(
    session: Session, messages: list[dict], tools: list[dict] | None, spec: ToolSpec | None
) -> tuple[list, Shape]:
    """On the engine thread: the prompt's tokens and the answer's shape (with ``spec``, the grammar its calls
    follow, written in this model's call format and special tokens)."""
    template = session.text.chat_template
    fmt = tool_format(template)
    messages, template_tools = prepare_messages(messages, tools, template)
    text = session.text.chat_text(messages, template_tools)
    think = markers(session.text.reasoning)
    in_think = opens_think(text, think[0])
    grammar = None
    if tools and spec is not None and grammar_knows_calls(template):
        reasons = think if session.text.reasoning is not None or in_think else None
        grammar = tool_grammar(spec, fmt, session.text.special_token, reasons, in_think)
    return session.text.template_tokens(text), Shape(fmt, bool(tools), in_think, think, grammar=grammar)
