"""`localspec chat`: the Textual app on a terminal, the line-based chat otherwise (pipes, --plain)."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from localspec.chat.store import SavedChat
    from localspec.config import Settings

NAMES = ("chat",)


def add_parser(sub, common) -> None:
    chat = sub.add_parser("chat", parents=[common], help="multi-turn chat")
    chat.add_argument("--plain", action="store_true", help="line-based chat (also used when not on a terminal)")
    chat.add_argument(
        "--resume", nargs="?", const="latest", metavar="ID", help="continue a saved chat (default: the most recent one)"
    )


def run(args) -> int:
    """The Textual app on a terminal; the line-based chat otherwise (pipes, --plain)."""
    from localspec.apps.cli.common import read_settings
    from localspec.session import Session

    settings = read_settings(args)
    chat = _chat_to_continue(args, settings)
    if args.plain or not (sys.stdin.isatty() and sys.stdout.isatty()):
        return plain_chat(settings, chat)
    from localspec.apps.tui.app import ChatApp

    def open_session(progress, **changes):  # changes: settings a reload replaces (/exact)
        changed = replace(settings, **changes)
        return Session.open(changed, on_load=lambda fraction: progress(f"loading the model {fraction:.0%}"))

    app = ChatApp(open_session, chat)
    app.run()
    if chat_saved(app.chat):
        print(f"chat saved: localspec chat --resume {app.chat.id}", file=sys.stderr)
    return 0


def _chat_to_continue(args, settings: Settings) -> SavedChat:
    from localspec.chat.store import SavedChat, load_chat

    if args.resume:
        chat = load_chat(None if args.resume == "latest" else args.resume)
        if args.system:
            chat.conversation.system = args.system
        return chat
    return SavedChat.new(args.model or settings.model, settings.system)


def chat_saved(chat: SavedChat) -> bool:
    return bool(chat.conversation.messages)


def plain_chat(settings: Settings, chat: SavedChat) -> int:
    from localspec.apps.cli.common import stream_answer
    from localspec.errors import LocalspecError
    from localspec.session import Session

    interactive = sys.stdin.isatty()
    with Session.open(settings) as session:
        conversation = chat.conversation
        if interactive:
            print(
                f"localspec chat — {session.load_report()}. Ctrl-C stops an answer, Ctrl-D or /exit quits.",
                file=sys.stderr,
            )
        while True:
            if interactive:
                print("> ", end="", file=sys.stderr, flush=True)
            try:
                line = sys.stdin.readline()
            except KeyboardInterrupt:
                break
            if not line or line.strip() in ("/exit", "/quit"):
                break
            if not line.strip():
                continue
            chat.add("user", line.rstrip("\n"))
            dropped = conversation.dropped
            try:
                answered = stream_answer(session, conversation, sys.stdout, sys.stderr)
            except LocalspecError as exc:  # e.g. a message longer than the context: say so, keep chatting
                conversation.messages.pop()
                chat.stats.pop()
                print(f"localspec: error: {exc}", file=sys.stderr)
                continue
            chat.add("assistant", answered.text, answered.stats.to_dict(), reasoning=answered.reasoning)
            _save_quietly(chat)
            if conversation.dropped > dropped:
                print(f"\n(left the {conversation.dropped} oldest messages out to fit the context)", file=sys.stderr)
            note = " (interrupted)" if answered.finish == "interrupted" else ""
            print()
            print(f"[{session.drafter.name}] {answered.stats.summary()}{note}", file=sys.stderr, flush=True)
    return 0


def _save_quietly(chat: SavedChat) -> None:
    try:
        chat.save()
    except OSError as exc:
        print(f"localspec: could not save the chat: {exc}", file=sys.stderr)
