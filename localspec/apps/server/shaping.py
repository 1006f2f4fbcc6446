"""A chat answer's shape: the prompt with the tools offered (and a forced call's opening), and how the model's
text splits into content, reasoning and tool calls (tools.py), whole or as it streams."""

from __future__ import annotations

from dataclasses import dataclass

from localspec.apps.server.tools import forced_prefix, opens_think, prepare_messages, tool_format
from localspec.chat.answers import AnswerSplitter, parse_answer
from localspec.chat.reasoning import markers
from localspec.session import Session


@dataclass(frozen=True)
class Shape:
    fmt: str = "hermes"  # the template's tool-call format
    tools: bool = False  # calls are parsed out of the answer
    prefix: str = ""  # the answer's forced opening (tool_choice 'required' or a named function)
    in_think: bool = False  # the prompt opened the reasoning
    think: tuple[str, str] = markers(None)  # the reasoning's start and end markers (the template's)
    verbatim: bool = False  # content as the model wrote it, white space and all (a grammar's answer)

    def splitter(self) -> AnswerSplitter:
        splitter = AnswerSplitter(
            self.fmt, self.tools, in_think=self.in_think, markers=self.think, keep_space=self.verbatim
        )
        splitter.push(self.prefix)  # an opened call: nothing goes out before it closes
        return splitter

    def message(self, text: str) -> tuple[dict, bool]:
        """The whole answer as an assistant message, and whether it called tools."""
        reasoning, content, calls = parse_answer(
            self.prefix + text,
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


def chat_prompt(session: Session, messages: list[dict], tools: list[dict] | None, tool_choice) -> tuple[list, Shape]:
    """On the engine thread: the prompt's tokens and the answer's shape."""
    template = session.chat_template
    fmt = tool_format(template)
    messages, template_tools = prepare_messages(messages, tools, template)
    text = session.chat_text(messages, template_tools)
    think = markers(session.reasoning)
    in_think = opens_think(text, think[0])
    prefix = forced_prefix(fmt, tool_choice) if tools else ""
    if prefix and in_think:  # a forced call comes after an empty reasoning
        prefix = f"\n\n{think[1]}\n\n{prefix}"
    return session.template_tokens(text + prefix), Shape(fmt, bool(tools), prefix, in_think, think)
