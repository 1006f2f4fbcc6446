"""A compact PyTorch decoder for the Llama / Qwen2 / Qwen3 / Mistral family, with a static KV cache.

RMSNorm, rotary position embeddings (HF's rotate-half layout, Llama-3 frequency scaling), grouped-query
attention through SDPA, SwiGLU MLP, optional q/k/v bias (Qwen2), optional per-head RMSNorm of q and k
before the rotation (Qwen3) and tied embeddings. The cache is a fixed
[layers, positions, kv heads, head dim] buffer indexed by position: truncating is only moving the length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class DecoderConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rms_eps: float = 1e-5
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # {"rope_type": "llama3", "factor", "low_freq_factor", ...}
    attn_bias: bool = False
    qk_norm: bool = False  # Qwen3: q and k are RMS-normed per head (over head_dim) before the rotation
    tie_embeddings: bool = False
    max_positions: int = 4096
    rope_freq_factors: tuple | None = field(default=None, repr=False)  # GGUF's rope_freqs tensor


def rope_inv_freq(cfg: DecoderConfig) -> torch.Tensor:
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2, dtype=torch.float64) / cfg.head_dim))
    scaling = cfg.rope_scaling or {}
    if scaling.get("rope_type", scaling.get("type")) == "llama3":
        # Llama 3.1: long wavelengths are slowed down by `factor`, short ones kept, a smooth blend between
        factor, low, high = scaling["factor"], scaling.get("low_freq_factor", 1.0), scaling.get("high_freq_factor", 4.0)
        old = scaling.get("original_max_position_embeddings", 8192)
        wavelen = 2 * math.pi / inv
        smooth = ((old / wavelen) - low) / (high - low)
        blended = (1 - smooth) * inv / factor + smooth * inv
        inv = torch.where(wavelen > old / low, inv / factor, torch.where(wavelen < old / high, inv, blended))
    elif scaling.get("rope_type", scaling.get("type")) == "linear":
        inv = inv / scaling["factor"]
    if cfg.rope_freq_factors is not None:
        inv = inv / torch.tensor(cfg.rope_freq_factors, dtype=torch.float64)
    return inv.float()


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [T, heads, head_dim]; cos/sin: [T, 1, head_dim/2] (HF's rotate-half layout)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Layer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        h, hd = cfg.hidden_size, cfg.head_dim
        self.attn_norm = RMSNorm(h, cfg.rms_eps)
        self.q = nn.Linear(h, cfg.n_heads * hd, bias=cfg.attn_bias)
        self.k = nn.Linear(h, cfg.n_kv_heads * hd, bias=cfg.attn_bias)
        self.v = nn.Linear(h, cfg.n_kv_heads * hd, bias=cfg.attn_bias)
        self.o = nn.Linear(cfg.n_heads * hd, h, bias=False)
        self.q_norm = RMSNorm(hd, cfg.rms_eps) if cfg.qk_norm else nn.Identity()
        self.k_norm = RMSNorm(hd, cfg.rms_eps) if cfg.qk_norm else nn.Identity()
        self.mlp_norm = RMSNorm(h, cfg.rms_eps)
        self.gate = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.up = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, h, bias=False)


def causal_mask(n: int, start: int, lo: int, device) -> torch.Tensor:
    """[n, start + n - lo]: row i (in slot start + i) sees the slots from lo up to its own."""
    return torch.ones(n, start + n - lo, dtype=torch.bool, device=device).tril(diagonal=start - lo)


class Segment(NamedTuple):
    """One sequence's rows in a pass: n tokens into cache slots start.., seeing the slots from lo on where the
    mask [n, start + n - lo] allows, at the rotary angles cos, sin."""

    n: int
    start: int
    lo: int
    cos: torch.Tensor
    sin: torch.Tensor
    mask: torch.Tensor


class Decoder(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.register_buffer("inv_freq", rope_inv_freq(cfg), persistent=False)
        self.k_cache: torch.Tensor | None = None
        self.v_cache: torch.Tensor | None = None

    def allocate_cache(self, n_ctx: int) -> None:
        cfg, p = self.cfg, next(self.parameters())
        shape = (cfg.n_layers, n_ctx, cfg.n_kv_heads, cfg.head_dim)
        self.k_cache = torch.zeros(shape, dtype=p.dtype, device=p.device)
        self.v_cache = torch.zeros(shape, dtype=p.dtype, device=p.device)

    @torch.inference_mode()
    def forward(
        self,
        tokens: torch.Tensor,
        start: int,
        logits: bool = True,
        hidden_layers: Sequence[int] = (),
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor | None, dict]:
        """Run tokens in cache slots start.. start+T-1 (see ``_layers`` for trees). Returns logits [T, vocab]
        (float32) and the hidden states asked for: layer index i -> the input of layer i [T, hidden]
        (-1: the last layer's output after the final norm, what the LM head sees)."""
        x, hidden = self._layers(self.embed(tokens), start, hidden_layers=hidden_layers, positions=positions, mask=mask)
        if not logits:
            return None, hidden
        head = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return (x @ head.T).float(), hidden

    @torch.inference_mode()
    def forward_embeddings(self, x: torch.Tensor, start: int, lo: int = 0, positions=None, mask=None) -> torch.Tensor:
        """The final hidden states of input embeddings x at slots start..; attention sees the cache from
        slot lo on (an EAGLE head's cache starts mid-context)."""
        return self._layers(x, start, lo=lo, positions=positions, mask=mask)[0]

    def rope(self, positions: torch.Tensor, dtype) -> tuple[torch.Tensor, torch.Tensor]:
        angles = torch.outer(positions.to(torch.float32), self.inv_freq)[:, None, :]
        return angles.cos().to(dtype), angles.sin().to(dtype)

    def attend(
        self, i: int, layer: Layer, h: torch.Tensor, cos, sin, start: int, lo: int, mask: torch.Tensor
    ) -> torch.Tensor:
        """Layer i's attention output (o projection applied) for normed inputs h in slots start..; keys and
        values go into the cache when there is one, else attention stays within h (training)."""
        return self.attend_segments(i, layer, h, [Segment(h.shape[0], start, lo, cos, sin, mask)])

    def attend_segments(self, i: int, layer: Layer, h: torch.Tensor, segments: Sequence[Segment]) -> torch.Tensor:
        """``attend`` for rows of several sequences one after another (a packed pass, `serve --parallel`): the
        projections run over all rows at once, each segment attends to its own slots of the cache."""
        cfg, n = self.cfg, h.shape[0]
        q = layer.q_norm(layer.q(h).view(n, cfg.n_heads, cfg.head_dim))
        k = layer.k_norm(layer.k(h).view(n, cfg.n_kv_heads, cfg.head_dim))
        v = layer.v(h).view(n, cfg.n_kv_heads, cfg.head_dim)
        outs, at = [], 0
        for seg in segments:
            rows = slice(at, at + seg.n)
            at += seg.n
            qs, ks, vs = rotate(q[rows], seg.cos, seg.sin), rotate(k[rows], seg.cos, seg.sin), v[rows]
            if self.k_cache is not None:
                end = seg.start + seg.n
                self.k_cache[i, seg.start : end], self.v_cache[i, seg.start : end] = ks, vs
                ks, vs = self.k_cache[i, seg.lo : end], self.v_cache[i, seg.lo : end]
            outs.append(self.attention(qs, ks, vs, seg.mask))
        return layer.o(outs[0] if len(outs) == 1 else torch.cat(outs))

    def attention(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Grouped-query attention of queries [n, heads, hd] over keys/values [m, kv heads, hd] where the
        mask [n, m] allows: [n, heads x hd], before the o projection."""
        cfg = self.cfg
        out = F.scaled_dot_product_attention(
            q.transpose(0, 1),
            k.transpose(0, 1),
            v.transpose(0, 1),
            attn_mask=mask,
            enable_gqa=cfg.n_heads != cfg.n_kv_heads,
        )
        return out.transpose(0, 1).reshape(q.shape[0], cfg.n_heads * cfg.head_dim)

    def keys_values(self, layer: Layer, h: torch.Tensor, cos, sin) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotated keys and values [n, kv heads, head dim] of normed inputs h."""
        cfg, n = self.cfg, h.shape[0]
        k = rotate(layer.k_norm(layer.k(h).view(n, cfg.n_kv_heads, cfg.head_dim)), cos, sin)
        return k, layer.v(h).view(n, cfg.n_kv_heads, cfg.head_dim)

    @staticmethod
    def mlp(layer: Layer, x: torch.Tensor) -> torch.Tensor:
        h = layer.mlp_norm(x)
        return layer.down(F.silu(layer.gate(h)) * layer.up(h))

    def _layers(
        self,
        x: torch.Tensor,
        start: int,
        lo: int = 0,
        hidden_layers: Sequence[int] = (),
        positions: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ):
        """x goes into cache slots start..start+n-1. By default slot = position and attention is causal;
        a tree passes each node's rotary ``positions`` and a ``mask`` [n, end - lo] of the slots it sees."""
        n = x.shape[0]
        end = start + n
        if positions is None:
            positions = torch.arange(start, end, device=x.device)
        if mask is None:
            mask = causal_mask(n, start, lo, x.device)
        cos, sin = self.rope(positions, x.dtype)
        return self._layers_segments(x, [Segment(n, start, lo, cos, sin, mask)], hidden_layers)

    @torch.inference_mode()
    def forward_packed(self, tokens: torch.Tensor, segments: Sequence[tuple], logit_rows: torch.Tensor):
        """Several sequences in one pass: ``tokens`` holds each segment's tokens one after another, a segment
        (n, start, lo, positions) says where its n tokens go in the cache, at which rotary positions, and that
        they see the slots from ``lo`` on, causally. Logits [len(logit_rows), vocab] (float32) of the rows asked."""
        x = self.embed(tokens)
        parts = [
            Segment(n, start, lo, *self.rope(positions, x.dtype), causal_mask(n, start, lo, x.device))
            for n, start, lo, positions in segments
        ]
        x = self._layers_segments(x, parts, ())[0][logit_rows]
        head = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return (x @ head.T).float()

    def _layers_segments(self, x: torch.Tensor, segments: Sequence[Segment], hidden_layers: Sequence[int]):
        hidden = {}
        for i, layer in enumerate(self.layers):
            if i in hidden_layers:
                hidden[i] = x
            x = x + self.attend_segments(i, layer, layer.attn_norm(x), segments)
            x = x + self.mlp(layer, x)
        x = self.norm(x)
        if -1 in hidden_layers:
            hidden[-1] = x
        return x, hidden
