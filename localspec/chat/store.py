"""Chats saved as you go (one JSON file per chat), so a chat can be resumed and nothing is lost on quit.

Files live in ``$LOCALSPEC_DATA/chats`` (default ``~/.local/share/localspec/chats``) and are replaced
atomically after every turn. Each assistant message keeps the stats of the turn that produced it, and a
reasoning model's thinking under ``reasoning``, apart from its ``content``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from localspec.chat.conversation import Conversation
from localspec.errors import ConfigError
from localspec.fileio import atomic_write
from localspec.places import data_dir


def chats_dir() -> Path:
    return data_dir() / "chats"


@dataclass
class SavedChat:
    id: str
    model: str
    conversation: Conversation
    stats: list[dict | None] = field(default_factory=list)  # per message; None for user messages
    created: float = field(default_factory=time.time)

    @classmethod
    def new(cls, model: str, system: str | None = None) -> SavedChat:
        return cls(time.strftime("%Y%m%d-%H%M%S-") + os.urandom(2).hex(), model, Conversation(system=system))

    def add(self, role: str, content: str, stats: dict | None = None, reasoning: str | None = None) -> None:
        self.conversation.add(role, content, reasoning)
        self.stats.append(stats)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "created": self.created,
            "model": self.model,
            "system": self.conversation.system,
            "messages": [
                dict(m, stats=s) if s else dict(m) for m, s in zip(self.conversation.messages, self.stats, strict=False)
            ],
        }

    def to_markdown(self) -> str:
        lines = [f"# Chat {self.id} — {self.model}", ""]
        if self.conversation.system:
            lines += [f"*System:* {self.conversation.system}", ""]
        for message, stats in zip(self.conversation.messages, self.stats, strict=False):
            lines += [f"**{message['role']}:**", ""]
            if message.get("reasoning"):
                lines += ["<details><summary>reasoning</summary>", "", message["reasoning"], "", "</details>", ""]
            lines += [message["content"], ""]
            if stats:
                rate = stats.get("acceptance_rate")
                lines += [
                    f"*{stats.get('generated_tokens')} tokens, {stats.get('decode_tok_s')} tok/s, "
                    f"acceptance {'-' if rate is None else f'{rate:.0%}'}, "
                    f"tau {stats.get('mean_accepted_length')}*",
                    "",
                ]
        return "\n".join(lines)

    def save(self, path: Path | None = None) -> Path:
        path = path or chats_dir() / f"{self.id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        text = self.to_markdown() if path.suffix == ".md" else json.dumps(self.to_json(), indent=1, ensure_ascii=False)
        atomic_write(path, text.encode("utf-8"))
        return path


def load_chat(chat_id: str | None = None) -> SavedChat:
    """A saved chat by id (or file path); None = the most recent one."""
    folder = chats_dir()
    if chat_id is None:
        files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
        if not files:
            raise ConfigError(f"there is no saved chat to resume in {folder}")
        path = files[-1]
    else:
        path = Path(chat_id) if chat_id.endswith(".json") else folder / f"{chat_id}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        chat = SavedChat(
            data["id"],
            data.get("model", ""),
            Conversation(system=data.get("system")),
            created=data.get("created", time.time()),
        )
        for m in data["messages"]:
            chat.add(m["role"], m["content"], m.get("stats"), m.get("reasoning"))
    except FileNotFoundError:
        raise ConfigError(f"no saved chat {chat_id!r} in {folder} (ls it to see the ids)") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"the saved chat {path} cannot be read ({exc!r}); it was left as it is") from exc
    return chat


def saved_chats() -> list[SavedChat]:
    """Every saved chat that can be read (an unreadable one is skipped and left as it is)."""
    out = []
    for path in sorted(chats_dir().glob("*.json")):
        try:
            out.append(load_chat(str(path)))
        except ConfigError:
            continue
    return out
