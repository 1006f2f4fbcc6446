"""DFlash and DSpark heads for the tiny targets: head folders, features and masks, exact pairs."""

import numpy as np

from support.tiny_dflash import write_dflash_head

PROMPT = [40, 41, 42, 43, 44, 45, 40, 41, 42, 50, 51]


EMBD = 64


def mask_of(backend) -> int:
    return backend.vocab_size - 2  # the extra token, before the control token


def head_dir(tmp_path, backend, **kw):
    return write_dflash_head(tmp_path / "head", EMBD, backend.vocab_size, mask_of(backend), **kw)


def features(backend, layers, tokens):
    backend.truncate(0)
    backend.set_feature_layers(layers)
    return backend.forward(tokens, return_hidden=True).hidden


def exact_pairs(backend, prompt, sampling, n=2):
    """The target's own probabilities of every n-token answer."""
    exact = {}

    def walk(ctx, p, depth):
        if depth == n:
            exact[ctx[len(prompt) :]] = p
            return
        backend.truncate(0)
        row = sampling.probs(backend.forward(list(ctx)).logits[-1:])[0]
        for t in np.flatnonzero(row):
            walk((*ctx, int(t)), p * row[t], depth + 1)

    walk(tuple(prompt), 1.0, 0)
    return exact
