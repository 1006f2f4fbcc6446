"""Fixed-shape target steps for the torch backend: window sizes bucketed, captured as CUDA graphs on a GPU.

A decode step of an 8B model launches hundreds of small kernels; on a fast GPU their launch and Python's
time cost as much as the step's arithmetic. A CUDA graph replays a captured step in one launch, but only for
fixed shapes and fixed buffers. So a window of n tokens (the pending token and a chain or a tree of drafts)
is padded to the next of ``BUCKETS`` (8 shapes), and every input goes through static buffers: the tokens,
the cache slots their keys and values go to, their rotary positions, and a mask over the whole cache. The
step attends over all ``n_ctx`` slots with that mask (the slots not yet written are masked out), so nothing
in it depends on the context's length. Padding rows sit in the slots after the window; they see only slots
up to their own, so the real rows never see them, and the next step overwrites them.

Without CUDA the backend takes its ordinary step (so does ``--no-cuda-graphs``); tests run this static
step eagerly on the CPU (``steps="eager"``) and compare it with the ordinary one. Steps that need hidden
states (EAGLE, MTP), windows past the largest bucket and windows that would pad past the end of the cache
take the ordinary step.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from localspec.backends.torch.decoder import rotate

BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64)


def bucket(n: int) -> int | None:
    """The captured window size that holds ``n`` tokens, None past the largest."""
    return next((b for b in BUCKETS if b >= n), None)


class StaticSteps:
    def __init__(self, model, n_ctx: int, capture: bool) -> None:
        self.model, self.n_ctx = model, n_ctx
        device, most = model.embed.weight.device, BUCKETS[-1]
        self.inputs = torch.zeros(3, most, dtype=torch.long, device=device)  # tokens, slots, positions
        self.mask = torch.zeros(most, n_ctx, dtype=torch.bool, device=device)
        self.slot_ids = torch.arange(n_ctx, device=device)
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self.capture_s = 0.0
        if capture:
            self._capture()

    @property
    def captured(self) -> bool:
        return bool(self.graphs)

    def fits(self, n: int, start: int) -> bool:
        b = bucket(n)
        return b is not None and start + b <= self.n_ctx

    def run(self, tokens, start: int, depths=None, ancestors=None) -> torch.Tensor:
        """Logits [n, vocab] (float32) of ``tokens`` in cache slots start..start+n-1, their keys and values
        cached there. A chain by default; a tree passes each token's ``depths`` and ``ancestors`` (a bool
        [n, n] array: row i sees window slot j), as forward_tree builds them."""
        n = len(tokens)
        b = bucket(n)
        slots = np.arange(start, start + b)
        positions = slots.copy()
        if depths is not None:
            positions[:n] = start + np.asarray(depths)
        host = np.stack([np.concatenate([np.asarray(tokens), np.zeros(b - n, dtype=np.int64)]), slots, positions])
        self.inputs[:, :b].copy_(torch.from_numpy(host))
        torch.le(self.slot_ids, self.inputs[1, :b, None], out=self.mask[:b])  # causal over the slots
        if ancestors is not None:
            block = np.tril(np.ones((b, b), dtype=bool))
            block[:n, :n] = ancestors
            self.mask[:b, start : start + b].copy_(torch.from_numpy(block))
        if b in self.graphs:
            graph, out = self.graphs[b]
            graph.replay()
            return out[:n].clone()
        return self._step(b)[:n]

    @torch.inference_mode()
    def _step(self, b: int) -> torch.Tensor:
        m = self.model
        cfg, tokens, slots, positions = m.cfg, self.inputs[0, :b], self.inputs[1, :b], self.inputs[2, :b]
        mask = self.mask[:b]
        x = m.embed(tokens)
        cos, sin = m.rope(positions, x.dtype)
        for i, layer in enumerate(m.layers):
            h = layer.attn_norm(x)
            q = rotate(layer.q_norm(layer.q(h).view(b, cfg.n_heads, cfg.head_dim)), cos, sin)
            k, v = m.keys_values(layer, h, cos, sin)
            m.k_cache[i].index_copy_(0, slots, k)
            m.v_cache[i].index_copy_(0, slots, v)
            x = x + layer.o(m.attention(q, m.k_cache[i], m.v_cache[i], mask))
            x = x + m.mlp(layer, x)
        head = m.embed.weight if m.lm_head is None else m.lm_head.weight
        return (m.norm(x) @ head.T).float()

    def _capture(self) -> None:
        """One graph per bucket, each warmed up on a side stream first (as torch asks) and then checked
        against the same step run eagerly; if any differs past rounding, no graph is used."""
        started = time.perf_counter()
        self.inputs.zero_()
        torch.le(self.slot_ids, self.inputs[1, :, None], out=self.mask)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for b in BUCKETS:
                self._step(b)
        torch.cuda.current_stream().wait_stream(side)
        pool = None
        for b in BUCKETS:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                out = self._step(b)
            pool = graph.pool()
            self.graphs[b] = (graph, out)
        for b in BUCKETS:  # the captured step computes what the eager one does
            graph, out = self.graphs[b]
            graph.replay()
            eager = self._step(b)
            if (out - eager).abs().max() > 1e-3 * (eager.abs().max() + 1):  # kernels may round differently
                self.graphs.clear()
                break
        torch.cuda.synchronize()
        self.capture_s = time.perf_counter() - started
