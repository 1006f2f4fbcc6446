"""`localspec run`: answer one prompt and print the turn's stats."""

from __future__ import annotations

import json
import sys

NAMES = ("run",)


def add_parser(sub, common) -> None:
    run = sub.add_parser("run", parents=[common], help="answer one prompt and print the turn's stats")
    run.add_argument("prompt", help="the user message ('-' reads it from stdin)")
    run.add_argument("--json", action="store_true", help="print the answer and its stats as one JSON object")


def run(args) -> int:
    from localspec.apps.cli.common import read_settings, stream_answer
    from localspec.chat.conversation import Conversation
    from localspec.session import Session

    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    conversation = Conversation(system=args.system)
    conversation.add("user", prompt)
    with Session.open(read_settings(args)) as session:
        if not args.json:
            print(f"loaded {session.load_report()}", file=sys.stderr)
        else:  # said even when only JSON is wanted: a recommended drafter gave way, --exact's fallback
            for line in filter(None, (session.fallback, session.exact.notice())):
                print(f"localspec: {line}", file=sys.stderr)
        answered = stream_answer(session, conversation, *((None, None) if args.json else (sys.stdout, sys.stderr)))
        if args.json:
            print(
                json.dumps(
                    {
                        "model": session.model_name,
                        "drafter": session.drafter.name,
                        "model_memory_mb": round(session.backend.memory_bytes() / 2**20, 1),
                        "text": answered.text,
                        **({"reasoning": answered.reasoning} if session.text.reasoning or answered.reasoning else {}),
                        "finish_reason": answered.finish,
                        "stats": answered.stats.to_dict(),
                    },
                    ensure_ascii=False,
                )
            )
        else:
            print()
            print(f"[{session.drafter.name}] {answered.stats.summary()}", file=sys.stderr)
    return 130 if answered.finish == "interrupted" else 0
