"""Slash commands typed in the chat input: parsed and validated here, carried out by the app."""

from __future__ import annotations

from dataclasses import dataclass

from localspec.session import drafter_summaries

_HELP = """\
Enter sends · Ctrl+J new line · Ctrl+P/Ctrl+N history · Esc or Ctrl+C stops the answer
F2 colours tokens that came from accepted drafts · F3 shows a reasoning model's thinking
Ctrl+Q quits (the chat is saved as you go)
/drafter NAME    switch drafter:
{drafters}
/k N|auto        tokens drafted per step: fixed, or picked each step
/temp X          sampling temperature (0 = greedy)
/exact [on|off]  bit-identical greedy output (slower; llama.cpp reloads the model for it)
/schema FILE|JSON|off   every answer JSON that follows this schema (off: free text again)
/grammar FILE|off       every answer in this grammar (GBNF, or Lark starting `start:`)
/system TEXT     set the system prompt
/clear           start a new chat
/save [FILE]     save as Markdown (.md) or JSON (default: the chats folder)
/help            this text"""


def help_text() -> str:
    """/help: the keys, and the commands with every drafter of the drafter table."""
    return _HELP.format(drafters="\n".join(f"  {name:<14} {summary}" for name, summary in drafter_summaries()))


@dataclass(frozen=True)
class Slash:
    name: str
    arg: object | None = None


class SlashError(ValueError):
    pass


def _drafter_arg(arg: str) -> str:
    names = [name for name, _ in drafter_summaries()]
    if arg not in names:
        raise SlashError(f"/drafter needs one of: {', '.join(names)}")
    return arg


def _k_arg(arg: str) -> int | str:
    if arg == "auto":
        return "auto"
    if not arg.isdigit() or int(arg) < 1:
        raise SlashError("/k needs a whole number of tokens (at least 1) or auto")
    return int(arg)


def _temp_arg(arg: str) -> float:
    try:
        value = float(arg)
    except ValueError:
        raise SlashError("/temp needs a number, e.g. /temp 0.7 (0 = greedy)") from None
    if value < 0:
        raise SlashError("/temp must be >= 0")
    return value


def _on_off(arg: str) -> bool | None:
    """on, off, or nothing (None: switch it)."""
    if arg not in ("", "on", "off"):
        raise SlashError("/exact takes on, off or nothing (switches it)")
    return None if not arg else arg == "on"


def _constraint(flag: str):
    """/schema and /grammar: a compiled Grammar, or None for off (a bad one is a SlashError that says why)."""

    def parse(arg: str):
        from localspec.errors import ConfigError
        from localspec.structured.grammar import from_option

        if not arg:
            raise SlashError(f"/{flag} needs a file{', or the JSON itself,' if flag == 'schema' else ''} or off")
        if arg == "off":
            return None
        try:
            return from_option(arg, "--json-schema" if flag == "schema" else "--grammar")
        except ConfigError as exc:
            raise SlashError(f"/{flag}: {exc}") from None

    return parse


def _optional_text(arg: str) -> str | None:
    return arg or None


def _no_arg(arg: str) -> None:
    return None


_ARGUMENTS = {
    "drafter": _drafter_arg,
    "k": _k_arg,
    "temp": _temp_arg,
    "exact": _on_off,
    "schema": _constraint("schema"),
    "grammar": _constraint("grammar"),
    "system": _optional_text,
    "save": _optional_text,
    "clear": _no_arg,
    "help": _no_arg,
    "quit": _no_arg,
}  # command -> its argument


def parse_slash(text: str) -> Slash | None:
    """None if ``text`` is a message, not a command. Raises SlashError with a readable reason."""
    if not text.startswith("/") or text.startswith("//"):
        return None
    name, _, arg = text[1:].strip().partition(" ")
    parse = _ARGUMENTS.get(name)
    if parse is None:
        raise SlashError(f"unknown command /{name}; /help lists them")
    return Slash(name, parse(arg.strip()))
