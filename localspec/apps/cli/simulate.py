"""`localspec simulate`: replay recorded answers through a drafter against a perfect oracle (no decoding)."""

from __future__ import annotations

import json
from pathlib import Path

from localspec.errors import ConfigError, LocalspecError

NAMES = ("simulate",)


def add_parser(sub, common) -> None:
    sim = sub.add_parser(
        "simulate",
        parents=[common],
        help="replay recorded answers through a drafter against a perfect oracle (no decoding)",
    )
    sim.add_argument(
        "file",
        help='JSONL: per line {"messages": [...]} ending with the assistant\'s answer, '
        'or {"prompt": ..., "answer": ...}',
    )
    sim.add_argument(
        "--cost-curve",
        help="JSON from benchmarks/verify_cost.py: also predict the speedup on the machine it was measured on",
    )


def run(args) -> int:
    """Replays each recorded answer of FILE, in order, through the drafter (which may learn across them)."""
    from localspec.apps.cli.common import read_settings
    from localspec.bench.simulate import cost_curve, simulate, summary
    from localspec.session import Session

    records = read_recorded_chats(args.file)
    step_cost = None
    if args.cost_curve:
        try:
            step_cost = cost_curve(json.loads(Path(args.cost_curve).read_text(encoding="utf-8"))["ms"])
        except (OSError, ValueError, KeyError) as exc:
            raise LocalspecError(f"--cost-curve {args.cost_curve}: not a verify-cost JSON ({exc!r})") from exc
    with Session.open(read_settings(args)) as session:
        cases = [
            (
                session.backend.tokenizer.chat_tokens(messages[:-1]),
                session.backend.tokenizer.tokenize(messages[-1]["content"]),
            )
            for messages in records
        ]
        k = session.speclen.max_k  # the simulator replays a fixed K (the controller's cap under 'auto')
        stats = simulate(session.drafter, cases, k, step_cost)
        print(
            json.dumps(
                {"drafter": session.drafter.name, "draft_tokens": k, "cases": len(cases), **summary(stats, step_cost)}
            )
        )
    return 0


def read_recorded_chats(path: str) -> list[list[dict]]:
    """JSONL lines of {"messages": [..., assistant answer]} or {"prompt": ..., "answer": ...}."""
    records = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from exc
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            messages = record.get("messages") or [
                {"role": "user", "content": record["prompt"]},
                {"role": "assistant", "content": record["answer"]},
            ]
            if messages[-1]["role"] != "assistant":
                raise ValueError("the last message must be the assistant's answer")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(
                f"{path}, line {number}: {exc!r} (want messages ending with the assistant's "
                f"answer, or prompt and answer)"
            ) from exc
        records.append(messages)
    return records
