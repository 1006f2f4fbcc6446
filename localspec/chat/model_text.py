"""The loaded model's text side, as the chat and the server build prompts and read answers with it: its chat
template, reasoning markers, special and fill-in-the-middle tokens, and what `/v1/models` says of it."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from localspec.backends.base import Backend
from localspec.chat.conversation import Conversation
from localspec.chat.fim import Infill, infill_tokens
from localspec.chat.reasoning import ReasoningFormat, reasoning_format
from localspec.errors import ModelError
from localspec.structured.constraint import special_token


@dataclass(eq=False)
class ModelText:
    backend: Backend
    model_name: str
    max_tokens: int  # the session's answer length: what a prompt leaves room for when a request names none
    template_options: dict = field(default_factory=dict)  # the chat template's own variables (enable_thinking)

    @property
    def chat_template(self) -> str | None:
        return self.backend.tokenizer.chat_template

    def chat_text(self, messages: list[dict], tools: list[dict] | None = None) -> str:
        return self.backend.tokenizer.chat_text(messages, tools=tools, options=self.template_options)

    @cached_property
    def reasoning(self) -> ReasoningFormat | None:
        """The markers this model's reasoning comes between (reasoning.py), None for a model without them."""
        hello = [{"role": "user", "content": "Hello"}]
        return reasoning_format(self.chat_template, lambda: self.chat_text(hello))

    def prompt_tokens(self, messages: list[dict], reserve: int) -> list[int]:
        """``messages`` in the chat template as token ids, the oldest turns dropped to leave ``reserve`` free."""
        conversation = Conversation()
        conversation.messages = [dict(m) for m in messages]
        return conversation.prompt_tokens(self.backend, reserve=reserve, options=self.template_options)

    def template_tokens(self, text: str) -> list[int]:
        return self.backend.tokenizer.template_tokens(text)

    def text_prompt(self, text: str) -> list[int]:
        tokenizer = self.backend.tokenizer
        return tokenizer.with_bos(tokenizer.tokenize(text))

    def infill_prompt(self, infill: Infill, max_tokens: int | None) -> list[int]:
        """A fill-in-the-middle prompt in this model's FIM tokens (chat/fim.py), room left for the answer."""
        b, tokenizer = self.backend, self.backend.tokenizer
        marks = tokenizer.fim_tokens()
        if marks is None:
            raise ModelError(
                f"{self.model_name} has no fill-in-the-middle tokens (prefix, suffix and middle markers), so it "
                "cannot fill in code; serve a code model that has them (Qwen2.5-Coder, StarCoder 2, CodeLlama, "
                "DeepSeek-Coder)"
            )
        bos = tokenizer.bos_token if tokenizer.add_bos else None
        room = min(max_tokens or self.max_tokens, b.n_ctx // 2)  # clients send 4096 whatever the context: clipped
        return infill_tokens(infill, marks, tokenizer.tokenize, b.n_ctx, room, bos)

    def special_token(self, text: str) -> int | None:
        """The special token that is ``text`` in this model's vocabulary (as a grammar sees it), else None."""
        tokenizer = self.backend.tokenizer
        return special_token(tokenizer.grammar_tokenizer(), tokenizer.tokenize(text, special=True))

    def token_bytes(self, token: int) -> bytes:
        return self.backend.tokenizer.token_bytes(token)

    def ends_generation(self, token: int) -> bool:
        return token in self.backend.tokenizer.eog_tokens

    @property
    def context_size(self) -> int:
        return self.backend.n_ctx

    def model_card(self) -> dict:
        """What the model is, in llama-server's `/v1/models` `meta` names (on the thread that owns the model)."""
        b, info = self.backend, self.backend.info
        card = {"n_ctx": b.n_ctx, "n_vocab": b.vocab_size, "n_params": info.n_params, "size": info.size_bytes}
        return {"n_ctx_train": info.train_ctx, **card} if info.train_ctx else card
