"""What every backend provides: one loaded model, its tokenizer (backends/tokenizer.py) and its KV cache.

The backend owns the cache; the engine only asks for it to be extended (prefill, forward) or cut back
(truncate). ``cached_tokens`` are the tokens whose keys/values are in the cache, position i at index i.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from localspec.backends.tokenizer import Tokenizer
from localspec.errors import ConfigError
from localspec.types import BatchLoad, ForwardOut

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
    max_rollback: int | None = None  # the most positions truncate may cut back at once (None: any)
    checkpoints: bool = False  # the cache saves a state before each verify window (a recurrent model without snapshots)
    mtp_layers: int = 0  # the model file's own MTP (next-n) layers, loaded (llama.cpp): what `--drafter mtp` runs


@dataclass(frozen=True)
class ModelInfo:
    """What a loaded model is, fixed at load: for the load report, bench's records and `/v1/models`."""

    placement: str = ""  # where the weights went ("" when there is nothing to say)
    train_ctx: int = 0  # the context length the model was trained for (0: unknown)
    n_params: int = 0  # the parameter count (0: unknown)
    size_bytes: int = 0  # the bytes of the weights (every part of a split file)
    gpu_layers: int = 0  # layers whose weights went to a GPU (a side context on the same weights offloads as many)
    snapshot_bytes: int = 0  # bytes a recurrent state's snapshots take (0: the cache is cut by position)


class Backend:
    """Base class with the bookkeeping every backend shares. Subclasses implement the ``_``-less abstract
    methods below and keep ``self._tokens`` equal to what their cache holds."""

    name = "base"
    capabilities = Capabilities()
    info = ModelInfo()
    n_ctx: int
    vocab_size: int  # the width of a logits row
    tokenizer: Tokenizer  # its vocabulary, special tokens and chat template
    model_name: str = ""
    path: Path | None = None  # the model file or folder (None: built in memory)
    n_threads: int | None = None  # CPU threads a forward runs on (None: the library's choice)
    n_batch: int = 512  # the most tokens one forward takes; longer inputs go in chunks

    def __init__(self) -> None:
        self._tokens: list[int] = []

    # -- cache ----------------------------------------------------------------------------------------
    @property
    def cached_tokens(self) -> tuple[int, ...]:
        return tuple(self._tokens)

    def truncate(self, keep: int) -> None:
        """Keep the first ``keep`` cached positions (absolute; a no-op if ``keep`` is past the cache)."""
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
    def build_id(self) -> str:
        """What besides the model file decides a forward's cost: library version, device, dtype, threads."""
        return ""

    def memory_bytes(self) -> int:
        """The bytes the model takes now: its weights, and its cache where the backend counts it."""
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


class ModelBackend(Backend):
    """A backend that runs its own model (torch, MLX) beside a tokenizer read from its files; prompts are
    prefilled in chunks by one loop. Subclasses implement
    ``_prefill_chunk(tokens, features) -> feature rows or None`` and set ``feature_width``."""

    feature_width: int = 0
    PREFILL_CHUNK = 256

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
