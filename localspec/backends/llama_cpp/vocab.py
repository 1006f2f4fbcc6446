"""A GGUF's vocabulary through llama.cpp: the tokenizer of a LlamaCppBackend, and (loaded without weights,
``LlamaVocab.load``) of a torch backend reading the same file."""

from __future__ import annotations

import ctypes
from pathlib import Path

from localspec.backends.llama_cpp.capi import check_gguf, clear_log, free, load_failed, load_lib, meta_str
from localspec.backends.tokenizer import Tokenizer
from localspec.errors import ModelError
from localspec.types import FimTokens

_ATTR_UNDEFINED, _ATTR_UNUSED = 0, 2  # llama_token_attr flags


class LlamaVocab(Tokenizer):
    """The vocabulary of a loaded ``llama_model`` (borrowed: the backend that loaded it frees it, unless this
    vocabulary loaded it itself)."""

    def __init__(self, lib, model, fallback_name: str) -> None:
        self._lib, self._model, self._ctx, self._owned = lib, model, None, False
        self._vocab = lib.llama_model_get_vocab(model)
        self.vocab_size = lib.llama_vocab_n_tokens(self._vocab)
        self.bos_token = _present(lib.llama_vocab_bos(self._vocab))
        self.eos_token = _present(lib.llama_vocab_eos(self._vocab))
        self.add_bos = bool(lib.llama_vocab_get_add_bos(self._vocab))
        self.eog_tokens = frozenset(t for t in range(self.vocab_size) if lib.llama_vocab_is_eog(self._vocab, t))
        template = lib.llama_model_chat_template(model, None)
        self.chat_template = template.decode("utf-8") if template else None
        self.model_name = meta_str(lib, model, "general.name") or fallback_name
        self._piece = ctypes.create_string_buffer(256)
        self._pieces: dict[tuple[int, bool], bytes] = {}
        self._grammar = None  # built on first use (grammar_tokenizer)

    @classmethod
    def load(cls, path) -> LlamaVocab:
        """The vocabulary of the GGUF at ``path``, loaded alone (no weights, no context)."""
        path, lib = check_gguf(path), load_lib()
        params = lib.llama_model_default_params()
        params.vocab_only = True
        clear_log()
        model = lib.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            raise load_failed(path)
        try:
            vocab = cls(lib, model, Path(path).name)
        except BaseException:
            lib.llama_model_free(model)
            raise
        vocab._owned = True
        return vocab

    def _check_open(self) -> None:
        if self._vocab is None:
            raise ModelError("the model's vocabulary was closed with the model; load the model again")

    def tokenize(self, text: str, special: bool = False) -> list[int]:
        self._check_open()
        data = text.encode("utf-8")
        size = len(data) + 8
        while True:
            buf = (self._lib.llama_token * size)()
            n = self._lib.llama_tokenize(self._vocab, data, len(data), buf, size, False, special)
            if n >= 0:
                return list(buf[:n])
            size = -n

    def _piece_bytes(self, token: int, special: bool) -> bytes:
        key = (token, special)
        piece = self._pieces.get(key)
        if piece is None:
            self._check_open()
            buf = self._piece
            n = self._lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = self._lib.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, special)
            piece = self._pieces[key] = buf.raw[:n]
        return piece

    def token_bytes(self, token: int) -> bytes:
        return self._piece_bytes(token, False)

    def token_text(self, token: int) -> str:
        return self._piece_bytes(token, True).decode("utf-8", errors="replace")

    def kind(self) -> str:
        self._check_open()
        lib, model = self._lib, self._model
        return (
            f"{meta_str(lib, model, 'tokenizer.ggml.model') or ''}/{meta_str(lib, model, 'tokenizer.ggml.pre') or ''}"
        )

    def is_padding(self, token: int) -> bool:
        self._check_open()
        attr = self._lib.llama_vocab_get_attr(self._vocab, token)
        return bool(attr & _ATTR_UNUSED) or (attr == _ATTR_UNDEFINED and self.token_text(token) == "")

    def fim_tokens(self) -> FimTokens | None:
        """From the model file (its ids, or the markers llama.cpp's vocabulary loader recognised by text)."""
        self._check_open()
        lib, v = self._lib, self._vocab
        roles = {"pre": lib.llama_vocab_fim_pre, "suf": lib.llama_vocab_fim_suf, "mid": lib.llama_vocab_fim_mid,
                 "rep": lib.llama_vocab_fim_rep, "sep": lib.llama_vocab_fim_sep}  # fmt: skip
        found = {role: _present(get(v)) for role, get in roles.items()}
        return FimTokens(**found) if None not in (found["pre"], found["suf"], found["mid"]) else None

    def grammar_tokenizer(self):
        """The vocabulary for llguidance, which then tokenizes through llama_tokenize natively (right for
        SentencePiece vocabularies, which a Python callback gets wrong by a leading space). Control tokens,
        and user-defined ones written like them (<...>), are marked special: never text a grammar allows."""
        if self._grammar is None:
            self._check_open()
            import llguidance

            lib, special = self._lib, self._lib.LLAMA_TOKEN_ATTR_CONTROL
            pieces = []
            for token in range(self.vocab_size):
                piece, attr = self._piece_bytes(token, True), lib.llama_vocab_get_attr(self._vocab, token)
                user_tag = attr & lib.LLAMA_TOKEN_ATTR_USER_DEFINED and piece[:1] == b"<" and piece[-1:] == b">"
                pieces.append(b"\xff" + piece if attr & special or user_tag else piece)
            tokenize = ctypes.cast(lib.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
            self._grammar = llguidance.LLTokenizer.from_llamacpp(
                tokens=pieces, vocab_ptr=self._vocab, tokenize_fptr=tokenize, eos_token=sorted(self.eog_tokens)
            )
        return self._grammar

    def close(self) -> None:
        """Free the vocabulary-only model it loaded; a borrowed one is its backend's to free (which then calls
        ``detach``)."""
        if self._owned:
            free(self)
        self.detach()

    def detach(self) -> None:
        """The model is gone: every later call that needs it raises instead of reading freed memory."""
        self._model = self._vocab = self._grammar = None

    def __del__(self) -> None:
        if getattr(self, "_owned", False):
            self.close()


def _present(token: int) -> int | None:
    """llama.cpp's -1 (no such token) as None."""
    return token if token >= 0 else None
