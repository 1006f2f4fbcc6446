"""Suffix decoding: the compiled trie against a brute-force reference, the on-disk cache, the drafter."""
import inspect
import json
import multiprocessing
import textwrap

import numpy as np
import pytest

from fakes import ScriptedBackend
from localspec.drafters import DrafterOptions, make_drafter
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.suffix import SuffixDrafter, SuffixParams
from localspec.drafters.suffix_store import AnswerStore
from localspec.drafters.suffix_tree import SuffixTree
from localspec.errors import ConfigError
from localspec.simulate import simulate


def occurrences(seqs, s):
    return [(q, i) for q in seqs for i in range(len(q) - len(s) + 1) if q[i:i + len(s)] == s]


def reference_draft(seqs, ctx, depth, k, min_prob, factor, offset):
    """The same rule, by brute force: longest suffix of ctx (<= depth - k) that occurs followed by a token; then
    the most frequent continuation (ties: lower id) while count(s+x)/count(s) keeps the confidence >= min_prob."""
    k = min(k, depth - 1)
    m = min(len(ctx), depth - k)
    while m > 0 and not any(i + m < len(q) for q, i in occurrences(seqs, ctx[len(ctx) - m:])):
        m -= 1
    if m == 0:
        return (), 0
    s = list(ctx[len(ctx) - m:])
    budget = min(k, int(np.float32(factor) * np.float32(m) + np.float32(offset)))
    conf, out = np.float32(1.0), []
    while len(out) < budget and len(s) < depth:
        nexts = {}
        for q, i in occurrences(seqs, s):
            if i + len(s) < len(q):
                nexts[q[i + len(s)]] = nexts.get(q[i + len(s)], 0) + 1
        if not nexts:
            break
        x = min(nexts, key=lambda t: (-nexts[t], t))
        nxt = np.float32(conf * np.float32(nexts[x]) / np.float32(len(occurrences(seqs, s))))
        if nxt < np.float32(min_prob):
            break
        conf = nxt
        out.append(x)
        s.append(x)
    return tuple(out), m


def check_against_reference(seqs, queries, depth, k, min_prob, factor=1.0, offset=1.0):
    tree = SuffixTree(depth)
    for q in seqs[:-1]:
        tree.add_sequence(q)
    tree.extend(seqs[-1])  # the last sequence stays open, like the current request
    for ctx in queries:
        got = tree.draft(ctx, k, min_prob, factor, offset)
        assert (got.tokens, got.match_len) == reference_draft(seqs, ctx, depth, k, min_prob, factor, offset), ctx


@pytest.mark.parametrize("seed", range(40))
def test_random_sequences_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    vocab, depth = int(rng.integers(2, 6)), int(rng.integers(3, 10))
    seqs = [rng.integers(0, vocab, size=int(rng.integers(0, 50))).tolist() for _ in range(int(rng.integers(1, 4)))]
    queries = [rng.integers(0, vocab, size=int(rng.integers(1, 12))).tolist() for _ in range(8)]
    check_against_reference(seqs, queries, depth, k=int(rng.integers(1, 9)),
                            min_prob=float(rng.choice([0.0, 0.1, 0.3])))


def test_real_text_matches_brute_force():
    # real structure without a model: UTF-8 bytes of standard-library source as tokens
    texts = [inspect.getsource(f).encode()[:400] for f in (textwrap.dedent, json.dumps, inspect.getdoc)]
    seqs = [list(t) for t in texts]
    queries = [list(t[i:i + 9]) for t in texts for i in range(0, 380, 37)]
    check_against_reference(seqs, queries, depth=16, k=8, min_prob=0.1)


def test_growing_the_open_sequence_token_by_token():
    rng = np.random.default_rng(5)
    old = rng.integers(0, 3, size=40).tolist()
    tree = SuffixTree(7)
    tree.add_sequence(old)
    current = []
    for token in rng.integers(0, 3, size=40).tolist():
        tree.extend([token])
        current.append(token)
        got = tree.draft(current, 6, 0.0, 2.0, 0.0)
        assert (got.tokens, got.match_len) == reference_draft([old, current], current, 7, 6, 0.0, 2.0, 0.0)


def test_no_draft_crosses_a_sequence_boundary():
    tree = SuffixTree(8)
    tree.add_sequence([1, 2, 3])
    tree.add_sequence([4, 5])
    assert tree.draft([2, 3], 5).tokens == ()
    assert tree.draft([1, 2], 5).tokens == (3,)


# -- the cache on disk ------------------------------------------------------------------------------
def test_store_round_trip(tmp_path):
    store = AnswerStore(tmp_path / "a.bin", "tok-A")
    store.add([1, 2, 3])
    store.add([4, 5])
    store.save()
    again = AnswerStore(tmp_path / "a.bin", "tok-A")
    assert [a.tolist() for a in again.answers.values()] == [[1, 2, 3], [4, 5]] and again.warning is None


def test_store_evicts_oldest_answers_first(tmp_path):
    store = AnswerStore(tmp_path / "a.bin", "tok", max_tokens=100)
    for i in range(30):
        store.add([i] * 10)
    store.save()
    kept = [a[0] for a in AnswerStore(tmp_path / "a.bin", "tok", max_tokens=100).answers.values()]
    assert sum(len(a) for a in store.answers.values()) <= 100
    assert kept == list(range(30 - len(kept), 30))  # the newest ones, in order


@pytest.mark.parametrize("damage", ["garbage", "truncate", "flip"])
def test_corrupt_file_is_set_aside_and_the_cache_starts_empty(tmp_path, damage, capsys):
    path = tmp_path / "a.bin"
    store = AnswerStore(path, "tok")
    store.add(list(range(50)))
    store.save()
    data = path.read_bytes()
    path.write_bytes({"garbage": b"\x00\x01junk", "truncate": data[:-7],
                      "flip": data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:]}[damage])
    again = AnswerStore(path, "tok")
    assert again.answers == {} and "could not be used" in capsys.readouterr().err
    assert (tmp_path / "a.corrupt").exists()
    again.add([7, 8])
    again.save()
    assert [a.tolist() for a in AnswerStore(path, "tok").answers.values()] == [[7, 8]]


def test_caches_are_keyed_by_tokenizer(tmp_path):
    a = AnswerStore.for_tokenizer("a" * 64, directory=tmp_path)
    b = AnswerStore.for_tokenizer("b" * 64, directory=tmp_path)
    assert a.path != b.path
    a.add([1, 2])
    a.save()
    assert AnswerStore.for_tokenizer("b" * 64, directory=tmp_path).answers == {}
    # a file of another tokenizer under the same name is refused, not used
    b.path.write_bytes(a.path.read_bytes())
    assert AnswerStore.for_tokenizer("b" * 64, directory=tmp_path).answers == {}


def _writer(args):
    path, worker = args
    for i in range(15):
        store = AnswerStore(path, "tok")
        store.add([worker, i] * 3)
        store.save()


def test_concurrent_chats_neither_corrupt_nor_drop_answers(tmp_path):
    path = tmp_path / "a.bin"
    with multiprocessing.get_context("fork").Pool(4) as pool:
        pool.map(_writer, [(path, w) for w in range(4)])
    answers = AnswerStore(path, "tok").answers.values()
    assert sorted((int(a[0]), int(a[1])) for a in answers) == [(w, i) for w in range(4) for i in range(15)]


# -- the drafter -------------------------------------------------------------------------------------
def test_global_tree_drafts_an_earlier_answer(tmp_path):
    store = AnswerStore(tmp_path / "g.bin", "tok")
    drafter = SuffixDrafter(SuffixParams(max_spec_factor=4.0), store)
    answer = [5, 6, 7, 8, 9, 10, 11, 12]
    simulate(drafter, [([1, 2, 3], answer)], k=4)
    again = simulate(drafter, [([4, 4, 4], answer)], k=4)  # another prompt, the same answer
    assert again.accepted >= 4 and drafter.figures()["wins_global"] >= 1
    # and it survives a restart through the cache on disk
    reborn = SuffixDrafter(SuffixParams(max_spec_factor=4.0), AnswerStore(tmp_path / "g.bin", "tok"))
    assert reborn.global_tree.draft([5, 6, 7], 4, factor=4.0).tokens == (8, 9, 10, 11)


def test_simulator_on_fixed_sequences():
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    answer = [9, 1, 2, 3, 4, 5, 6, 7, 8, 9]  # copies the prompt
    stats = simulate(SuffixDrafter(SuffixParams(max_spec_factor=2.0, max_spec_offset=0.0), None), [(prompt, answer)], k=4)
    assert stats.generated == len(answer)
    assert stats.mean_accepted_length > 2.0 and stats.acceptance_rate > 0.8
    plain = simulate(NgramDrafter(5, 6), [(prompt, [20, 21, 22])], k=4)
    assert plain.accepted == 0 and plain.steps == 3


def test_bad_suffix_settings_are_named():
    with pytest.raises(ConfigError, match="min_token_prob"):
        SuffixParams(min_token_prob=2.0)


def test_make_drafter_keys_the_cache_by_the_backend_vocabulary(tmp_path):
    options = DrafterOptions(suffix_cache_dir=str(tmp_path))
    a = make_drafter("suffix", ScriptedBackend(vocab_size=12), options)
    b = make_drafter("suffix", ScriptedBackend(vocab_size=13), options)
    assert a.store.path != b.store.path
