"""Slash commands typed in the chat input: parsed and validated here, carried out by the app."""

from __future__ import annotations

from dataclasses import dataclass

from localspec.drafters import DRAFTERS

HELP = """\
Enter sends · Ctrl+J new line · Ctrl+P/Ctrl+N history · Esc or Ctrl+C stops the answer
F2 colours tokens that came from accepted drafts · Ctrl+Q quits (the chat is saved as you go)
/drafter NAME    switch drafter (none, ngram, suffix, draft)
/k N|auto        tokens drafted per step: fixed, or picked each step
/temp X          sampling temperature (0 = greedy)
/system TEXT     set the system prompt
/clear           start a new chat
/save [FILE]     save as Markdown (.md) or JSON (default: the chats folder)
/help            this text"""


@dataclass(frozen=True)
class Slash:
    name: str
    arg: object | None = None


class SlashError(ValueError):
    pass


def parse_slash(text: str) -> Slash | None:
    """None if ``text`` is a message, not a command. Raises SlashError with a readable reason."""
    if not text.startswith("/") or text.startswith("//"):
        return None
    name, _, arg = text[1:].strip().partition(" ")
    arg = arg.strip()
    if name == "drafter":
        if arg not in DRAFTERS:
            raise SlashError(f"/drafter needs one of: {', '.join(DRAFTERS)}")
        return Slash(name, arg)
    if name == "k":
        if arg == "auto":
            return Slash(name, "auto")
        if not arg.isdigit() or int(arg) < 1:
            raise SlashError("/k needs a whole number of tokens (at least 1) or auto")
        return Slash(name, int(arg))
    if name == "temp":
        try:
            value = float(arg)
        except ValueError:
            raise SlashError("/temp needs a number, e.g. /temp 0.7 (0 = greedy)") from None
        if value < 0:
            raise SlashError("/temp must be >= 0")
        return Slash(name, value)
    if name == "system":
        return Slash(name, arg or None)
    if name in ("clear", "help", "quit"):
        return Slash(name)
    if name == "save":
        return Slash(name, arg or None)
    raise SlashError(f"unknown command /{name}; /help lists them")
