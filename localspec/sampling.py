"""The one path from logits to a token, shared by plain decoding and by verification of drafts.

Filters follow llama.cpp's default order so the same settings mean the same thing here: top-k, min-p and
top-p select candidates on the model's own distribution, then temperature reshapes what survived.
Temperature 0 is greedy decoding: a point mass on the argmax, handled by the same code as sampling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from localspec.errors import ConfigError


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.8
    top_k: int = 40  # 0 = off
    top_p: float = 0.95  # 1.0 = off
    min_p: float = 0.05  # 0.0 = off

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ConfigError(f"--temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"--top-k must be >= 0 (0 turns it off), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"--top-p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p < 1:
            raise ConfigError(f"--min-p must be in [0, 1), got {self.min_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def distribution(self, logits_row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The target distribution of one row of logits, sparse: (token ids, probabilities summing to 1).
        Only the surviving candidates are listed, so greedy decoding costs one argmax."""
        return self._candidates(np.asarray(logits_row))

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """Dense distributions, one row per row of ``logits`` (float64)."""
        logits = np.atleast_2d(np.asarray(logits))
        out = np.zeros(logits.shape, dtype=np.float64)
        for z, p in zip(logits, out, strict=False):
            ids, weights = self._candidates(z)
            p[ids] = weights
        return out

    def _candidates(self, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.greedy:
            return np.array([int(np.argmax(z))]), np.ones(1)
        vocab = z.shape[0]
        ids = np.argpartition(-z, self.top_k - 1)[: self.top_k] if 0 < self.top_k < vocab else np.arange(vocab)
        cand = z[ids].astype(np.float64)
        if self.min_p > 0:  # keep logits within log(min_p) of the best: p >= min_p * p_max
            keep = cand >= cand.max() + np.log(self.min_p)
            ids, cand = ids[keep], cand[keep]
        if self.top_p < 1:
            order = np.argsort(-cand, kind="stable")
            ids, cand = ids[order], cand[order]
            p1 = _softmax(cand)
            before = np.cumsum(p1) - p1  # mass of the better candidates
            keep = before < self.top_p
            ids, cand = ids[keep], cand[keep]
        return ids, _softmax(cand / self.temperature)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return e / e.sum()


def sample(p: np.ndarray, rng: np.random.Generator, ids: np.ndarray | None = None) -> int:
    """Draw one token from probabilities ``p`` (need not be normalised) over ``ids`` (default: 0..len-1).
    Exactly one uniform draw per call, so seeded runs replay exactly."""
    cdf = np.cumsum(p)
    i = int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), p.shape[0] - 1))
    return i if ids is None else int(ids[i])
