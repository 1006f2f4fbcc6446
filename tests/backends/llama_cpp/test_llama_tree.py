"""Tree verification on llama.cpp (sequence sets in one batch), on the real SmolLM2-135M."""

import numpy as np
import pytest
from support.fakes import OracleTreeDrafter

from localspec.chat.conversation import Conversation
from localspec.drafters.base import NoDrafter
from localspec.engine.exact import DEFAULT_MARGIN
from localspec.engine.loop import generate
from localspec.sampling import SamplingParams

pytestmark = pytest.mark.model
GREEDY = SamplingParams(temperature=0)
# pending token P; its children a b c; a's children d e; b's child f; d's child g (listed by depth)
PARENTS = (-1, -1, -1, 0, 0, 1, 3)
BRANCHES = [[0, 3, 6], [0, 4], [1, 5], [2]]  # root-to-leaf draft indices


@pytest.fixture(scope="module")
def backend(smollm2):
    return smollm2


def prompt(backend) -> list[int]:
    conv = Conversation()
    conv.add("user", "Write a Python function that returns the factorial of n.")
    return conv.prompt_tokens(backend, reserve=64)


def tree_tokens(backend, context) -> list[int]:
    """The pending token and 7 draft tokens: the model's top choices, so the rows are of real branches."""
    backend.truncate(0)
    backend.prefill(context[:-1])
    top = np.argsort(-backend.forward(context[-1:]).logits[0])[:3].tolist()
    return [context[-1], *top, 13, 28, 42, 7]


@pytest.mark.parametrize("invariant", [True, False])
def test_each_branchs_rows_are_the_branch_run_alone(backend, invariant):
    backend.set_batch_invariant(invariant)
    try:
        context = prompt(backend)
        tokens = tree_tokens(backend, context)
        backend.truncate(len(context) - 1)
        tree = backend.forward_tree(tokens, PARENTS).logits
        for branch in BRANCHES:
            backend.truncate(len(context) - 1)
            alone = backend.forward([tokens[0], *(tokens[i + 1] for i in branch)]).logits
            rows = tree[[0, *(i + 1 for i in branch)]]
            if invariant:  # batch-invariant kernels: bit for bit
                assert np.array_equal(rows, alone), branch
            else:  # the default kernels round windows of other sizes differently
                assert np.abs(rows - alone).max() < 0.05 * np.abs(alone).max(), branch
                top2 = np.sort(alone, axis=1)[:, -2:]
                clear = top2[:, 1] - top2[:, 0] > DEFAULT_MARGIN["llama.cpp"]
                assert (rows.argmax(1) == alone.argmax(1))[clear].all(), branch
    finally:
        backend.set_batch_invariant(True)
        backend.truncate(0)


@pytest.mark.parametrize("path", [[1, 5], [0, 3, 6], [0, 4], [2], []])
def test_after_acceptance_only_the_kept_branch_is_cached(backend, path):
    # [0, 3, 6] is the first-child chain (its cells follow the pending token's); the others leave it
    context = prompt(backend)
    tokens = tree_tokens(backend, context)
    backend.truncate(len(context) - 1)
    backend.forward_tree(tokens, PARENTS)
    backend.accept_path(path)
    kept = [*context[:-1], tokens[0], *(tokens[i + 1] for i in path)]
    assert list(backend.cached_tokens) == kept
    lib, mem = backend._lib, backend._mem
    assert lib.llama_memory_seq_pos_max(mem, 0) == len(kept) - 1
    assert all(lib.llama_memory_seq_pos_max(mem, s) == -1 for s in range(1, 8))  # no leaf sequence is left
    after = backend.forward([99]).logits[0]
    backend.truncate(len(context) - 1)
    backend.forward(kept[len(context) - 1 :])  # the branch alone, as a chain (bit for bit the tree's rows)
    assert np.array_equal(backend.forward([99]).logits[0], after)  # the cache is the branch's, and only it
    backend.truncate(0)


def test_greedy_tree_drafting_equals_plain_decoding(backend):
    context = prompt(backend)
    backend.truncate(0)
    plain = generate(backend, NoDrafter(), context, GREEDY, max_tokens=48).tokens
    for seed in range(3):
        backend.truncate(0)
        drafter = OracleTreeDrafter(plain, len(context), backend.vocab_size, seed=seed)
        got = generate(
            backend, drafter, context, GREEDY, max_tokens=48, draft_tokens=4, exact_guard=DEFAULT_MARGIN["llama.cpp"]
        )
        assert got.tokens == plain, seed
        assert got.stats.accepted > 0  # the right branches were taken, wherever they sat in the tree


def test_greedy_lookahead_equals_plain_decoding(backend):
    """Lookahead's trees (pool n-grams and the Jacobi window, ~20 tokens over several sequences) on the real
    model: the same tokens as plain decoding, with the near-tie guard, and some of them from the drafts."""
    from localspec.drafters.lookahead.drafter import LookaheadDrafter

    context = prompt(backend)
    backend.truncate(0)
    plain = generate(backend, NoDrafter(), context, GREEDY, max_tokens=64).tokens
    backend.truncate(0)
    drafter = LookaheadDrafter(seed=0)
    got = generate(
        backend, drafter, context, GREEDY, max_tokens=64, draft_tokens=8, exact_guard=DEFAULT_MARGIN["llama.cpp"]
    )
    assert got.tokens == plain
    assert got.stats.accepted > 0 and got.stats.drafter["window_steps"] > 0
