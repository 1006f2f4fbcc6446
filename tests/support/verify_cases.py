"""Random verification cases for the device-rows tests (tests/backends/torch/test_device_rows.py on CPU tensors,
test_cuda.py on a GPU): sampler settings and peaked logits with a chain or tree draft."""

import numpy as np

from localspec.sampling import SamplingParams
from localspec.types import Draft

VOCAB = 300
SAMPLERS = [
    SamplingParams(temperature=0),
    SamplingParams(),  # the defaults: top-k 40, top-p 0.95, min-p 0.05
    SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),  # the whole row
    SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.05),  # min-p's cut on the device
    SamplingParams(temperature=0.7, top_k=5, top_p=0.9, min_p=0.0),
]


def random_case(rng: np.random.Generator, tree: bool, with_q: bool):
    """Peaked logits (so drafts are accepted often enough to test the walk) and a draft that follows the
    argmax for a while: a chain, or a tree with siblings."""
    n = int(rng.integers(1, 9))
    logits = (rng.standard_normal((n + 1, VOCAB)) * 3).astype(np.float32)
    best = logits.argmax(axis=1)
    parents = [-1] + [int(rng.integers(-1, i)) if tree else i - 1 for i in range(1, n)]
    depth = []
    for p in parents:
        depth.append(0 if p < 0 else depth[p] + 1)
    tokens = [int(best[d]) if rng.random() < 0.7 else int(rng.integers(VOCAB)) for d in depth]
    q = None
    if with_q:
        q = rng.dirichlet(np.full(VOCAB, 0.3), size=n)
        for i, t in enumerate(tokens):  # a draft token is a draw from its q row: give it mass there
            q[i, t] += 1.0
        q /= q.sum(axis=1, keepdims=True)
    return Draft(tuple(tokens), tuple(parents), q=q), logits
