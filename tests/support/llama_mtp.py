"""The exact distribution of a target's first two tokens, for the sampling tests of model drafters."""

import numpy as np


def exact_pairs(backend, prompt, sampling):
    """The target's own distribution of its first two tokens."""
    backend.truncate(0)
    first = sampling.probs(backend.forward(prompt).logits[-1])[0]
    dist = {}
    for t1 in np.flatnonzero(first):
        backend.truncate(len(prompt))
        second = sampling.probs(backend.forward([int(t1)]).logits[-1])[0]
        for t2 in np.flatnonzero(second):
            dist[(int(t1), int(t2))] = first[t1] * second[t2]
    backend.truncate(0)
    return dist
