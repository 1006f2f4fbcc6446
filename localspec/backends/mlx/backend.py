"""The MLX backend: any model mlx-lm can load (Apple silicon; MLX's CPU build on Linux for development).

A model folder (config.json, safetensors, tokenizer.json; what `localspec pull NAME --backend mlx`
downloads) is loaded with mlx-lm's own classes; the tokenizer and chat template come from the folder
through the `tokenizers` package. The KV cache is mlx-lm's prompt cache; rolling back rejected tokens trims
it. A hybrid model's recurrent state (Qwen3.5) is rolled back from snapshots (mlx_rollback.py); models whose
cache can be neither (a sliding-window cache that wraps) are refused for speculation before anything is
generated.

Hidden states without touching mlx-lm's code: the decoder layers and the final norm of the inner model
get a subclass whose call also records its input (a layer) or output (the norm), so EAGLE heads can be
fed from any architecture that stacks `model.model.layers` and ends with `model.model.norm`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from localspec.backends.base import Backend, Capabilities, ModelBackend, ModelInfo
from localspec.backends.tokenizer import Tokenizer
from localspec.errors import ConfigError, ContextOverflow, ModelError
from localspec.types import ForwardOut

DEFAULT_CTX = 4096


def _mlx():
    try:
        import mlx.core as mx
        import mlx_lm  # noqa: F401
    except ImportError as exc:
        raise ConfigError(
            "the mlx backend needs mlx-lm: pip install 'localspec[mlx]' (on Apple silicon; mlx-lm[cpu] on Linux)"
        ) from exc
    return mx


class MlxBackend(ModelBackend):
    name = "mlx"

    def __init__(self, path, *, n_ctx: int | None = None, **_ignored) -> None:
        super().__init__()
        _mlx()
        folder = Path(path)
        if not folder.is_dir():
            raise ModelError(
                f"{folder}: the mlx backend loads a model folder (config.json + safetensors), as "
                f"`localspec pull NAME --backend mlx` downloads; for a .gguf file use --backend llama.cpp"
            )
        from mlx_lm.utils import load_model

        from localspec.backends.torch.hf import HfTokenizer

        try:
            model, config = load_model(folder)
        except (ValueError, FileNotFoundError, KeyError) as exc:
            raise ModelError(f"{folder}: mlx-lm cannot load this model ({exc})") from exc
        self._setup(model, HfTokenizer(folder), n_ctx, config.get("max_position_embeddings"), folder.name)

    @classmethod
    def from_model(cls, model, tokenizer: Tokenizer, n_ctx: int = 512, name: str = "<memory>") -> MlxBackend:
        """A backend around an mlx-lm model built in memory (tests, tools) and any tokenizer."""
        self = cls.__new__(cls)
        Backend.__init__(self)
        self._setup(model, tokenizer, n_ctx, None, name)
        return self

    def _setup(self, model, tokenizer: Tokenizer, n_ctx: int | None, max_positions: int | None, name: str) -> None:
        from mlx_lm.models.cache import can_trim_prompt_cache

        self.model, self.tokenizer = model, tokenizer
        self._new_cache()
        inner = getattr(model, "model", None)
        self._inner = inner if inner is not None and hasattr(inner, "layers") and hasattr(inner, "norm") else None
        self.n_ctx = min(n_ctx or DEFAULT_CTX, max_positions or DEFAULT_CTX * 32)
        self.capabilities = Capabilities(
            can_truncate=(can_trim_prompt_cache(self.cache) or self._snapshots is not None) and self._never_wraps(),
            hidden_states=self._inner is not None,
            tree_attention=False,
            feature_layers=self._inner is not None,
            checkpoints=self._snapshots is not None,  # a recurrent state rolls back from snapshots (the report says so)
        )
        from mlx.utils import tree_flatten

        weights = sum(v.nbytes for _, v in tree_flatten(model.parameters()))  # quantized: packed, not counted
        self.info = ModelInfo(train_ctx=max_positions or 0, size_bytes=weights)
        args = _text_args(model)
        self.vocab_size = int(args.vocab_size) if args else tokenizer.vocab_size
        self.model_name = name
        self._captured: dict = {}
        self.hidden_layers: tuple[int, ...] = (-1,)
        self.hidden_size = int(args.hidden_size) if args else 0
        self.feature_width = self.hidden_size
        if self._inner is not None:
            self._install_capture()

    def _new_cache(self) -> None:
        from mlx_lm.models.cache import make_prompt_cache

        from localspec.backends.mlx.rollback import Snapshots, recurrent_caches

        self.cache = make_prompt_cache(self.model)
        arrays = recurrent_caches(self.cache)
        self._snapshots = Snapshots(arrays) if arrays else None

    def _never_wraps(self) -> bool:
        """A rotating (sliding-window) cache can be trimmed only until it wraps: refuse it unless its window
        holds the whole context."""
        from mlx_lm.models.cache import RotatingKVCache

        return all(c.max_size >= self.n_ctx for c in self.cache if isinstance(c, RotatingKVCache))

    # -- hidden states --------------------------------------------------------------------------------
    def _install_capture(self) -> None:
        store = self._captured

        def capturing(cls, key, record_output):
            def call(self_, x, *args, **kwargs):
                out = cls.__call__(self_, x, *args, **kwargs)
                if store.get("on"):
                    store[key(self_)] = out if record_output else x
                return out

            return type(f"Captured{cls.__name__}", (cls,), {"__call__": call})

        for i, layer in enumerate(self._inner.layers):
            layer.__class__ = capturing(type(layer), lambda _, i=i: i, False)
        norm = self._inner.norm
        norm.__class__ = capturing(type(norm), lambda _: -1, True)

    def set_feature_layers(self, layers: Sequence[int]) -> None:
        n = len(self._inner.layers) if self._inner is not None else 0
        if not layers or any(not -1 <= i < n for i in layers):
            raise ConfigError(f"hidden layers {tuple(layers)} asked of a {n}-layer model")
        self.hidden_layers = tuple(layers)
        self.feature_width = self.hidden_size * len(layers)

    def _features(self) -> np.ndarray:
        mx = _mlx()
        rows = mx.concatenate([self._captured[i][0] for i in self.hidden_layers], axis=-1)
        return np.array(rows.astype(mx.float32))

    # -- cache ----------------------------------------------------------------------------------------
    def truncate(self, keep: int) -> None:
        from mlx_lm.models.cache import trim_prompt_cache

        keep = max(0, keep)
        drop = len(self._tokens) - keep
        if drop <= 0:
            return
        if self._snapshots is not None:  # a recurrent state: back to a snapshot, then the kept tokens again
            start = self._snapshots.restore(keep)
            if start is not None:
                replay = self._tokens[start:keep]
                _trim_by_position(self.cache, len(self._tokens) - start)
                del self._tokens[start:]
                if replay:
                    self._run(replay, logits=False, capture=False)
                return
        elif self.capabilities.can_truncate:
            trim_prompt_cache(self.cache, drop)
            del self._tokens[keep:]
            return
        # a cache that cannot be trimmed (plain decoding only; a cut before every snapshot) is rebuilt
        kept = self._tokens[:keep]
        self._new_cache()
        self._tokens = []
        self.prefill(kept)

    @property
    def decoder(self):
        """The model's decoder stack (embeddings, layers, norm), read-only, for a head that runs on the
        target's layers (EAGLE on MLX); None when the model has no such stack."""
        return self._inner

    def checkpoint(self) -> None:
        if self._snapshots is not None:
            self._snapshots.pin(len(self._tokens))

    def prompt_cached(self) -> None:
        if self._snapshots is not None:
            self._snapshots.after_prefill(len(self._tokens))

    def _prefill_chunk(self, tokens: Sequence[int], features: bool) -> np.ndarray | None:
        self._run(tokens, logits=False, capture=features)
        return self._features() if features else None

    def forward(self, tokens: Sequence[int], return_hidden: bool = False) -> ForwardOut:
        mx = _mlx()
        logits = self._run(tokens, logits=True, capture=return_hidden)
        return ForwardOut(np.array(logits[0].astype(mx.float32)), self._features() if return_hidden else None)

    def _run(self, tokens: Sequence[int], logits: bool, capture: bool):
        mx = _mlx()
        if len(self._tokens) + len(tokens) > self.n_ctx:
            raise ContextOverflow(f"the context is full ({self.n_ctx} tokens); start a new chat or raise --ctx")
        ids = mx.array([list(tokens)], dtype=mx.int32)
        if self._snapshots is not None:
            self._snapshots.before_call(len(self._tokens))
        self._captured["on"] = capture
        try:
            if logits or self._inner is None:
                out = self.model(ids, cache=self.cache)
            else:  # a prefill needs no logits: the inner model fills the cache
                out = self._inner(ids, cache=self.cache)
            mx.eval(out)  # the output depends on every layer's cache update, so this also fills the cache
        finally:
            self._captured["on"] = False
        self._tokens.extend(int(t) for t in tokens)
        return out

    def build_id(self) -> str:
        import importlib.metadata as meta

        return f"mlx {meta.version('mlx')} mlx-lm {meta.version('mlx-lm')} {_mlx().default_device()}"

    def memory_bytes(self) -> int:
        return self.info.size_bytes + sum(c.nbytes for c in self.cache)

    def close(self) -> None:
        super().close()
        self.cache = None


def _text_args(model):
    """The text model's arguments (vocab_size, hidden_size): a multimodal checkpoint's (Qwen3.5, Gemma-4)
    are its language model's."""
    language = getattr(model, "language_model", None)
    args = getattr(language, "args", None) or getattr(model, "args", None)
    return args if hasattr(args, "vocab_size") else None


def _trim_by_position(cache, n: int) -> None:
    """Trim ``n`` positions off every cache that trims by position (the recurrent ones are put back)."""
    for c in cache:
        if c.is_trimmable():
            c.trim(n)
