"""What every backend provides: one loaded model, its tokenizer and its KV cache.

The backend owns the cache; the engine only asks for it to be extended (prefill, forward) or cut back
(truncate). ``cached_tokens`` are the tokens whose keys/values are in the cache, position i at index i.
"""

from __future__ import annotations

import codecs
import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from localspec.backends.chat_template import render_chat
from localspec.errors import ConfigError
from localspec.types import BatchLoad, FimTokens, ForwardOut

# the texts code models give their fill-in-the-middle markers, prefix first (Qwen2.5-Coder, StarCoder, Granite,
# DeepSeek-Coder, CodeLlama), as llama.cpp's vocabulary loader recognises them where a file names no ids
FIM_MARKERS = {
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>"),
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>"),
    "mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>"),
    "rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "sep": ("<|file_sep|>",),
}

Progress = Callable[[int, int], None] | None  # (done, total) tokens


@dataclass(frozen=True)
class Capabilities:
    """What a backend offers; a drafter's ``needs`` (drafters/base.py) are checked against it."""

    can_truncate: bool = True  # truncate rolls the cache back (what any speculation needs)
    hidden_states: bool = False  # prefill_features and forward(return_hidden=True)
    tree_attention: bool = False  # forward_tree and accept_path
    feature_layers: bool = False  # set_feature_layers picks the layers whose hidden states come back
    batch_invariant: bool = False  # set_batch_invariant(True) makes a window's rows equal 1-token steps' bit for bit
    snapshots: bool = False  # save_state / load_state copy the cache out and back (the server's conversation states)


class Backend:
    """Base class with the bookkeeping every backend shares. Subclasses implement the ``_``-less abstract
    methods below and keep ``self._tokens`` equal to what their cache holds."""

    name = "base"
    capabilities = Capabilities()
    n_ctx: int
    vocab_size: int
    eog_tokens: frozenset[int]
    bos_token: int | None = None
    eos_token: int | None = None
    add_bos: bool = False
    chat_template: str | None = None
    model_name: str = ""
    max_rollback: int | None = None  # the most positions truncate may cut back at once (None: any)
    placement: str = ""  # where the weights went, for the load report ("" when there is nothing to say)
    path: Path | None = None  # the model file or folder (None: built in memory)
    n_threads: int | None = None  # CPU threads a forward runs on (None: the library's choice)
    n_batch: int = 512  # the most tokens one forward takes; longer inputs go in chunks
    offloaded_layers: int = 0  # layers whose weights went to a GPU
    checkpoints: bool = False  # the cache saves a state before each verify window (a recurrent model without snapshots)
    snapshot_bytes: int = 0  # bytes one saved state of a recurrent model takes (0: the cache is cut by position)
    mtp_layers: int = 0  # the model file's own MTP (next-n) layers, loaded (llama.cpp)
    train_ctx: int = 0  # the context length the model was trained for (0: unknown)

    def __init__(self) -> None:
        self._tokens: list[int] = []

    # -- tokenizer ------------------------------------------------------------------------------------
    def tokenize(self, text: str, special: bool = False) -> list[int]:
        """Token ids of ``text``; ``special`` parses control tokens such as <|im_start|> (templates)."""
        raise NotImplementedError

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for in generated text (control tokens render as nothing)."""
        raise NotImplementedError

    def token_text(self, token: int) -> str:
        """The vocabulary entry of a token, for display and vocabulary comparison."""
        return self.token_bytes(token).decode("utf-8", errors="replace")

    def tokenizer_kind(self) -> str:
        """The tokenizer's algorithm and pre-tokenizer, e.g. 'gpt2/qwen2' ('' if the backend cannot tell)."""
        return ""

    def is_padding(self, token: int) -> bool:
        """True for ids that only pad the vocabulary (never produced by the tokenizer)."""
        return False

    def tokenizer_key(self) -> str:
        """A fingerprint of the vocabulary: equal only for models whose tokens are the same."""
        if getattr(self, "_tokenizer_key", None) is None:
            h = hashlib.sha256(str(self.vocab_size).encode())
            for token in range(self.vocab_size):
                h.update(self.token_text(token).encode("utf-8", errors="replace") + b"\0")
            self._tokenizer_key = h.hexdigest()
        return self._tokenizer_key

    def detokenizer(self) -> StreamDetokenizer:
        return StreamDetokenizer(self.token_bytes)

    def grammar_tokenizer(self):
        """The vocabulary as llguidance sees it (an ``LLTokenizer``, built once: ~1 s for 150k tokens), for
        structured output. This one works from ``token_bytes`` and ``tokenize``; end-of-generation and
        beginning tokens are marked special (never text the grammar may allow)."""
        if getattr(self, "_grammar_tokenizer", None) is None:
            import llguidance

            specials = set(self.eog_tokens) | ({self.bos_token} if self.bos_token is not None else set())
            pieces = [
                b"\xff" + (self.token_text(t) or f"<special_{t}>").encode() if t in specials else self.token_bytes(t)
                for t in range(self.vocab_size)
            ]
            backend = self

            class Vocabulary:
                eos_token_id, bos_token_id = min(self.eog_tokens), self.bos_token
                special_token_ids, tokens = sorted(specials), pieces

                def __call__(self, data: bytes) -> list[int]:
                    return backend.tokenize(data.decode("utf-8", errors="replace"))

            self._grammar_tokenizer = llguidance.LLTokenizer(
                llguidance.TokenizerWrapper(Vocabulary()), eos_token=sorted(self.eog_tokens)
            )
        return self._grammar_tokenizer

    def fim_tokens(self) -> FimTokens | None:
        """The model's fill-in-the-middle tokens, None where it has no prefix, suffix and middle markers. This one
        looks the markers up by their text (``FIM_MARKERS``), each of which must be one token of the vocabulary;
        llama.cpp reads them from the model file."""
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

    # -- cache ----------------------------------------------------------------------------------------
    @property
    def cached_tokens(self) -> tuple[int, ...]:
        return tuple(self._tokens)

    @property
    def cached_len(self) -> int:
        return len(self._tokens)

    def truncate(self, keep: int) -> None:
        """Keep the first ``keep`` cached positions (absolute; a no-op if ``keep >= cached_len``)."""
        raise NotImplementedError

    def checkpoint(self) -> None:
        """Mark the cache's current length as one a later cut may return to cheaply: a recurrent state is
        saved there (a draft model's drafts are cut back to it); a no-op for caches cut by position."""

    def prompt_cached(self) -> None:
        """The engine has cached a turn's prompt: a recurrent state is saved here, where a new turn whose
        prompt re-renders the previous answer (a template that drops its reasoning) comes back to instead of
        prefilling the whole conversation; a no-op for caches cut by position."""

    def prefill(self, tokens: Sequence[int], progress: Progress = None) -> None:
        """Append ``tokens`` to the cache without asking for any logits."""
        raise NotImplementedError

    def prefill_features(self, tokens: Sequence[int], progress: Progress = None):
        """prefill, returning the last layer's hidden state of each token (backends with hidden_states)."""
        raise NotImplementedError(f"the {self.name} backend gives no hidden states")

    def forward(self, tokens: Sequence[int], return_hidden: bool = False) -> ForwardOut:
        """Append ``tokens`` to the cache and return logits for exactly these positions (and, with
        ``return_hidden``, their features: backends with hidden_states)."""
        raise NotImplementedError

    def forward_tree(self, tokens: Sequence[int], parents: Sequence[int], return_hidden: bool = False) -> ForwardOut:
        """Verify a tree in one pass (backends with tree_attention): tokens[0] is the pending token,
        tokens[i + 1] a draft token whose parent is draft token parents[i] (-1: the pending token). Each
        attends to the cache and its own ancestors; row i of the output follows token i. The cache then
        holds every node until ``accept_path`` keeps one branch."""
        raise NotImplementedError(f"the {self.name} backend has no tree attention (forward_tree)")

    def accept_path(self, path: Sequence[int]) -> None:
        """After ``forward_tree``: keep the pending token and the draft tokens ``path`` (a branch, root
        first) in the cache, at consecutive positions; the rest is cut off (backends with tree_attention)."""
        raise NotImplementedError(f"the {self.name} backend has no tree attention (accept_path)")

    def set_feature_layers(self, layers: Sequence[int]) -> None:
        """Which hidden states ``forward(return_hidden=True)`` and ``prefill_features`` return, concatenated
        per token in this order: layer i's input, or -1 for the last layer's normed output (backends with
        feature_layers)."""
        raise NotImplementedError(f"the {self.name} backend cannot choose its feature layers (set_feature_layers)")

    def use_mtp_features(self) -> None:
        """Hand out as every position's hidden state what an MTP layer reads (the final hidden state after the
        output norm) instead of chosen layers' inputs: llama.cpp's MTP and Gemma-4 assistant drafters."""
        raise NotImplementedError(f"the {self.name} backend cannot hand out an MTP layer's input (use_mtp_features)")

    def set_batch_invariant(self, on: bool) -> None:
        """Compute verify windows exactly as 1-token steps from now on (backends with that capability)."""

    def reload_for_exact(self, exact: bool) -> bool:
        """Whether switching `--exact` to ``exact`` needs the model loaded again (a weight layout fixed at
        load); False: it switches at once."""
        return False

    def save_state(self) -> bytes:
        """The cache's contents for ``cached_tokens``, to be put back by ``load_state`` (backends with
        snapshots)."""
        raise NotImplementedError(f"the {self.name} backend cannot save its cache (save_state)")

    def load_state(self, tokens: Sequence[int], state: bytes) -> None:
        """Replace the cache by a ``save_state`` of ``tokens`` (backends with snapshots)."""
        raise NotImplementedError(f"the {self.name} backend cannot load a saved cache (load_state)")

    # -- resources ------------------------------------------------------------------------------------
    @property
    def n_params(self) -> int:
        """The model's parameter count (0: the backend cannot tell)."""
        return 0

    @property
    def size_bytes(self) -> int:
        """The bytes of the model's weights (without the cache memory_bytes counts too, where it does)."""
        return self.memory_bytes()

    def build_id(self) -> str:
        """What besides the model file decides a forward's cost: library version, device, dtype, threads."""
        return ""

    def cost_key(self) -> str | None:
        """Identifies what verify windows cost on this machine (the controller's curve is kept per key):
        the model file (path, size, mtime), the backend and its build. None: nothing to key it by."""
        path = self.path
        try:
            stat = Path(path).stat() if path is not None else None
        except OSError:
            return None
        if stat is None:
            return None
        return (
            f"{self.name}|{Path(path).resolve()}|{stat.st_size}|{int(stat.st_mtime)}|{self.build_id()}|ctx {self.n_ctx}"
        )

    def memory_bytes(self) -> int:
        return 0

    def batch_load(self) -> BatchLoad:
        """What other slots put into this cache's last forward pass, and what that pass held and took
        (Backend.slots); a cache of its own shares no pass: all zeros."""
        return BatchLoad()

    def slots(self, count: int) -> tuple[list[Backend], Callable[[], list]]:
        """``count`` caches of this model whose forward passes run together (`serve --parallel`): the slots,
        each a Backend of its own, and the function that runs every slot's pending pass in one batch and
        returns the greenlets to resume (backends/llama_cpp/slots.py). Raises ConfigError where the backend
        runs one sequence at a time."""
        raise ConfigError(f"the {self.name} backend answers one request at a time; leave --parallel at 1")

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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


class ModelBackend(Backend):
    """A backend that runs its own model (torch, MLX) next to a separate tokenizer backend: tokenizer calls
    are delegated, and prompts are prefilled in chunks by one loop. Subclasses implement
    ``_prefill_chunk(tokens, features) -> feature rows or None`` and set ``feature_width``."""

    tokenizer: Backend
    feature_width: int = 0
    PREFILL_CHUNK = 256

    def _take_tokenizer(self, tokenizer: Backend) -> None:
        self.tokenizer = tok = tokenizer
        self.eog_tokens, self.bos_token, self.eos_token = tok.eog_tokens, tok.bos_token, tok.eos_token
        self.add_bos, self.chat_template = tok.add_bos, tok.chat_template

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        return self.tokenizer.tokenize(text, special)

    def token_bytes(self, token: int) -> bytes:
        return self.tokenizer.token_bytes(token)

    def token_text(self, token: int) -> str:
        return self.tokenizer.token_text(token)

    def tokenizer_kind(self) -> str:
        return self.tokenizer.tokenizer_kind()

    def is_padding(self, token: int) -> bool:
        return self.tokenizer.is_padding(token)

    def prefill(self, tokens: Sequence[int], progress: Progress = None) -> None:
        self._chunked(tokens, progress, features=False)

    def prefill_features(self, tokens: Sequence[int], progress: Progress = None):
        """prefill that also returns the tokens' features [n, feature_width] (the backend's feature layers,
        concatenated per token)."""
        return self._chunked(tokens, progress, features=True)

    def _chunked(self, tokens: Sequence[int], progress: Progress, features: bool):
        import numpy as np

        rows = []
        for start in range(0, len(tokens), self.PREFILL_CHUNK):
            chunk = tokens[start : start + self.PREFILL_CHUNK]
            out = self._prefill_chunk(chunk, features)
            if features:
                rows.append(out)
            if progress is not None:
                progress(start + len(chunk), len(tokens))
        if not features:
            return None
        return np.concatenate(rows) if rows else np.zeros((0, self.feature_width), np.float32)

    def _prefill_chunk(self, tokens: Sequence[int], features: bool):
        raise NotImplementedError

    def close(self) -> None:
        self.model = None
        if getattr(self, "tokenizer", None) is not None:
            self.tokenizer.close()
