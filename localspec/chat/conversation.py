"""A conversation: messages in, prompt tokens out, within the model's context.

Truncation policy when a conversation outgrows the context: the oldest user/assistant exchanges are
dropped (the system prompt is kept) until the prompt leaves room for an answer of ``reserve`` tokens.
If the newest message alone does not fit, that is a ContextOverflow error. The cached prefix of the
previous turn is reused by the engine, so a growing chat prefills only the new messages.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from localspec.backends.base import Backend
from localspec.errors import ContextOverflow


@dataclass
class Conversation:
    system: str | None = None
    messages: list[dict] = field(default_factory=list)  # user/assistant turns, oldest first
    dropped: int = 0  # messages left out of the prompt to fit the context

    def add(self, role: str, content: str, reasoning: str | None = None) -> None:
        """A message; an assistant's ``reasoning`` (its thinking, reasoning.py) is kept apart from its content."""
        self.messages.append({"role": role, "content": content, **({"reasoning": reasoning} if reasoning else {})})

    def clear(self) -> None:
        self.messages.clear()
        self.dropped = 0

    def prompt_tokens(self, backend: Backend, reserve: int, options: dict | None = None) -> list[int]:
        """Tokens of the conversation ready for the assistant's answer, keeping ``reserve`` tokens free;
        ``options`` are the chat template's own (``enable_thinking``)."""
        reserve = min(reserve, backend.n_ctx // 4)
        head = [{"role": "system", "content": self.system}] if self.system else []
        messages = [template_message(m) for m in self.messages]
        first = self.dropped
        while True:
            tokens = backend.tokenizer.chat_tokens(head + messages[first:], options=options)
            if len(tokens) + reserve <= backend.n_ctx:
                self.dropped = first
                return tokens
            if first >= len(self.messages) - 1:
                raise ContextOverflow(
                    f"the message is {len(tokens)} tokens with the system prompt, more than "
                    f"the context of {backend.n_ctx} tokens allows with room for an answer; "
                    f"shorten it or raise --ctx"
                )
            first += 2 if self.messages[first]["role"] == "user" and first + 2 < len(self.messages) else 1


def template_message(message: dict) -> dict:
    """A message as chat templates read it: the reasoning under ``reasoning_content``, the name Qwen3's and
    other templates use (most leave earlier turns' reasoning out of the prompt)."""
    if "reasoning" not in message:
        return message
    out = {k: v for k, v in message.items() if k != "reasoning"}
    out["reasoning_content"] = message["reasoning"]
    return out
