"""What several commands do with a Session: read the run's settings, stream an answer as it comes."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from localspec.chat.conversation import Conversation
from localspec.chat.reasoning import ANSWER, REASONING, ReasoningSplitter
from localspec.config import Settings, settings_from_args
from localspec.engine.stats import TurnStats
from localspec.session import Session


@dataclass
class Answered:
    text: str  # the answer
    reasoning: str  # a reasoning model's thinking before it (reasoning.py), "" for others
    stats: TurnStats
    finish: str


def stream_answer(session: Session, conversation: Conversation, out, thoughts=None) -> Answered:
    """Print the answer to ``out`` as it streams, a reasoning model's thinking to ``thoughts``."""
    splitter = ReasoningSplitter(session.text.reasoning)
    parts: dict[str, list[str]] = {REASONING: [], ANSWER: []}
    stats, finish = None, "interrupted"

    def show(pieces) -> None:
        for kind, text in pieces:
            if kind == ANSWER and parts[REASONING] and not parts[ANSWER] and thoughts is not None:
                thoughts.write("\n")  # the thinking ends on a line of its own
            parts[kind].append(text)
            stream = out if kind == ANSWER else thoughts
            if stream is not None:
                stream.write(text)
                stream.flush()

    events = session.answer(conversation)
    try:
        for event in events:
            show(splitter.feed(event.text))
            stats = event.stats
            finish = event.finish_reason or finish
    except KeyboardInterrupt:
        events.close()  # the engine rolls its cache back; what was said so far is kept
    show(splitter.finish())
    return Answered("".join(parts[ANSWER]), "".join(parts[REASONING]), stats or TurnStats(), finish)


def read_settings(args) -> Settings:
    """The run's settings; a line on stderr for each old spelling they were read from."""
    settings = settings_from_args(args)
    for notice in settings.notices:
        print(f"localspec: {notice}", file=sys.stderr)
    return settings
