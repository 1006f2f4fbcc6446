"""benchmarks/controller_replay.py on token sequences: the oracle cuts each proposal where the answer says a window
pays most, and a replay of a copy-heavy answer with the real suffix drafter and controller beats plain decoding
on the virtual clock, the oracle at least as much."""

import pytest
from support.benchmarks import benchmark_module

from localspec.bench.simulate import cost_curve
from localspec.types import Draft

CURVE_S = {1: 0.04, 2: 0.075, 4: 0.13, 8: 0.24, 16: 0.29, 32: 0.52, 64: 0.81}  # this machine's shape


@pytest.fixture(scope="module")
def replay():
    with benchmark_module("controller_replay") as module:
        yield module


class Fixed:
    """Proposes the same tokens whatever the context."""

    name = "fixed"

    def __init__(self, tokens):
        self.tokens = tokens

    def propose(self, context, max_tokens):
        return Draft.chain(self.tokens[:max_tokens])


def test_the_oracle_verifies_the_right_tokens_only_where_a_window_pays(replay):
    step_cost = cost_curve({n: s * 1000 for n, s in CURVE_S.items()})
    oracle = replay.Oracle(Fixed(list(range(20))), step_cost)
    oracle.prompt_len, oracle.answer = 3, list(range(16)) + [99] * 10
    assert len(oracle.propose([7, 7, 7], 20)) == 16, "the 16 right tokens, not the wrong ones after them"
    oracle.answer = [0, 99]
    assert len(oracle.propose([7, 7, 7], 20)) == 1, "one right token, and a 2-token window costs under 2 steps"
    oracle.step_cost = cost_curve({1: 40, 2: 90, 64: 810})
    assert len(oracle.propose([7, 7, 7], 20)) == 0, "where it costs more, nothing is verified"


def test_a_copy_is_faster_than_plain_and_the_oracle_no_slower(replay):
    body = [1000 + (i * 7919) % 3001 for i in range(300)]  # a 300-token 'file' without repeats
    cases = [
        {"id": "first", "kind": "code-edit", "prompt": body, "answer": body[:150] + [5, 6, 7] + body[150:]},
        {"id": "second", "kind": "code-edit", "prompt": body[::-1], "answer": body[::-1][:200]},
    ]
    run = replay.replay(cases, CURVE_S, "suffix", 64)
    best = replay.replay(cases, CURVE_S, "suffix", 64, oracle=True)
    for name in ("first", "second"):
        assert run[name]["tokens"] == len(cases[0 if name == "first" else 1]["answer"])
        assert run[name]["speedup"] > 1.5, run[name]
        assert best[name]["seconds"] <= run[name]["seconds"] * 1.01, (best[name], run[name])


def test_recorded_token_ids_are_replayed_as_they_were(replay, tmp_path):
    """A record of token ids (record_answers.py --fim) is read as is; a chat record through the template."""
    path = tmp_path / "answers.jsonl"
    path.write_text('{"id": "a", "kind": "fim", "prompt_tokens": [5, 6, 7], "answer_tokens": [8, 9]}\n')

    class NoVocab:
        def __getattr__(self, name):
            raise AssertionError(f"token ids need no tokenizer ({name})")

    assert replay.cases(NoVocab(), path) == [{"id": "a", "kind": "fim", "prompt": [5, 6, 7], "answer": [8, 9]}]
