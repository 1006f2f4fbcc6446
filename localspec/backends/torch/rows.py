"""Logits kept on the torch device: verification's reductions run there and only their results cross.

At temperature 0 a step moves one argmax per row to the host (the rows' argmax at once, 4 bytes a row),
at T > 0 each row's top-k shortlist (ids and logits, ascending ids, for all rows in one copy), or with
top-k off the survivors of min-p's cut; the sampler's shared code (sampling.from_shortlist) then does the
rest on the host, as it does for a numpy row. The whole [rows, vocab] array crosses only when asked for
(``numpy()``: calibration, draft models' q rows).
"""

from __future__ import annotations

import math

import numpy as np

MIN_P_SLACK = 1e-3  # logits: min-p's cut on the device keeps a little more; the host's exact cut follows


class TorchRows:
    def __init__(self, logits) -> None:  # a float32 torch tensor [rows, vocab] on any device
        self.t = logits
        self.shape = tuple(logits.shape)
        self._argmax: np.ndarray | None = None
        self._shortlist: tuple[int, np.ndarray, np.ndarray] | None = None
        self._numpy: np.ndarray | None = None

    def __len__(self) -> int:
        return self.shape[0]

    def candidates(self, i: int, sampler) -> tuple[np.ndarray, np.ndarray]:
        if sampler.greedy:
            return np.array([int(self.argmax()[i])]), np.ones(1)
        vocab = self.shape[1]
        k = sampler.shortlist_size(vocab)
        if k < vocab:
            if self._shortlist is None or self._shortlist[0] != k:
                values, ids = self.t.topk(k, dim=1)
                ids, order = ids.sort(dim=1)
                self._shortlist = (k, ids.cpu().numpy(), values.gather(1, order).cpu().numpy())
            _, ids, values = self._shortlist
            return sampler.from_shortlist(ids[i], values[i])
        z = self.t[i]
        if sampler.min_p > 0:
            keep = (z >= z.max() + (math.log(sampler.min_p) - MIN_P_SLACK)).nonzero().squeeze(1)
            return sampler.from_shortlist(keep.cpu().numpy(), z[keep].cpu().numpy())
        return sampler.from_shortlist(np.arange(vocab), z.cpu().numpy())

    def argmax(self) -> np.ndarray:
        if self._argmax is None:
            self._argmax = self.t.argmax(dim=1).cpu().numpy()
        return self._argmax

    def top_gaps(self, index: list[int]) -> np.ndarray:
        if self.shape[1] < 2:
            return np.full(len(index), np.inf)
        top2 = self.t[index].topk(2, dim=1).values
        return (top2[:, 0] - top2[:, 1]).abs().cpu().numpy()

    def row(self, i: int) -> np.ndarray:
        return self._numpy[i] if self._numpy is not None else self.t[i].cpu().numpy()

    def numpy(self) -> np.ndarray:
        if self._numpy is None:
            self._numpy = self.t.cpu().numpy()
        return self._numpy
