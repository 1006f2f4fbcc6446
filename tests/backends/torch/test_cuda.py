"""The torch backend's CUDA paths (bf16 by default, SDPA on the GPU, tree attention, EAGLE drafting).
Skipped, with the reason, on machines without a CUDA GPU."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")


def cuda_backend(dtype=None):
    from support.eagle_heads import DEEP
    from support.fakes import ScriptedTokenizer

    from localspec.backends.torch.backend import TorchBackend
    from localspec.backends.torch.decoder import Decoder

    torch.manual_seed(0)
    model = Decoder(DEEP)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    model = model.to("cuda", dtype or torch.bfloat16)
    return TorchBackend.from_decoder(model, ScriptedTokenizer(vocab_size=DEEP.vocab_size), n_ctx=256)


def test_cuda_tree_rows_equal_branches_run_alone():
    backend = cuda_backend(torch.float32)
    backend.prefill([5, 6, 7, 8])
    tree = backend.forward_tree([3, 10, 11, 12], [-1, -1, 0])
    for row, branch in {1: [3, 10], 2: [3, 11], 3: [3, 10, 12]}.items():
        backend.truncate(4)
        alone = backend.forward(branch).logits[-1]
        assert np.abs(tree.logits[row] - alone).max() < 1e-3 * np.abs(alone).max() + 1e-3


@pytest.mark.parametrize("tree", [0, 12])
def test_cuda_eagle_greedy_equals_plain_and_runs_in_bf16(tmp_path, tree):
    """Exactness in fp32 (bf16 kernels for 1 and for k rows may round differently, which can flip a
    near-tie: that is the arithmetic's, not speculation's); bf16 (the CUDA default) must run and draft."""
    from support.eagle_heads import PROMPT, write_eagle3_head
    from support.tiny_torch import GREEDY

    from localspec.backends.torch.backend import TorchBackend
    from localspec.drafters.base import NoDrafter
    from localspec.drafters.eagle.drafter import EagleDrafter
    from localspec.engine.loop import generate

    backend = cuda_backend(torch.float32)
    write_eagle3_head(tmp_path / "head", backend)
    plain = generate(backend, NoDrafter(), PROMPT, GREEDY, max_tokens=60).tokens
    backend.truncate(0)
    out = generate(
        backend,
        EagleDrafter(backend, tmp_path / "head", tree_nodes=tree),
        PROMPT,
        GREEDY,
        max_tokens=60,
        draft_tokens=4,
    )
    assert out.tokens == plain and out.stats.drafted > 0
    half = cuda_backend()
    assert half.dtype == torch.bfloat16 and isinstance(half, TorchBackend)
    out = generate(
        half, EagleDrafter(half, tmp_path / "head", tree_nodes=tree), PROMPT, GREEDY, max_tokens=60, draft_tokens=4
    )
    assert len(out.tokens) == 60 and out.stats.drafted > 0


def test_cuda_rows_give_the_numpy_verifiers_verdicts():
    """backends/torch/rows.py on the GPU: argmax, top-k and min-p's cut computed there, the same verdicts."""
    from support.verify_cases import SAMPLERS, random_case

    from localspec.backends.torch.rows import TorchRows
    from localspec.engine.verify import verify_draft
    from localspec.sampling import Streams

    rng = np.random.default_rng(11)
    for sampler in SAMPLERS:
        for case in range(100):
            draft, logits = random_case(rng, tree=case % 2 == 1, with_q=case % 3 == 2)
            host = verify_draft(draft, logits, sampler, Streams(case))
            rows = TorchRows(torch.from_numpy(logits).cuda())
            assert verify_draft(draft, rows, sampler, Streams(case)) == host, (sampler, case)


def test_cuda_graphs_are_captured_and_replay_the_eager_steps_rows():
    """torch_graphs.py on the GPU: eight window sizes captured, checked against the eager step at capture,
    and greedy decoding with graphs equal to the ordinary step's in fp32."""
    from support.eagle_heads import DEEP, PROMPT
    from support.fakes import ScriptedTokenizer
    from support.tiny_torch import GREEDY

    from localspec.backends.torch.backend import TorchBackend
    from localspec.backends.torch.decoder import Decoder
    from localspec.backends.torch.graphs import BUCKETS
    from localspec.drafters.base import NoDrafter
    from localspec.drafters.ngram import NgramDrafter
    from localspec.engine.loop import generate

    torch.manual_seed(0)
    model = Decoder(DEEP)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(4.0)
    tok = ScriptedTokenizer(vocab_size=DEEP.vocab_size)
    ordinary = TorchBackend.from_decoder(model.to("cuda"), tok, n_ctx=256, steps="off")
    twin = Decoder(DEEP).to("cuda")
    twin.load_state_dict(model.state_dict())
    graphs = TorchBackend.from_decoder(twin, tok, n_ctx=256, steps="graphs")
    assert sorted(graphs.steps.graphs) == list(BUCKETS) and "CUDA graphs: 8 window sizes" in graphs.info.placement
    for b in (ordinary, graphs):
        b.prefill([5, 6, 7, 8])
    window = [3, 10, 11, 12, 13]
    a, g = ordinary.forward(window).logits, graphs.forward(window).logits
    assert np.abs(a - g).max() < 1e-3 * np.abs(a).max() + 1e-3
    for b in (ordinary, graphs):
        b.truncate(0)
    reference = generate(ordinary, NoDrafter(), PROMPT, GREEDY, max_tokens=60).tokens
    assert generate(graphs, NgramDrafter(), PROMPT, GREEDY, max_tokens=60, draft_tokens=4).tokens == reference
