"""Verification on logits kept on the torch device (backends/torch/rows.py) against the numpy verifier.

The same drafts, logits, sampler settings and seeds through both must give the same verdicts: the device
path only moves where the vocabulary-wide reductions run (argmax, top-k, min-p's cut), not what they
decide. Run on CPU tensors here; tests/backends/torch/test_cuda.py runs the same comparison on a GPU."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from support.verify_cases import SAMPLERS, VOCAB, random_case  # noqa: E402

from localspec.backends.torch.rows import TorchRows  # noqa: E402
from localspec.engine.exact import guard  # noqa: E402
from localspec.engine.verify import verify_draft  # noqa: E402
from localspec.sampling import Streams  # noqa: E402
from localspec.types import ForwardOut  # noqa: E402


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
    from support.fakes import ScriptedTokenizer

    from localspec.backends.torch.backend import TorchBackend
    from localspec.backends.torch.decoder import Decoder

    torch.manual_seed(0)
    backend = TorchBackend.from_decoder(Decoder(DEEP), ScriptedTokenizer(vocab_size=DEEP.vocab_size), n_ctx=64)
    out = backend.forward([5, 6, 7])
    assert isinstance(out.rows, TorchRows) and out.logits.shape == (3, DEEP.vocab_size)
    tree = backend.forward_tree([3, 10, 11], [-1, -1])
    assert isinstance(tree.rows, TorchRows) and len(tree.rows) == 3
