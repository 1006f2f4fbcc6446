"""Reasoning models: their thinking, told apart from their answer.

Models such as Qwen3, DeepSeek-R1, SmolLM3 or Magistral write their reasoning between markers before the
answer (``<think>…</think>``, ``[THINK]…[/THINK]``, ...). Which markers a model uses is read from its own
chat template, like everything else about a model: a template that names a pair's end marker uses that pair.
Some templates open the reasoning in the prompt itself (DeepSeek-R1's, Qwen3.5's with thinking on: the
generation prompt ends with ``<think>``), so the answer starts inside it; that is read from the rendered
prompt. A template that reads ``enable_thinking`` can turn thinking on or off (``--think``/``--no-think``).

Only text before the answer proper is reasoning: a start marker is recognised while nothing but white space
has been answered, and once the reasoning has ended it never reopens, so an answer that quotes ``<think>``
stays the answer (server/tools.py splits; the chat, `run` and the API share it). Markers that are control
tokens the detokenizer does not print (gpt-oss's channels) cannot be seen in the text and are not
split. The engine and its stats see every generated token either way.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MARKERS = (
    ("<think>", "</think>"),
    ("<seed:think>", "</seed:think>"),
    ("[THINK]", "[/THINK]"),
    ("<|START_THINKING|>", "<|END_THINKING|>"),
)
SWITCH = "enable_thinking"  # the template variable that turns thinking on or off
REASONING, ANSWER = "reasoning", "answer"


@dataclass(frozen=True)
class ReasoningFormat:
    start: str
    end: str
    opens_in_prompt: bool  # the generation prompt ends inside the reasoning: the answer begins with it
    switch: bool  # the template reads enable_thinking


def reasoning_format(template: str | None, generation_prompt: Callable[[], str]) -> ReasoningFormat | None:
    """The markers ``template`` uses (None for a model without reasoning markers). ``generation_prompt``
    renders a one-message conversation with the options in use, to see whether it opens the reasoning."""
    if not template:
        return None
    for start, end in MARKERS:
        if end in template:
            opens = generation_prompt().rstrip().endswith(start)
            return ReasoningFormat(start, end, opens, SWITCH in template)
    return None


def markers(fmt: ReasoningFormat | None) -> tuple[str, str]:
    """The start and end markers to split on: the template's, else ``<think>``/``</think>`` (a model may
    think without its template saying so)."""
    return (fmt.start, fmt.end) if fmt else MARKERS[0]


class ReasoningSplitter:
    """Streamed answer text in, (kind, text) pieces out: REASONING, then ANSWER. The server's answer splitter
    (chat/answers.py) without tool calls, so that the chat, `run` and the API split an answer the same way:
    a marker split across two pieces of text waits until it is whole. The answer keeps its white space (code's
    indentation, the last new line) but for what follows the reasoning; the reasoning's own is trimmed."""

    def __init__(self, fmt: ReasoningFormat | None) -> None:
        from localspec.chat.answers import AnswerSplitter

        opens = bool(fmt and fmt.opens_in_prompt)
        self._splitter = AnswerSplitter("hermes", tools=False, in_think=opens, markers=markers(fmt), keep_space=True)

    def feed(self, text: str) -> list[tuple[str, str]]:
        return _pieces(self._splitter.push(text))

    def finish(self) -> list[tuple[str, str]]:
        return _pieces(self._splitter.finish())


def _pieces(deltas: list[dict]) -> list[tuple[str, str]]:
    return [(REASONING if "reasoning_content" in d else ANSWER, next(iter(d.values()))) for d in deltas]
