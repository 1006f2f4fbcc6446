"""A model's tokenizer: its vocabulary, special tokens and chat template, reached as ``backend.tokenizer``.

Each backend hands out one: llama.cpp reads the GGUF's vocabulary (backends/llama_cpp/vocab.py, which also
serves torch's GGUF models), torch and MLX model folders read tokenizer.json (backends/torch/hf.py).
"""

from __future__ import annotations

import codecs
import hashlib
from collections.abc import Callable, Sequence

from localspec.backends.chat_template import render_chat
from localspec.types import FimTokens

# the texts code models give their fill-in-the-middle markers, prefix first (Qwen2.5-Coder, StarCoder, Granite,
# DeepSeek-Coder, CodeLlama), as llama.cpp's vocabulary loader recognises them where a file names no ids
FIM_MARKERS = {
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>"),
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>"),
    "mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>"),
    "rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "sep": ("<|file_sep|>",),
}


class Tokenizer:
    """Text to token ids and back. Subclasses implement ``tokenize`` and ``token_bytes`` and set the
    vocabulary's facts below."""

    vocab_size: int  # ids the vocabulary has (a model's logits may be wider: padding)
    eog_tokens: frozenset[int] = frozenset()  # ids that end a turn
    bos_token: int | None = None
    eos_token: int | None = None
    add_bos: bool = False  # prompts start with bos_token
    chat_template: str | None = None  # the model's Jinja chat template
    model_name: str = ""  # the model's name as its files give it

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        """Token ids of ``text``; ``special`` parses control tokens such as <|im_start|> (templates)."""
        raise NotImplementedError

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for in generated text (control tokens render as nothing)."""
        raise NotImplementedError

    def token_text(self, token: int) -> str:
        """The vocabulary entry of a token, for display and vocabulary comparison."""
        return self.token_bytes(token).decode("utf-8", errors="replace")

    def kind(self) -> str:
        """The tokenizer's algorithm and pre-tokenizer, e.g. 'gpt2/qwen2' ('' where it cannot tell)."""
        return ""

    def is_padding(self, token: int) -> bool:
        """True for ids that only pad the vocabulary (never produced by the tokenizer)."""
        return False

    def key(self, width: int | None = None) -> str:
        """A fingerprint of the vocabulary over ``width`` ids (a model's logits width, padding included; default
        the vocabulary's size): equal only for models whose tokens are the same."""
        width = self.vocab_size if width is None else width
        keys = self.__dict__.setdefault("_keys", {})
        if width not in keys:
            h = hashlib.sha256(str(width).encode())
            for token in range(width):
                h.update(self.token_text(token).encode("utf-8", errors="replace") + b"\0")
            keys[width] = h.hexdigest()
        return keys[width]

    def detokenizer(self) -> StreamDetokenizer:
        return StreamDetokenizer(self.token_bytes)

    def grammar_tokenizer(self):
        """The vocabulary as llguidance sees it (an ``LLTokenizer``, built once: ~1 s for 150k tokens), for
        structured output. This one works from ``token_bytes`` and ``tokenize``; end-of-generation and
        beginning tokens are marked special (never text the grammar may allow)."""
        if getattr(self, "_grammar", None) is None:
            import llguidance

            specials = set(self.eog_tokens) | ({self.bos_token} if self.bos_token is not None else set())
            pieces = [
                b"\xff" + (self.token_text(t) or f"<special_{t}>").encode() if t in specials else self.token_bytes(t)
                for t in range(self.vocab_size)
            ]
            tokenizer = self

            class Vocabulary:
                eos_token_id, bos_token_id = min(self.eog_tokens), self.bos_token
                special_token_ids, tokens = sorted(specials), pieces

                def __call__(self, data: bytes) -> list[int]:
                    return tokenizer.tokenize(data.decode("utf-8", errors="replace"))

            self._grammar = llguidance.LLTokenizer(
                llguidance.TokenizerWrapper(Vocabulary()), eos_token=sorted(self.eog_tokens)
            )
        return self._grammar

    def fim_tokens(self) -> FimTokens | None:
        """The model's fill-in-the-middle tokens, None where it has no prefix, suffix and middle markers. This one
        looks the markers up by their text (``FIM_MARKERS``), each of which must be one token of the vocabulary;
        llama.cpp's vocabulary reads them from the model file."""
        found = {}
        for role, texts in FIM_MARKERS.items():
            for text in texts:
                ids = self.tokenize(text, special=True)
                if len(ids) == 1 and self.token_text(ids[0]) == text:
                    found[role] = ids[0]
                    break
        return FimTokens(**found) if {"pre", "suf", "mid"} <= found.keys() else None

    def chat_text(
        self, messages: Sequence[dict], add_generation_prompt: bool = True, tools=None, options: dict | None = None
    ) -> str:
        """The conversation (and the tools offered, for templates that render them) in the model's own chat
        template, with the template's own ``options`` (``enable_thinking``)."""
        bos = self.token_text(self.bos_token) if self.bos_token is not None else ""
        eos = self.token_text(self.eos_token) if self.eos_token is not None else ""
        return render_chat(
            self.chat_template,
            messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos,
            eos_token=eos,
            tools=tools,
            options=options,
        )

    def chat_tokens(
        self, messages: Sequence[dict], add_generation_prompt: bool = True, options: dict | None = None
    ) -> list[int]:
        """The conversation rendered with the model's own chat template, as token ids."""
        return self.template_tokens(self.chat_text(messages, add_generation_prompt, options=options))

    def template_tokens(self, text: str) -> list[int]:
        """Rendered template text as token ids (its special tokens are tokens, not text)."""
        return self.with_bos(self.tokenize(text, special=True))

    def with_bos(self, tokens: list[int]) -> list[int]:
        """``tokens`` led by the BOS token, when the model wants one and they lack it."""
        if self.add_bos and self.bos_token is not None and tokens[:1] != [self.bos_token]:
            return [self.bos_token, *tokens]
        return tokens

    def close(self) -> None:
        """Let go of what the tokenizer holds (a vocabulary-only model it loaded itself)."""


class StreamDetokenizer:
    """Turns a stream of token ids into text without ever splitting a UTF-8 character: bytes of an
    incomplete character are held back until the token that completes it arrives."""

    def __init__(self, token_bytes: Callable[[int], bytes]) -> None:
        self._token_bytes = token_bytes
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        return self._decoder.decode(self._token_bytes(token))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)
