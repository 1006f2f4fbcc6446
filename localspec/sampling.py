"""The one path from logits to a token, shared by plain decoding and by verification of drafts.

Filters follow llama.cpp's default order so the same settings mean the same thing here: top-k, min-p and
top-p select candidates on the model's own distribution, then temperature reshapes what survived.
Temperature 0 is greedy decoding: a point mass on the argmax, handled by the same code as sampling.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from localspec import shortlist
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

    def server_fields(self) -> dict:
        """These settings as llama-server's /completion takes them (its samplers in the order they run here:
        top-k, top-p, min-p, temperature), so that a comparison samples the same distribution."""
        if self.greedy:
            return {"temperature": 0.0, "top_k": 1}
        return {
            "temperature": self.temperature,
            "top_k": self.top_k,
            "top_p": self.top_p,
            "min_p": self.min_p,
            "samplers": ["top_k", "top_p", "min_p", "temperature"],
        }

    def distribution(self, logits_row: np.ndarray, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The target distribution of one row of logits, sparse: (token ids, probabilities summing to 1).
        Only the surviving candidates are listed, so greedy decoding costs one argmax. ``allowed`` (bool per
        logit, a grammar's mask) restricts the row before any filter: the filters and temperature then act on
        the allowed tokens alone, so the result is the model's distribution renormalised over them."""
        z = np.asarray(logits_row)
        if allowed is not None:
            ids = np.flatnonzero(allowed)
            if not len(ids):
                raise ValueError("the grammar allows no token here")
            kept, p = self.distribution(z[ids])
            return ids[kept], p
        if self.greedy:
            return np.array([int(np.argmax(z))]), np.ones(1)
        vocab = z.shape[0]
        k = self.shortlist_size(vocab)
        if k < vocab:
            ids, logits = shortlist.top_k(z, k)
        elif self.min_p > 0:  # no top-k: min-p's survivors are the shortlist
            ids, logits = shortlist.above(z, float(np.log(self.min_p)))
        else:
            ids, logits = np.arange(vocab), z
        return self.from_shortlist(ids, logits)

    def shortlist_size(self, vocab: int) -> int:
        """How many of a row's best logits can hold every candidate at T > 0: top-k's, else the vocabulary."""
        return self.top_k if 0 < self.top_k < vocab else vocab

    def from_shortlist(self, ids: np.ndarray, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``distribution`` of a row at T > 0 from a shortlist of its logits, in ascending id order, that
        holds every candidate: the best ``shortlist_size`` of them, or any superset of min-p's survivors.
        Where the shortlist is taken is the backend's affair (rows.py); what follows is the same for all."""
        cand = np.asarray(logits).astype(np.float64)
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

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """Dense distributions, one row per row of ``logits`` (float64)."""
        logits = np.atleast_2d(np.asarray(logits))
        out = np.zeros(logits.shape, dtype=np.float64)
        for z, p in zip(logits, out, strict=False):
            ids, weights = self.distribution(z)
            p[ids] = weights
        return out


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return e / e.sum()


def sample(p: np.ndarray, rng: np.random.Generator | Draws, ids: np.ndarray | None = None) -> int:
    """Draw one token from probabilities ``p`` (need not be normalised) over ``ids`` (default: 0..len-1).
    Exactly one uniform draw per call, so seeded runs replay exactly."""
    cdf = np.cumsum(p)
    i = int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), p.shape[0] - 1))
    return i if ids is None else int(ids[i])


class Streams:
    """Uniform draws keyed by an answer's token position: the draws for its t-th token depend only on the
    seed and t, not on how many draws earlier drafts used. With point-mass drafts (n-gram, suffix) the
    sampled answer is then the same for one seed whatever the drafter proposed and however long the
    controller made each draft; verify.py says why that keeps the target's distribution. The draws are
    SplitMix64 outputs (a numpy Generator per position costs ~17 us to seed; this ~1 us)."""

    def __init__(self, seed: int, start: int = 0) -> None:
        self.seed, self.start = seed & _MASK, start

    def after(self, emitted: int) -> Streams:
        """The streams of a step whose first token is the answer's token ``emitted``."""
        return Streams(self.seed, emitted)

    def at(self, depth: int) -> Draws:
        return Draws(_mix(self.seed ^ _mix(self.start + depth)))


class Draws:
    """One position's uniform draws in [0, 1): ``random()`` as numpy's Generator has it."""

    __slots__ = ("key", "n")

    def __init__(self, key: int) -> None:
        self.key, self.n = key, 0

    def random(self) -> float:
        self.n += 1
        return (_mix(self.key + self.n * _GOLDEN) >> 11) * 2.0**-53


_MASK = 2**64 - 1
_GOLDEN = 0x9E3779B97F4A7C15


def _mix(x: int) -> int:
    """SplitMix64's finaliser: a bijection of 64-bit integers whose outputs look independent."""
    x = (x + _GOLDEN) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)
