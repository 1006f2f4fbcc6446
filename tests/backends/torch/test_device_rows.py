"""Verification on logits kept on the torch device (backends/torch/rows.py) against the numpy verifier.

The same drafts, logits, sampler settings and seeds through both must give the same verdicts: the device
path only moves where the vocabulary-wide reductions run (argmax, top-k, min-p's cut), not what they
decide. Run on CPU tensors here; tests/backends/torch/test_cuda.py runs the same comparison on a GPU."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from localspec.backends.torch.rows import TorchRows  # noqa: E402
from localspec.engine.exact import guard  # noqa: E402
from localspec.engine.verify import verify_draft  # noqa: E402
from localspec.sampling import SamplingParams, Streams  # noqa: E402
from localspec.types import Draft, ForwardOut  # noqa: E402

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


@pytest.mark.parametrize("sampler", SAMPLERS, ids=["greedy", "defaults", "full-row", "min-p", "top-k-5"])
@pytest.mark.parametrize("kind", ["chain", "tree", "chain-q"])
def test_device_rows_give_the_numpy_verifiers_verdicts(sampler, kind):
    rng = np.random.default_rng(7)
    accepted = rejected = 0
    for case in range(150):
        draft, logits = random_case(rng, tree=kind == "tree", with_q=kind == "chain-q")
        host = verify_draft(draft, logits, sampler, Streams(case))
        device = verify_draft(draft, TorchRows(torch.from_numpy(logits)), sampler, Streams(case))
        assert device == host, (case, draft)
        accepted += host.accepted > 0
        rejected += host.accepted < len(draft.main_chain())
    assert accepted > 20 and rejected > 20  # both outcomes were exercised


def test_greedy_and_top_k_verification_never_copy_the_whole_logits():
    rng = np.random.default_rng(3)
    draft, logits = random_case(rng, tree=False, with_q=False)
    for sampler in (SAMPLERS[0], SAMPLERS[1], SAMPLERS[4]):
        rows = TorchRows(torch.from_numpy(logits))
        verify_draft(draft, rows, sampler, Streams(1))
        assert rows._numpy is None
    rows = TorchRows(torch.from_numpy(logits))  # asking for the array gives the same numbers
    assert np.array_equal(rows.numpy(), logits) and np.array_equal(rows.row(-1), logits[-1])


def test_argmax_and_the_guards_gaps_match_the_host():
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((12, VOCAB)) * 2).astype(np.float32)
    logits[4, 10] = logits[4, 11] = logits[4].max() + 1.0  # a tie: the first index wins on both
    rows = TorchRows(torch.from_numpy(logits))
    assert np.array_equal(rows.argmax(), ForwardOut(logits).rows.argmax())
    index = [0, 3, 4, 11]
    assert np.allclose(rows.top_gaps(index), ForwardOut(logits).rows.top_gaps(index))
    for case in range(40):
        draft, z = random_case(rng, tree=False, with_q=False)
        verdict = verify_draft(draft, z, SAMPLERS[0], Streams(case))
        for margin in (0.2, 1.0, 3.0):
            assert guard(verdict, TorchRows(torch.from_numpy(z)), margin) == guard(verdict, z, margin)


def test_the_torch_backend_hands_out_device_rows():
    from support.eagle_heads import DEEP
    from support.fakes import ScriptedBackend

    from localspec.backends.torch.backend import TorchBackend
    from localspec.backends.torch.decoder import Decoder

    torch.manual_seed(0)
    backend = TorchBackend.from_decoder(Decoder(DEEP), ScriptedBackend(vocab_size=DEEP.vocab_size), n_ctx=64)
    out = backend.forward([5, 6, 7])
    assert isinstance(out.rows, TorchRows) and out.logits.shape == (3, DEEP.vocab_size)
    tree = backend.forward_tree([3, 10, 11], [-1, -1])
    assert isinstance(tree.rows, TorchRows) and len(tree.rows) == 3
