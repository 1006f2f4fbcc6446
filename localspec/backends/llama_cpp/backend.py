"""llama.cpp through llama-cpp-python's low-level C API: one model, one context, its cache in sequence 0.

Logits are requested only for the tokens of a verify window (never ``logits_all``); rollback is
``llama_memory_seq_rm``; model, context and batch are owned here and freed in ``close()``.

Trees are verified in one batch with llama.cpp's sequence sets (its KV cache is unified): each leaf of the
tree is a sequence of its own that first shares sequence 0's cells (``llama_memory_seq_cp``), and each node
carries the sequences of the leaves below it. A token sees the cells of its first sequence up to its own
position, so a node attends to the cache and to its ancestors only. The accepted branch's cells are copied into
sequence 0 (one node per position on a branch), then the leaf sequences are removed and the other nodes'
cells with them.

A token later placed in a freed cell *before* a cell it attends to computes wrong values (measured: logits off
by up to 0.9 on SmolLM2, with and without flash attention), so the cache never keeps such holes: the batch
lists the tree's first-child chain first, and when the accepted branch leaves it, the branch is decoded
again as a chain (with the verify kernels) into the cells right after the pending token.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from localspec.backends.base import Backend, Capabilities, ModelInfo, Progress
from localspec.backends.gguf_meta import file_type
from localspec.backends.llama_cpp.capi import (
    avoid_amx_buffers,
    check_gguf,
    clear_log,
    context_params,
    fill_batch,
    free,
    gpu_layers,
    gpu_placement,
    last_error,
    load_failed,
    load_lib,
    meta_str,
    recurrent_bytes,
    seq_state,
    set_seq_state,
)
from localspec.backends.llama_cpp.checkpoint import StateCheckpoint
from localspec.backends.llama_cpp.exact import cpu_reference_mode
from localspec.backends.llama_cpp.layout import prefill_unrepacked, repack
from localspec.backends.llama_cpp.unrepacked_prefill import UnrepackedPrefill, prefill_ctx
from localspec.backends.llama_cpp.vocab import LlamaVocab
from localspec.cpus import available_memory, default_threads
from localspec.errors import ConfigError, ContextOverflow, ModelError
from localspec.rows import LiveRows
from localspec.types import ForwardOut

DEFAULT_CTX = 4096  # where the model does not say its trained context (or the memory cannot be read)
MIN_DEFAULT_CTX = 2048  # the default context is at least this (or the trained one, if shorter)
MAX_BRANCHES = 63  # leaves of a verified tree, each a llama.cpp sequence beside sequence 0
RS_SNAPSHOTS = 16  # positions a recurrent state can be rolled back by (llama.cpp's n_rs_seq): the draft cap
RS_SHARE = 0.1  # ...unless its snapshots would take more than this share of the memory available at load
KV_SHARE = 0.5  # the default context's KV cache takes at most this share of the memory available at load
# architectures whose llama.cpp graph hands out its layers' inputs (res->t_layer_inp): EAGLE-3's features
LAYER_INPUT_ARCHS = frozenset(
    ("llama", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next", "gemma4", "gpt-oss", "lfm2", "nemotron_h")
    + ("mimo2", "minimax-m2", "deepseek4", "bailingmoe3", "nanbeige")
)


class LlamaCppBackend(Backend):
    name = "llama.cpp"
    capabilities = Capabilities(can_truncate=True, hidden_states=False, tree_attention=True, snapshots=True)

    def __init__(
        self,
        path,
        *,
        n_ctx: int | None = None,
        n_threads: int | None = None,
        n_gpu_layers: int | None = None,
        n_batch: int = 512,
        extra_buffers: bool | None = None,
        on_load: Callable[[float], None] | None = None,
        batch_invariant: bool = False,
        unrepacked_prefill: bool | None = None,
    ) -> None:
        """batch_invariant: weights stay unrepacked, so that
        ``set_batch_invariant(True)`` can make verify windows compute as 1-token steps
        (localspec/backends/llama_cpp/exact.py); the capability is reported where this build allows it.
        unrepacked_prefill: long prompts prefilled on a second, unrepacked load of the file
        (unrepacked_prefill.py); None: where layout.json says it pays on this CPU for the weights as loaded."""
        super().__init__()
        self.path = check_gguf(path)
        lib = self._lib = load_lib()
        self._model = self._ctx = self._batch = self._reference = self._checkpoint = self._turn_point = None
        self._side_prefill: UnrepackedPrefill | None = None
        self._decoded_from = 0  # the cache length before the last decode call (recurrent rollback)
        self._invariant = False
        self._held: LiveRows | None = None  # logits handed out in place (forward), until the next decode
        self._branches = 0  # leaf sequences of the tree being verified (_branch0 .. _branch0 + n - 1)
        self._seq, self._branch0 = 0, 1  # the cache's sequence and its trees' first leaf sequence (slots.py)
        self._tree = None  # (start, leaf sequence of each row, row tokens, batch order) until accept_path
        mparams = self._model_params(n_gpu_layers, extra_buffers, batch_invariant, on_load)
        clear_log()
        self._repack = bool(mparams.use_extra_bufts)
        # the MTP layers a GGUF carries are loaded with it, so that `--drafter mtp` can run (switched to mid-chat
        # too); llama.cpp requires their tensors to be in the file either way, and only skips their weights
        mparams.load_mtp = True
        self._model = lib.llama_model_load_from_file(str(self.path).encode(), mparams)
        if not self._model:
            raise load_failed(self.path)
        mtp_layers = lib.llama_model_n_layer_nextn(self._model)
        self.tokenizer = LlamaVocab(lib, self._model, self.path.name)
        self.vocab_size, self.model_name = self.tokenizer.vocab_size, self.tokenizer.model_name
        train_ctx = lib.llama_model_n_ctx_train(self._model)
        self.n_ctx = n_ctx or self._default_ctx(train_ctx)
        if self.n_ctx < 16:
            raise ConfigError(f"--ctx must be at least 16, got {self.n_ctx}")
        threads = n_threads or default_threads()
        self.n_threads = threads
        # a recurrent state (Mamba, RWKV; the hybrid Qwen3.5, Jamba, Granite-4) is not cut back by position:
        # where llama.cpp keeps per-position snapshots of it (n_rs_seq) a cut of up to that many positions works
        # and speculation is capped there; elsewhere a state saved before each verify window is restored
        # (llama_checkpoint.py); a deeper cut prefills the kept part again
        self.recurrent = bool(lib.llama_model_is_recurrent(self._model) or lib.llama_model_is_hybrid(self._model))
        self.n_batch = min(n_batch, self.n_ctx)
        self._ctx = self._new_context(threads)
        snapshot_bytes = self._setup_rollback(threads)
        self._mem = lib.llama_get_memory(self._ctx)
        self.n_layers, self.hidden_size = lib.llama_model_n_layer(self._model), lib.llama_model_n_embd(self._model)
        offload = gpu_placement(self._gpu_layers, self.n_layers)
        prefill_note = self._open_side_prefill(unrepacked_prefill, threads)
        self.info = ModelInfo(
            placement=" · ".join(filter(None, (offload, self.layout_note, prefill_note))),
            train_ctx=train_ctx,
            n_params=int(lib.llama_model_n_params(self._model)),
            size_bytes=int(lib.llama_model_size(self._model)),
            gpu_layers=self._gpu_layers,
            snapshot_bytes=snapshot_bytes,
        )
        self.feature_layers: tuple[int, ...] = ()
        self._nextn_rows = False  # the rows handed out are the MTP layers' input (use_mtp_features)
        if self.metadata("general.architecture") in LAYER_INPUT_ARCHS:
            self.capabilities = replace(self.capabilities, hidden_states=True, feature_layers=True)
        if mtp_layers:
            self.capabilities = replace(self.capabilities, hidden_states=True, mtp_layers=mtp_layers)
        self._batch = lib.llama_batch_init(self.n_batch, 0, self.max_branches + 1)
        if not mparams.use_extra_bufts:  # unrepacked weights: windows can compute as 1-token steps (--exact)
            self._reference = cpu_reference_mode(self._ctx)
            if self._reference is not None:
                self.capabilities = replace(self.capabilities, batch_invariant=True)

    def _new_context(self, threads: int, snapshots: int | None = None):
        lib = self._lib
        snapshots = RS_SNAPSHOTS if snapshots is None else snapshots
        # llama.cpp reserves its graphs for a batch of one token per sequence: no more sequences than a batch;
        # a recurrent model keeps a state per sequence (and verifies no trees): one
        self.max_branches = 0 if self.recurrent else min(MAX_BRANCHES, self.n_batch - 1)
        cparams = context_params(lib, self.n_ctx, self.n_batch, self.max_branches + 1, threads)
        cparams.kv_unified = True  # one cache that every sequence's cells share (tree verification)
        cparams.n_rs_seq = snapshots if self.recurrent else 0  # clamped to 0 where the arch has none
        ctx = lib.llama_init_from_model(self._model, cparams)
        if not ctx:
            raise ModelError(
                f"llama.cpp could not create a context of {self.n_ctx} tokens for {self.path}: "
                f"{last_error()}; try a smaller --ctx"
            )
        return ctx

    def _open_side_prefill(self, wanted: bool | None, threads: int) -> str:
        """Load the file again, unrepacked, to prefill long prompts (unrepacked_prefill.py) where ``wanted``
        (None: where layout.json says it pays for repacked weights on this CPU) and its cache fits (prefill_ctx);
        what the load report says of it."""
        if wanted is None:
            wanted = self._repack and not self._gpu_layers and prefill_unrepacked(self._quant())
        if not wanted or self.recurrent or self._gpu_layers:
            return ""
        n_ctx = prefill_ctx(self.n_ctx, self.kv_bytes_per_token(), available_memory())
        if not n_ctx:
            return ""
        try:
            self._side_prefill = UnrepackedPrefill(self._lib, self.path, n_ctx, self.n_batch, threads)
        except ModelError:  # a second load that fails (memory) costs the faster prefill, not the model
            return ""
        return f"prompts prefilled on unrepacked weights (up to {n_ctx} tokens)"

    def close_side_prefill(self) -> None:
        """Prefill every prompt in the main context from now on (the second context's memory is freed)."""
        side, self._side_prefill = self._side_prefill, None
        if side is not None:
            side.close()

    def _setup_rollback(self, threads: int) -> int:
        """How a recurrent state is cut back: snapshots (as many as fit, see _fit_snapshots), else a state
        saved before each verify window; neither: no speculation. The bytes the snapshots take."""
        if not self.recurrent:
            return 0
        lib = self._lib
        snapshot_bytes = self._fit_snapshots(threads)
        rollback = lib.llama_n_rs_seq(self._ctx)
        if not rollback and StateCheckpoint.supported(lib):
            # no snapshots: a state saved before each verify window (any cut within it, drafts of any length)
            self._checkpoint, rollback = StateCheckpoint(lib, self._ctx), None
        if StateCheckpoint.supported(lib):
            # the state where the engine cached the last turn's prompt (prompt_cached): a new turn whose prompt
            # re-renders the previous answer (a template that drops its reasoning) goes back there
            self._turn_point = StateCheckpoint(lib, self._ctx)
        can_cut = bool(rollback) or self._checkpoint is not None
        self.capabilities = replace(
            self.capabilities,
            can_truncate=can_cut,
            tree_attention=False,
            max_rollback=rollback,
            checkpoints=self._checkpoint is not None,
        )
        return snapshot_bytes

    def _fit_snapshots(self, threads: int) -> int:
        """Keep fewer recurrent-state snapshots where RS_SNAPSHOTS of them take more than RS_SHARE of the
        memory available (a context made again with as many as fit, at least one); the bytes they take.
        A snapshot's size comes from llama.cpp's own account of the recurrent memory it allocated."""
        n = self._lib.llama_n_rs_seq(self._ctx)
        total = recurrent_bytes()
        if not n or total is None:
            return 0
        per = total / (1 + n)  # the state itself and n snapshots of it
        available = available_memory()
        fits = max(1, int(RS_SHARE * available // per)) if available and per > 0 else n
        if fits < n:
            self._lib.llama_free(self._ctx)
            self._ctx = None
            self._ctx = self._new_context(threads, fits)
            n = self._lib.llama_n_rs_seq(self._ctx)
        return int(per * n)

    @property
    def lib(self):
        """The llama.cpp library the model was loaded with: a side context beside it uses the same."""
        return self._lib

    @property
    def model_handle(self):
        """The loaded ``llama_model``: a side context of type MTP runs on the target's own weights."""
        return self._model

    def kv_bytes_per_token(self) -> int:
        """f16 keys and values of every layer for one token (the GGUF's head sizes, else n_embd / n_head)."""
        lib, model = self._lib, self._model
        arch = self.metadata("general.architecture") or ""
        key = int(
            self.metadata(f"{arch}.attention.key_length")
            or lib.llama_model_n_embd(model) // max(1, lib.llama_model_n_head(model))
        )
        value = int(self.metadata(f"{arch}.attention.value_length") or key)
        return lib.llama_model_n_layer(model) * lib.llama_model_n_head_kv(model) * (key + value) * 2

    def _default_ctx(self, train_ctx: int) -> int:
        """The trained context, as far as its KV cache fits in KV_SHARE of the memory available now."""
        if train_ctx <= 0:
            return DEFAULT_CTX
        available, per_token = available_memory(), self.kv_bytes_per_token()
        fits = int(KV_SHARE * available // per_token) if available and per_token > 0 else DEFAULT_CTX
        return max(min(train_ctx, fits) // 256 * 256, min(train_ctx, MIN_DEFAULT_CTX))

    def _model_params(self, n_gpu_layers, extra_buffers, batch_invariant, on_load):
        mparams = self._lib.llama_model_default_params()
        mparams.n_gpu_layers = self._gpu_layers = gpu_layers(self._lib, n_gpu_layers)
        self._layout_fixed = extra_buffers is not None or avoid_amx_buffers()
        self.layout_note = ""  # why the weights are not repacked, for the load report
        if extra_buffers is not None:
            mparams.use_extra_bufts = extra_buffers
        elif self._layout_fixed:  # the AMX buffer type would crash: plain CPU buffers
            mparams.use_extra_bufts = False
        else:  # repacked weights compute 1 and 4+ tokens differently: --exact loads them as they are
            mparams.use_extra_bufts, self.layout_note = repack(self._quant(), batch_invariant)
        if on_load is not None:

            def report(fraction: float, user_data) -> bool:
                on_load(fraction)
                return True  # keep loading

            self._progress = self._lib.llama_progress_callback(report)
            mparams.progress_callback = self._progress
        return mparams

    def _quant(self) -> str | None:
        try:
            return file_type(self.path)
        except ModelError:
            return None

    def reload_for_exact(self, exact: bool) -> bool:
        """Whether the weights must be loaded again for ``exact``: --exact needs them unrepacked, the fast default
        repacked where layout.json says so; a GPU offload or the AMX workaround fixes the layout."""
        if self._layout_fixed or self._gpu_layers:
            return False
        return repack(self._quant(), exact)[0] != self._repack

    def set_batch_invariant(self, on: bool) -> None:
        self._invariant = on and self._reference is not None

    def metadata(self, key: str) -> str | None:
        """The model file's metadata value under ``key`` (None: the file has no such key)."""
        return meta_str(self._lib, self._model, key)

    # -- cache ----------------------------------------------------------------------------------------
    def truncate(self, keep: int) -> None:
        keep = max(0, keep)
        # Always ask llama.cpp, even if our list is short already: a Ctrl-C that lands between a decode and
        # the bookkeeping after it must not leave stray cells in the cache.
        again, restored = None, False
        # llama.cpp's snapshots hold the state after each token of the last decode call, none from before it:
        # it accepts a cut to (or past) that call's start but leaves a wrong state (measured on qwen35), so
        # such a cut is treated as one it refuses
        before_last = self.recurrent and keep < len(self._tokens) and keep <= self._decoded_from
        if before_last or not self._lib.llama_memory_seq_rm(self._mem, self._seq, keep, -1):
            # llama.cpp cannot cut this recurrent state back so far (past its snapshots, or it has none):
            # back to the state saved at the window's start, else to the start, and the kept positions again
            start, restored = self._restore_checkpoint(keep)
            again, keep = self._tokens[start:keep], start
        else:
            self._drop_points_past(keep)  # they saved positions that are gone now
        self._drop_branches()
        del self._tokens[keep:]
        if again and restored:  # a few tokens after a saved state: as the window computed them (exact kernels)
            for begin in range(0, len(again), self.n_batch):
                self._decode(again[begin : begin + self.n_batch], logits=self._invariant)
        elif again:
            self.prefill(again)

    def checkpoint(self) -> None:
        if not self.recurrent:
            return
        if self._checkpoint is None:
            if not StateCheckpoint.supported(self._lib):
                return
            self._checkpoint = StateCheckpoint(self._lib, self._ctx)
        self._checkpoint.save(len(self._tokens))

    def prompt_cached(self) -> None:
        if self._turn_point is not None:
            self._turn_point.save(len(self._tokens))

    def _restore_checkpoint(self, keep: int) -> tuple[int, bool]:
        """Cut the cache back to the latest saved state (the verify window's, the last prompt's) at or before
        ``keep``, else to 0: (the position it was cut to, whether a saved state was restored)."""
        self._drop_points_past(keep)
        points = [p for p in (self._checkpoint, self._turn_point) if p is not None and p.position is not None]
        for point in sorted(points, key=lambda p: -p.position):
            start = point.position
            if point.restore() and self._lib.llama_memory_seq_rm(self._mem, self._seq, start, -1):
                return start, True
            point.drop()
        self._lib.llama_memory_seq_rm(self._mem, self._seq, -1, -1)
        return 0, False

    def _drop_points_past(self, keep: int) -> None:
        for point in (self._checkpoint, self._turn_point):
            if point is not None and (point.position or 0) > keep:
                point.drop()

    def save_state(self):
        """A bytearray (copied once, out of llama.cpp)."""
        return seq_state(self._lib, self._ctx)

    def load_state(self, tokens: Sequence[int], state) -> None:
        self.truncate(0)
        if not set_seq_state(self._lib, self._ctx, state):
            self.truncate(0)
            raise ModelError("llama.cpp could not load a saved conversation state; it is prefilled again")
        self._tokens[:] = [int(t) for t in tokens]
        # llama.cpp restores the state, not its snapshots: no cut of this cache may use them
        self._decoded_from = len(self._tokens)
        self._drop_points_past(-1)  # all: they are states of another conversation

    def prefill(self, tokens: Sequence[int], progress: Progress = None) -> None:
        self._prefill(tokens, progress, features=False)

    def prefill_features(self, tokens: Sequence[int], progress: Progress = None):
        """prefill that also returns the inputs of the feature layers [n, layers x hidden]."""
        return self._prefill(tokens, progress, features=True)

    def _prefill(self, tokens: Sequence[int], progress: Progress, features: bool):
        side = self._side_prefill
        if side is not None and not features and side.takes(self._tokens, tokens):
            cached = list(self._tokens)
            try:
                self.load_state(cached + [int(t) for t in tokens], side.prefill(self._ctx, cached, tokens, progress))
                return None
            except ModelError:  # llama.cpp refused: this prompt is prefilled here, and so are the next ones
                self.close_side_prefill()
                tokens = cached[len(self._tokens) :] + list(tokens)
        done, rows = 0, []
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            self._decode(chunk, logits=False)
            if features:
                rows.append(self._features(len(chunk)))
            done += len(chunk)
            if progress is not None:
                progress(done, len(tokens))
        if not features:
            return None
        return np.concatenate(rows) if rows else np.zeros((0, len(self.feature_layers) * self.hidden_size), np.float32)

    def forward(self, tokens: Sequence[int], return_hidden: bool = False) -> ForwardOut:
        if (
            self._checkpoint is not None and len(tokens) > 1
        ):  # no snapshots: a verify window's rejected tail is cut back
            self._checkpoint.save(len(self._tokens))
        rows, features = [], []
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            self._decode(chunk, logits=True)
            rows.append(self._live_logits(len(chunk)))
            if return_hidden:
                features.append(self._features(len(chunk)))
        logits = rows[0] if len(rows) == 1 else np.concatenate([r.numpy() for r in rows])
        return ForwardOut(logits, np.concatenate(features) if return_hidden else None)

    def _live_logits(self, n: int) -> LiveRows:
        """The last decode's ``n`` rows of logits where llama.cpp keeps them, copied only if still held at the
        next decode (rows.py)."""
        self._held = LiveRows(self._logits(n))
        return self._held

    def _logits(self, n: int) -> np.ndarray:
        """The last decode's ``n`` rows of logits, in place in llama.cpp's buffer."""
        return np.ctypeslib.as_array(self._lib.llama_get_logits(self._ctx), shape=(n, self.vocab_size))

    def _let_go_of_rows(self) -> None:
        """Rows handed out in place copy themselves before llama.cpp's buffer changes or goes away."""
        if getattr(self, "_held", None) is not None:  # close() may run on a half-built backend
            self._held.detach()
            self._held = None

    def set_feature_layers(self, layers: Sequence[int]) -> None:
        """Which layers' inputs come back with the rows (llama.cpp gives layer inputs only: not the last
        layer's normed output that EAGLE-1/2 heads read)."""
        if not self.capabilities.feature_layers:
            raise ConfigError(
                f"{self.model_name}: llama.cpp gives no layer inputs for the "
                f"{self.metadata('general.architecture')} architecture; use --backend torch"
            )
        layers = tuple(int(i) for i in layers)
        bad = [i for i in layers if not 0 <= i < self.n_layers]
        if bad:
            raise ConfigError(
                f"llama.cpp gives the inputs of layers 0..{self.n_layers - 1} of {self.model_name}, not {bad} "
                f"(-1, the last layer's normed output that EAGLE-1/2 heads read, needs --backend torch)"
            )
        from localspec.backends.llama_cpp.ext import ext

        if self._nextn_rows:
            ext("llama_set_embeddings_nextn")(self._ctx, False, False)
            self._nextn_rows = False
        self._switch_layers(layers)

    def _switch_layers(self, layers: tuple[int, ...]) -> None:
        from localspec.backends.llama_cpp.ext import ext

        switch = ext("llama_set_embeddings_layer_inp")
        for i in self.feature_layers:
            switch(self._ctx, i, False)
        for i in layers:
            switch(self._ctx, i, True)
        self.feature_layers = layers

    def use_mtp_features(self) -> None:
        """Hand out, as the rows of every position, what an MTP layer (the model's own, or a Gemma-4
        assistant) reads: the final hidden state after the output norm (llama.cpp's nextn rows), instead of
        chosen layers' inputs."""
        from localspec.backends.llama_cpp.ext import ext

        self._switch_layers(())
        ext("llama_set_embeddings_nextn")(self._ctx, True, False)  # unmasked: a row for every token
        self._nextn_rows = True

    def _features(self, n: int) -> np.ndarray:
        """The feature layers' inputs of the last decode's ``n`` tokens, [n, layers x hidden], batch order
        (the MTP rows [n, hidden] after use_mtp_features)."""
        from localspec.backends.llama_cpp.ext import ext

        if self._nextn_rows:
            rows = ext("llama_get_embeddings_nextn")(self._ctx)
            return np.ctypeslib.as_array(rows, shape=(n, self.hidden_size)).copy()
        if not self.feature_layers:
            raise ConfigError("no feature layers chosen (set_feature_layers) for the llama.cpp hidden states")
        get = ext("llama_get_embeddings_layer_inp")
        parts = [np.ctypeslib.as_array(get(self._ctx, i), shape=(n, self.hidden_size)) for i in self.feature_layers]
        return np.concatenate(parts, axis=1)

    def forward_tree(self, tokens: Sequence[int], parents: Sequence[int], return_hidden: bool = False) -> ForwardOut:
        n, start = len(tokens), len(self._tokens)
        if n > self.n_batch:
            raise ConfigError(f"a tree of {n} tokens is more than one batch ({self.n_batch}); draft smaller trees")
        up = [-1] + [p + 1 for p in parents]  # each row's parent row (row 0: the pending token)
        depth, inner = [0] * n, set(up[1:])
        for i in range(1, n):
            depth[i] = depth[up[i]] + 1
        leaves = [i for i in range(n) if i not in inner]
        if len(leaves) > self.max_branches:
            raise ConfigError(
                f"a tree with {len(leaves)} leaves is more than this context verifies ({self.max_branches})"
            )
        seqs: list[list[int]] = [[] for _ in range(n)]
        for branch, leaf in enumerate(leaves, start=self._branch0):
            row = leaf
            while row >= 0:
                seqs[row].append(branch)
                row = up[row]
        seqs[0].append(self._seq)
        order = _chain_first(up)  # batch order: row 0, the first-child chain, the other rows
        self._drop_branches()
        for branch in range(self._branch0, self._branch0 + len(leaves)):
            self._lib.llama_memory_seq_cp(self._mem, self._seq, branch, -1, -1)
        self._branches = len(leaves)
        self._decode(
            [tokens[r] for r in order],
            logits=True,
            positions=[start + depth[r] for r in order],
            seqs=[seqs[r] for r in order],
        )
        self._tree = (start, [row_seqs[0] for row_seqs in seqs], list(tokens), order)
        rows = self._logits(n)
        out = np.empty_like(rows)
        out[order] = rows
        hidden = None
        if return_hidden:
            hidden = np.empty((n, len(self.feature_layers) * self.hidden_size), np.float32)
            hidden[order] = self._features(n)
        return ForwardOut(out, hidden)

    def accept_path(self, path: Sequence[int]) -> None:
        start, branch_of, tokens, order = self._tree
        kept = [tokens[0]] + [tokens[i + 1] for i in path]
        if path:  # the branch of the path's last node holds one node per position: the path's cells
            self._lib.llama_memory_seq_cp(
                self._mem, branch_of[path[-1] + 1], self._seq, start + 1, start + 1 + len(path)
            )
        self._drop_branches()
        self._tokens[start:] = kept
        if [order.index(i + 1) for i in path] != list(range(1, len(path) + 1)):  # cells after a hole
            self.truncate(start + 1)
            self._decode(kept[1:], logits=True)  # the verify kernels: the same cells as the tree's

    def _drop_branches(self) -> None:
        """Remove the leaf sequences of a tree (the cells no other sequence holds go with them)."""
        for branch in range(self._branch0, self._branch0 + self._branches):
            self._lib.llama_memory_seq_rm(self._mem, branch, -1, -1)
        self._branches, self._tree = 0, None

    def _decode(self, tokens: Sequence[int], logits: bool, positions=None, seqs=None) -> None:
        """Append ``tokens`` to this cache's sequence at the next positions, or (a tree) at ``positions`` with
        the sequence sets ``seqs``, the set's first sequence deciding what a token sees."""
        if not self._ctx:
            raise ModelError(f"{self.path.name} was closed; load the model again")
        start = len(self._tokens)
        if start + len(tokens) > self.n_ctx:
            raise ContextOverflow(f"the context is full ({self.n_ctx} tokens); start a new chat or raise --ctx")
        positions = range(start, start + len(tokens)) if positions is None else positions
        ret = self._run(tokens, logits, positions, [(self._seq,)] * len(tokens) if seqs is None else seqs)
        self._decoded_from = start
        if ret != 0:
            self._lib.llama_memory_seq_rm(self._mem, self._seq, start, -1)
            self._drop_branches()
            if ret == 1:
                raise ContextOverflow(
                    f"llama.cpp found no room in its KV cache ({self.n_ctx} tokens); start a new chat or raise --ctx"
                )
            raise ModelError(f"llama_decode failed with code {ret}: {last_error()}")
        self._tokens.extend(int(t) for t in tokens)

    def _run(self, tokens: Sequence[int], logits: bool, positions: Sequence[int], seqs) -> int:
        """One llama_decode of these tokens (a slot hands them to the batch of every slot's instead); its
        return code. Prefills keep the fast kernels; plain and speculative prefill alike."""
        return self._decode_entries([(tokens, logits, positions, seqs)], logits and self._invariant)

    def _decode_entries(self, entries, reference: bool) -> int:
        """One llama_decode of ``entries`` (capi.fill_batch's), on the reference kernels where ``reference``
        (--exact's windows); its return code."""
        self._let_go_of_rows()  # the last rows handed out are overwritten now: they keep a copy
        if self._reference is not None:
            self._reference.set(reference)
        fill_batch(self._batch, entries)
        return self._lib.llama_decode(self._ctx, self._batch)

    def slots(self, count: int):
        from localspec.backends.llama_cpp.slots import open_slots  # noqa: PLC0415 - it builds on this class

        return open_slots(self, count)

    # -- resources ------------------------------------------------------------------------------------
    def build_id(self) -> str:
        lib = self._lib
        info = lib.llama_print_system_info().decode(errors="replace")
        return (
            f"llama-cpp-python {getattr(lib, '__version__', '?')} [{info.strip()}] threads {self.n_threads} "
            f"gpu_layers {self._gpu_layers} batch {self.n_batch} repack {'on' if self._repack else 'off'}"
        )

    def memory_bytes(self) -> int:
        return int(self._lib.llama_model_size(self._model)) if self._model else 0

    def close(self) -> None:
        self._let_go_of_rows()  # rows still held outlive the context: they keep a copy
        self.close_side_prefill()
        if self._batch is not None:
            self._lib.llama_batch_free(self._batch)
            self._batch = None
        if getattr(self, "tokenizer", None) is not None:
            self.tokenizer.detach()  # it reads the model freed here: later calls raise, not crash
        free(self)

    def __del__(self) -> None:
        if getattr(self, "_lib", None) is not None:
            self.close()


def _chain_first(up: Sequence[int]) -> list[int]:
    """Tree rows (``up``: each row's parent row) with row 0 and its first-child chain first."""
    chain, node = [0], 0
    for row in range(1, len(up)):
        if up[row] == node:
            chain.append(row)
            node = row
    on_chain = set(chain)
    return chain + [r for r in range(len(up)) if r not in on_chain]
