"""Suffix decoding: the compiled trie against a brute-force reference, the on-disk cache, the drafter."""

import inspect
import json
import multiprocessing
import textwrap
import threading
import time
import zlib

import numpy as np
import pytest
from support.fakes import ScriptedBackend

from localspec.bench.simulate import simulate
from localspec.drafters.base import match_confidence
from localspec.drafters.memory import share_memory
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.suffix.drafter import SuffixDrafter, SuffixOptions
from localspec.drafters.suffix.store import MAGIC, AnswerStore
from localspec.drafters.suffix.tree import SuffixTree
from localspec.drafters.table import DrafterSetup
from localspec.errors import ConfigError


def occurrences(seqs, s):
    return [(q, i) for q in seqs for i in range(len(q) - len(s) + 1) if q[i : i + len(s)] == s]


def followed(seqs, s):
    """Occurrences of s with a token after them."""
    return [(q, i) for q, i in occurrences(seqs, s) if i + len(s) < len(q)]


def longest_followed_suffix(seqs, tokens, max_len):
    m = min(len(tokens), max_len)
    while m > 0 and not followed(seqs, tokens[len(tokens) - m :]):
        m -= 1
    return m


def reference_draft(seqs, ctx, depth, k, min_prob, factor, offset):
    """st_draft's rule by brute force, with occurrence counts of the sequences instead of a trie:
    m = longest suffix of ctx (<= depth - 1) that occurs followed by a token, budget = min(k, factor*m + offset);
    start from its suffix of length <= depth - min(budget, depth // 2); take the most frequent continuation (ties:
    lower id) while the path confidence (count of the continuation / occurrences followed by a token) stays
    >= min_prob; a string that occurs once is copied from its occurrence to the end of its sequence; at length
    `depth`, re-match the last <= depth // 2 tokens of ctx + draft.
    Returns (tokens, confidences, m)."""
    f32 = np.float32
    k = min(k, 1024)
    m = longest_followed_suffix(seqs, ctx, depth - 1)
    if m == 0:
        return (), (), 0
    budget = min(k, int(f32(factor) * f32(m) + f32(offset)))
    start = min(m, depth - min(budget, depth // 2))
    s = list(ctx[len(ctx) - start :])
    conf, out, probs = f32(1.0), [], []
    while len(out) < budget:
        occ = occurrences(seqs, s)
        if len(occ) == 1:  # copy the one occurrence's continuation
            q, i = occ[0]
            rest = q[i + len(s) : i + len(s) + budget - len(out)]
            out += rest
            probs += [float(conf)] * len(rest)
            break
        if len(s) == depth:  # re-match
            whole = list(ctx) + out
            r = longest_followed_suffix(seqs, whole, depth // 2)
            if r == 0:
                break
            s = whole[len(whole) - r :]
            continue
        nexts = {}
        for q, i in followed(seqs, s):
            nexts[q[i + len(s)]] = nexts.get(q[i + len(s)], 0) + 1
        if not nexts:
            break
        x = min(nexts, key=lambda t: (-nexts[t], t))
        nxt = f32(conf * f32(nexts[x]) / f32(sum(nexts.values())))  # over occurrences followed by a token
        if nxt < f32(min_prob):
            break
        conf = nxt
        out.append(x)
        probs.append(float(conf))
        s.append(x)
    return tuple(out), tuple(probs), m


@pytest.fixture(params=["C", "Python"], autouse=False)
def trie(request, monkeypatch):
    """Every trie test runs on the compiled trie and on the pure-Python fallback (suffix_trie_py.py)."""
    import localspec.drafters.suffix.tree as module

    if request.param == "C" and module.implementation() != "C":
        pytest.skip("the C extension is not built here")
    monkeypatch.setattr(module, "implementation", lambda: request.param)
    return request.param


def build_tree(seqs, depth):
    tree = SuffixTree(depth)
    for q in seqs[:-1]:
        tree.add_sequence(q)
    tree.extend(seqs[-1])  # the last sequence stays open, like the current request
    return tree


def check_against_reference(seqs, queries, depth, k, min_prob, factor=1.0, offset=1.0):
    tree = build_tree(seqs, depth)
    for ctx in queries:
        got = tree.draft(ctx, k, min_prob, factor, offset)
        want = reference_draft(seqs, ctx, depth, k, min_prob, factor, offset)
        assert (got.tokens, got.probs, got.match_len) == want, ctx


@pytest.mark.parametrize("seed", range(60))
def test_random_sequences_match_brute_force(seed, trie):
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(2, 6))
    depth = int(rng.choice([3, 4, 5, 7, 8, 9, 16]))
    seqs = [rng.integers(0, vocab, size=int(rng.integers(0, 80))).tolist() for _ in range(int(rng.integers(1, 4)))]
    queries = [rng.integers(0, vocab, size=int(rng.integers(1, 20))).tolist() for _ in range(8)]
    # queries that occur, so that long matches (up to depth - 1) and long drafts happen
    queries += [q[i : i + int(rng.integers(1, 20))] for q in seqs if q for i in rng.integers(0, len(q), size=3)]
    check_against_reference(
        seqs,
        queries,
        depth,
        k=int(rng.choice([1, 4, 8, 16, 24, 63, 64, 70])),
        min_prob=float(rng.choice([0.0, 0.1, 0.3, 0.5])),
        factor=float(rng.choice([1.0, 2.0, 8.0])),
        offset=float(rng.choice([-2.0, 0.0, 1.0])),
    )


@pytest.mark.parametrize("seed", range(12))
def test_counts_are_exact_up_to_the_trie_depth(seed, trie):
    # the drafts' confidences and the re-match at depth D rest on these counts, depth D included
    rng = np.random.default_rng(100 + seed)
    depth = int(rng.choice([3, 5, 8, 16]))
    seqs = [rng.integers(0, int(rng.integers(2, 4)), size=int(rng.integers(1, 120))).tolist() for _ in range(3)]
    tree = build_tree(seqs, depth)
    patterns = {tuple(q[i : i + n]) for q in seqs for n in range(1, depth + 1) for i in range(len(q) - n + 1)}
    patterns |= {tuple(rng.integers(0, 4, size=int(rng.integers(1, depth + 1))).tolist()) for _ in range(50)}
    for s in patterns:
        assert tree.count(s) == len(occurrences(seqs, list(s))), s


def test_periodic_text_drafts_past_the_trie_depth(trie):
    # every string occurs many times, so each walk hits depth D at a node with counts >= 2 and re-matches
    rng = np.random.default_rng(3)
    unit = rng.integers(0, 50, size=11).tolist()
    seqs = [unit * 9, (unit * 4)[:30]]
    queries = [(unit * 3)[i : i + 20] for i in range(0, 11)]
    for depth, k in [(8, 64), (16, 40), (5, 64)]:
        check_against_reference(seqs, queries, depth, k, min_prob=0.1, factor=8.0, offset=0.0)
    tree = build_tree(seqs, 8)
    got = tree.draft(unit * 2, 64, 0.0, 10.0, 0.0)  # a 7-token match, a 64-token draft through 8 re-matches
    assert got.match_len == 7 and got.tokens == tuple((unit * 8)[:64])


@pytest.mark.parametrize(
    "depth, k, factor", [(8, 64, 8.0), (16, 64, 2.0), (64, 24, 1.0), (64, 63, 1.0), (64, 64, 2.0), (64, 100, 4.0)]
)
def test_real_text_matches_brute_force(depth, k, factor, trie):
    # real structure without a model: UTF-8 bytes of standard-library source as tokens
    texts = [inspect.getsource(f).encode()[:500] for f in (textwrap.dedent, json.dumps, inspect.getdoc)]
    seqs = [list(t) for t in texts] + [list(texts[0][:300])]  # a partial repeat, like an edit in progress
    queries = [list(t[i : i + 70]) for t in texts for i in range(0, 420, 53)]
    check_against_reference(seqs, queries, depth=depth, k=k, min_prob=0.1, factor=factor, offset=-2.0)


def test_long_drafts_do_not_collapse(trie):
    # a 64-token copy after a 63-token match: with the old cap (match <= depth - k) nothing was drafted at k >= 63
    text = list(range(100, 300))
    tree = SuffixTree(64)
    tree.add_sequence(text)
    for k in (8, 24, 48, 63, 64, 120):
        got = tree.draft(text[:100], k, 0.5, 2.0, -2.0)
        assert got.match_len == 63 and got.tokens == tuple(text[100 : 100 + k]), k


def test_growing_the_open_sequence_token_by_token(trie):
    rng = np.random.default_rng(5)
    old = rng.integers(0, 3, size=40).tolist()
    tree = SuffixTree(7)
    tree.add_sequence(old)
    current = []
    for token in rng.integers(0, 3, size=40).tolist():
        tree.extend([token])
        current.append(token)
        got = tree.draft(current, 6, 0.0, 2.0, 0.0)
        assert (got.tokens, got.probs, got.match_len) == reference_draft([old, current], current, 7, 6, 0.0, 2.0, 0.0)


def test_no_draft_crosses_a_sequence_boundary(trie):
    tree = SuffixTree(8)
    tree.add_sequence([1, 2, 3])
    tree.add_sequence([4, 5])
    assert tree.draft([2, 3], 5).tokens == ()
    assert tree.draft([1, 2], 5).tokens == (3,)


@pytest.mark.parametrize("seed", range(6))
def test_the_python_trie_builds_the_compiled_tries_nodes_and_drafts(seed):
    # the fallback is the same data structure: the same node count, counts and drafts on larger corpora
    rng = np.random.default_rng(700 + seed)
    depth = int(rng.choice([8, 16, 64]))
    unit = rng.integers(0, 40, size=int(rng.integers(5, 60))).tolist()
    seqs = [(unit * 6)[: int(rng.integers(50, 300))] + rng.integers(0, 40, size=30).tolist() for _ in range(5)]
    trees = [SuffixTree(depth, implementation=name) for name in ("C", "Python")]
    for tree in trees:
        for q in seqs:
            tree.add_sequence(q)
        tree.extend(unit[:7])
    c, py = trees
    assert (c.implementation, py.implementation) == ("C", "Python")
    assert (py.n_nodes, py.n_tokens) == (c.n_nodes, c.n_tokens)
    for q in seqs:
        for i in rng.integers(0, len(q), size=10):
            ctx = q[: i + 1]
            budgets = ((64, 0.1, 4.0, 0.0), (16, 0.3, 1.0, 1.0), (200, 0.0, 8.0, -2.0), (64, 0.1, 0.7, -6.0))
            budgets += ((30, 0.1, float(rng.uniform(0, 3)), float(rng.uniform(-5, 2))), (40, 0.1, 1e10, 0.0))
            for k, min_prob, factor, offset in budgets:
                assert c.draft(ctx, k, min_prob, factor, offset) == py.draft(ctx, k, min_prob, factor, offset)
            pattern = q[i : i + int(rng.integers(1, depth + 1))]
            assert c.count(pattern) == py.count(pattern)


def test_without_the_compiled_extension_suffix_decoding_uses_the_python_trie(monkeypatch):
    import localspec.drafters.suffix.tree as module

    def missing():
        raise ImportError("no compiled _suffixtree")

    prompt = [(i * 7) % 50 for i in range(120)]
    answer = prompt[30:90]
    compiled = simulate(SuffixDrafter(SuffixOptions(), None), [(prompt, answer)], k=8)
    monkeypatch.setattr(module, "_lib", missing)
    assert module.implementation() == "Python" and SuffixTree(8).implementation == "Python"
    drafter = SuffixDrafter(SuffixOptions(), None)
    fallback = simulate(drafter, [(prompt, answer)], k=8)
    assert drafter.global_tree.implementation == drafter.local_tree.implementation == "Python"
    assert fallback.accepted == compiled.accepted > 0 and fallback.steps == compiled.steps


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
    path.write_bytes(
        {"garbage": b"\x00\x01junk", "truncate": data[:-7], "flip": data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:]}[
            damage
        ]
    )
    again = AnswerStore(path, "tok")
    assert again.answers == {} and "could not be used" in capsys.readouterr().err
    assert (tmp_path / "a.corrupt").exists()
    again.add([7, 8])
    again.save()
    assert [a.tolist() for a in AnswerStore(path, "tok").answers.values()] == [[7, 8]]


def test_a_damaged_end_keeps_the_answers_before_it(tmp_path, capsys):
    path = tmp_path / "a.bin"
    store = AnswerStore(path, "tok")
    for i in range(3):
        store.add([i] * 5)
        store.save()
    path.write_bytes(path.read_bytes()[:-3])  # a torn last record
    again = AnswerStore(path, "tok")
    assert [a.tolist() for a in again.answers.values()] == [[0] * 5, [1] * 5]
    assert "damaged" in capsys.readouterr().err and (tmp_path / "a.corrupt").exists()
    again.add([9])
    again.save()  # rewritten whole: the torn bytes are gone
    assert [a.tolist() for a in AnswerStore(path, "tok").answers.values()] == [[0] * 5, [1] * 5, [9]]


def test_saving_an_answer_appends_it(tmp_path):
    path = tmp_path / "a.bin"
    store = AnswerStore(path, "tok")
    store.add([1, 2, 3])
    store.save()
    inode, size = path.stat().st_ino, path.stat().st_size
    store.add(list(range(100)))
    store.save()
    assert path.stat().st_ino == inode and path.stat().st_size == size + 16 + 400  # one record, no rewrite
    assert path.stat().st_mode & 0o777 == 0o600
    assert [len(a) for a in AnswerStore(path, "tok").answers.values()] == [3, 100]


def test_an_append_after_another_chats_rewrite_loses_nothing(tmp_path):
    path = tmp_path / "a.bin"
    a, b = AnswerStore(path, "tok", max_tokens=100), AnswerStore(path, "tok", max_tokens=100)
    a.add([1] * 10)
    a.save()
    for i in range(12):  # b evicts, so it rewrites the file
        b.add([100 + i] * 10)
        b.save()
    a.add([2] * 10)
    a.save()
    kept = [int(x[0]) for x in AnswerStore(path, "tok", max_tokens=100).answers.values()]
    assert kept[-1] == 2 and 111 in kept and len(kept) <= 10


def test_a_version_1_file_is_read_and_written_back_as_version_2(tmp_path):
    body = np.array([5, 6, 7, 8], dtype="<i4").tobytes()
    header = {
        "version": 1,
        "tokenizer": "tok",
        "crc32": zlib.crc32(body),
        "answers": [["00aa" * 4, 3], ["00bb" * 4, 1]],
    }
    path = tmp_path / "a.bin"
    path.write_bytes(MAGIC + json.dumps(header).encode() + b"\n" + body)
    store = AnswerStore(path, "tok")
    assert [a.tolist() for a in store.answers.values()] == [[5, 6, 7], [8]]
    store.add([9])
    store.save()
    assert b'"version": 2' in path.read_bytes()[:80]
    assert [a.tolist() for a in AnswerStore(path, "tok").answers.values()] == [[5, 6, 7], [8], [9]]


def test_a_store_that_does_not_persist_reads_but_never_writes(tmp_path):
    path = tmp_path / "a.bin"
    store = AnswerStore(path, "tok")
    store.add([1, 2])
    store.save()
    before = path.read_bytes()
    quiet = AnswerStore(path, "tok", persist=False)
    assert [a.tolist() for a in quiet.answers.values()] == [[1, 2]]
    quiet.add([3, 4])
    quiet.save()
    assert path.read_bytes() == before


def test_caches_are_keyed_by_tokenizer(tmp_path):
    a = AnswerStore.for_tokenizer("a" * 64, SuffixOptions.cache_tokens, directory=tmp_path)
    b = AnswerStore.for_tokenizer("b" * 64, SuffixOptions.cache_tokens, directory=tmp_path)
    assert a.path != b.path
    a.add([1, 2])
    a.save()
    assert AnswerStore.for_tokenizer("b" * 64, SuffixOptions.cache_tokens, directory=tmp_path).answers == {}
    # a file of another tokenizer under the same name is refused, not used
    b.path.write_bytes(a.path.read_bytes())
    assert AnswerStore.for_tokenizer("b" * 64, SuffixOptions.cache_tokens, directory=tmp_path).answers == {}


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


def _hold_lock(path, held):
    with AnswerStore(path, "tok")._locked():
        held.set()
        time.sleep(60)


def test_a_save_waits_while_another_process_holds_the_lock_and_goes_on_when_it_dies(tmp_path):
    spawn = multiprocessing.get_context("spawn")  # how Windows and macOS start processes
    held = spawn.Event()
    holder = spawn.Process(target=_hold_lock, args=(tmp_path / "a.bin", held))
    holder.start()
    try:
        assert held.wait(60)
        store = AnswerStore(tmp_path / "a.bin", "tok")
        store.add([1, 2, 3])
        saver = threading.Thread(target=store.save)
        saver.start()
        saver.join(1.0)
        assert saver.is_alive()  # the other process holds the lock
        holder.kill()  # a crashed chat leaves no lock behind
        saver.join(30)
        assert not saver.is_alive()
    finally:
        holder.kill()
        holder.join()
    assert [a.tolist() for a in AnswerStore(tmp_path / "a.bin", "tok").answers.values()] == [[1, 2, 3]]


# -- the drafter -------------------------------------------------------------------------------------
def test_global_tree_drafts_an_earlier_answer(tmp_path):
    store = AnswerStore(tmp_path / "g.bin", "tok")
    drafter = SuffixDrafter(SuffixOptions(max_spec_factor=4.0), store)
    answer = [5, 6, 7, 8, 9, 10, 11, 12]
    simulate(drafter, [([1, 2, 3], answer)], k=4)
    again = simulate(drafter, [([4, 4, 4], answer)], k=4)  # another prompt, the same answer
    assert again.accepted >= 4 and again.drafter["wins_global"] >= 1
    # and it survives a restart through the cache on disk
    reborn = SuffixDrafter(SuffixOptions(max_spec_factor=4.0), AnswerStore(tmp_path / "g.bin", "tok"))
    assert reborn.global_tree.draft([5, 6, 7], 4, factor=4.0).tokens == (8, 9, 10, 11)


def test_slots_share_one_memory_of_past_answers(tmp_path):
    """`serve --parallel`: an answer one slot's drafter finishes is drafted by another's next request at once
    (one store and one global tree for all, held once); closing one slot's drafter leaves the others' intact."""
    options = DrafterSetup().with_options("suffix", cache_dir=str(tmp_path), max_spec_factor=4.0)
    backend = ScriptedBackend(vocab_size=30)
    first, second, third = (options.build("suffix", backend) for _ in range(3))
    share_memory(second, first)
    share_memory(third, first)
    share_memory(NgramDrafter(), first)  # a drafter that keeps nothing across requests: nothing to share
    assert second.global_tree is first.global_tree is third.global_tree and second.store is first.store
    answer = [15, 16, 17, 18, 19, 20, 21, 22]
    simulate(first, [([1, 2, 3], answer)], k=4)
    assert second.global_tree.draft([15, 16, 17], 4, factor=4.0).tokens == (18, 19, 20, 21)
    again = simulate(second, [([4, 4, 4], answer)], k=4)  # another slot, another prompt, the same answer
    assert again.accepted >= 4 and again.drafter["wins_global"] >= 1
    assert len(first.store.answers) == 2  # each answer kept once
    alone = options.build("suffix", backend)  # not shared: what was on disk when it was built
    simulate(first, [([5, 5, 5], [25, 26, 27, 28, 29])], k=4)
    assert alone.global_tree.draft([25, 26, 27], 4, factor=4.0).tokens == ()
    first.close()
    first.close()  # twice: still one slot's share
    assert third.global_tree.draft([15, 16, 17], 4, factor=4.0).tokens == (18, 19, 20, 21)
    second.close()
    third.close()
    assert first.past.tree is None  # the last one out frees the tree
    alone.close()


def test_simulator_on_fixed_sequences():
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    answer = [9, 1, 2, 3, 4, 5, 6, 7, 8, 9]  # copies the prompt
    stats = simulate(
        SuffixDrafter(SuffixOptions(max_spec_factor=2.0, max_spec_offset=0.0), None), [(prompt, answer)], k=4
    )
    assert stats.generated == len(answer)
    assert stats.mean_accepted_length > 2.0 and stats.acceptance_rate > 0.8
    plain = simulate(NgramDrafter(5, 6), [(prompt, [20, 21, 22])], k=4)
    assert plain.accepted == 0 and plain.steps == 3


def test_draft_confidence_is_path_confidence_times_match_confidence():
    drafter = SuffixDrafter(SuffixOptions(max_spec_factor=4.0, min_token_prob=0.5), None)
    prompt = [1, 2, 3, 4, 5, 9, 1, 2, 3, 4, 6, 1, 2, 3, 4, 5, 9, 8, 1, 2, 3]
    drafter.begin(prompt)
    draft = drafter.propose(prompt, 8)
    # "1 2 3" occurs 4 times, the 3 followed by a token all by 4 (the context's own end says nothing); "1 2 3 4"
    # is followed by 5 twice and by 6 once; "1 2 3 4 5 9" by 1 once and 8 once (confidence 1/3: stop)
    tree = drafter.local_tree.draft(prompt, 8, 0.5, 4.0, -2.0)
    assert draft.tokens == tree.tokens == (4, 5, 9) and tree.match_len == 3
    assert tree.probs == pytest.approx((1.0, 2 / 3, 2 / 3))
    assert draft.confidence == tuple(p * match_confidence(3) for p in tree.probs)


def test_bad_suffix_settings_are_named():
    with pytest.raises(ConfigError, match="min_token_prob"):
        SuffixOptions(min_token_prob=2.0)


def test_make_drafter_keys_the_cache_by_the_backend_vocabulary(tmp_path):
    options = DrafterSetup().with_options("suffix", cache_dir=str(tmp_path))
    a = options.build("suffix", ScriptedBackend(vocab_size=12))
    b = options.build("suffix", ScriptedBackend(vocab_size=13))
    assert a.store.path != b.store.path


def test_a_rewrite_keeps_what_another_chat_appended_since(tmp_path):
    """Chat A saves 9 answers, chat B appends one, A's next save evicts (a whole rewrite): B's answer stays."""
    path = tmp_path / "a.bin"
    a = AnswerStore(path, "tok", max_tokens=100)
    for i in range(9):
        a.add([i] * 10)
        a.save()
    b = AnswerStore(path, "tok", max_tokens=1000)
    b.add([500] * 10)
    b.save()  # an append: the file grows, its inode stays
    a.add([9] * 10)
    a.add([10] * 10)  # past A's bound: the oldest go, the file is rewritten
    a.save()
    kept = [int(x[0]) for x in AnswerStore(path, "tok", max_tokens=1000).answers.values()]
    assert kept[-3:] == [500, 9, 10] and 0 not in kept  # B's answer, older than A's unsaved two


def test_each_damaged_file_gets_a_copy_of_its_own(tmp_path, capsys):
    path = tmp_path / "a.bin"
    for round_ in range(3):
        path.write_bytes(b"junk %d" % round_)
        AnswerStore(path, "tok").save()
    copies = sorted(p.name for p in tmp_path.glob("*.corrupt"))
    assert copies == ["a.1.corrupt", "a.2.corrupt", "a.corrupt"]
    assert {(tmp_path / c).read_bytes() for c in copies} == {b"junk 0", b"junk 1", b"junk 2"}


def test_a_rewritten_file_is_known_by_its_header_even_where_the_inode_number_comes_back(tmp_path):
    path = tmp_path / "a.bin"
    a, b = AnswerStore(path, "tok", max_tokens=100), AnswerStore(path, "tok", max_tokens=100)
    a.add([1] * 10)
    a.save()
    for i in range(12):  # b evicts: a rewrite with a new generation in its header
        b.add([100 + i] * 10)
        b.save()
    a._inode = path.stat().st_ino  # as if the file system had handed the old inode number to the new file
    a.add([2] * 10)
    a.save()
    kept = [int(x[0]) for x in AnswerStore(path, "tok", max_tokens=100).answers.values()]
    assert kept[-1] == 2 and 111 in kept  # b's newest answer kept, a's appended after it: nothing cut
