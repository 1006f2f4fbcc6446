"""Structured output in the engine, on the scripted target (token i is the letter chr(97 + i), 5 ends the
answer): the sampled answer is the target's distribution renormalised over what the grammar allows (chi-square,
with a canary: masking after sampling instead of before gives a distribution the same samples reject), greedy
answers are the masked argmax with or without drafts, drafts the grammar forbids are cut, and the grammar
drafter drafts the tokens the grammar forces."""

import itertools

import numpy as np
import pytest
from support.distribution import chi_square_p
from support.fakes import ScriptedBackend

from localspec.drafters.base import NoDrafter
from localspec.drafters.grammar import GrammarDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.random import RandomDrafter
from localspec.engine.loop import generate
from localspec.errors import ConfigError, GrammarError
from localspec.sampling import SamplingParams
from localspec.structured import constraint as constraint_module
from localspec.structured import grammar
from localspec.structured.constraint import Constraint
from localspec.types import Draft

V, EOG, PROMPT = 6, 5, [0, 1, 2, 1, 0]
FIRST, SECOND, THIRD = "abc", "bcd", "ace"
PATTERN = f"[{FIRST}][{SECOND}][{THIRD}]"
SAMPLING = SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0)  # top-k: masked before it, too


def backend() -> ScriptedBackend:
    return ScriptedBackend(vocab_size=V, eog=EOG, scale=2.5, seed=3)


def constraint(target, g=None) -> Constraint:
    return Constraint(g or grammar.regex(PATTERN), target.tokenizer.grammar_tokenizer(), target.vocab_size)


def ids(letters: str) -> list[int]:
    return [ord(c) - ord("a") for c in letters]


def masked_distribution(target, sampling):
    """P(answer) under the grammar, position by position: the sampler's distribution of the row restricted to
    the allowed letters."""
    dist = {}
    for seq in itertools.product(ids(FIRST), ids(SECOND), ids(THIRD)):
        p, ctx = 1.0, list(PROMPT)
        for t, allowed in zip(seq, (FIRST, SECOND, THIRD), strict=True):
            mask = np.zeros(V, dtype=bool)
            mask[ids(allowed)] = True
            kept, probs = sampling.distribution(target.logits_after(ctx), allowed=mask)
            p *= float(probs[kept == t].sum())
            ctx.append(t)
        dist[seq] = p
    return dist


def masked_after_sampling(target, sampling):
    """The canary: sample from the unmasked row, and where the grammar forbids the draw take the best allowed
    letter instead (a mask applied after sampling)."""
    dist = {}
    for seq in itertools.product(ids(FIRST), ids(SECOND), ids(THIRD)):
        p, ctx = 1.0, list(PROMPT)
        for t, allowed in zip(seq, (FIRST, SECOND, THIRD), strict=True):
            row = target.logits_after(ctx)
            kept, probs = sampling.distribution(row)
            ok = set(ids(allowed))
            best = max(ok, key=lambda i: row[i])
            p *= float(probs[kept == t].sum()) + (t == best) * float(probs[[k not in ok for k in kept]].sum())
            ctx.append(t)
        dist[seq] = p
    return dist


def answers(drafter_for, n: int) -> dict:
    counts: dict = {}
    for seed in range(n):
        target = backend()
        done = generate(
            target,
            drafter_for(),
            PROMPT,
            SAMPLING,
            max_tokens=8,
            rng=np.random.default_rng(seed),
            constraint=constraint(target),
        )
        assert done.tokens[-1] == EOG and done.finish_reason == "stop"
        key = tuple(done.tokens[:-1])
        counts[key] = counts.get(key, 0) + 1
    return counts


@pytest.mark.parametrize(
    "drafter_for", [NoDrafter, lambda: RandomDrafter(V, seed=1), lambda: NgramDrafter(1, 3)], ids=str
)
def test_sampled_answers_follow_the_masked_distribution_and_the_canary_fails(drafter_for):
    target = backend()
    samples = answers(drafter_for, 2500)
    assert chi_square_p(samples, masked_distribution(target, SAMPLING)) > 1e-3
    wrong = masked_after_sampling(target, SAMPLING)  # answers it cannot give, or a misfit on the same samples
    assert sum(v for k, v in samples.items() if wrong[k] == 0) > 0 or chi_square_p(samples, wrong) < 1e-6


def test_greedy_is_the_masked_argmax_with_and_without_drafts():
    greedy = SamplingParams(temperature=0)
    outs = []
    for drafter in (NoDrafter(), RandomDrafter(V, seed=2), NgramDrafter(1, 3)):
        target = backend()
        outs.append(generate(target, drafter, PROMPT, greedy, max_tokens=8, constraint=constraint(target)).tokens)
    target, ctx, expected = backend(), list(PROMPT), []
    for allowed in (FIRST, SECOND, THIRD):
        row = target.logits_after(ctx)
        expected.append(max(ids(allowed), key=lambda i: (row[i], -i)))
        ctx.append(expected[-1])
    assert outs == [(*expected, EOG)] * 3


def test_drafts_are_cut_at_the_first_forbidden_token_and_q_drafts_are_left_whole():
    c = constraint(backend())
    assert c.cut(Draft.chain(ids("abd"))).tokens == tuple(ids("ab"))  # d may not come third
    assert c.cut(Draft.chain(ids("da"))).tokens == ()
    q = np.full((2, V), 1 / V)
    assert len(c.cut(Draft.chain(ids("da"), q=q))) == 2  # cutting a q-draft would bias the residual
    c.commit(ids("a"))
    assert c.valid_prefix(ids("bb")) == 1 and c.forced() == []
    assert c.allowed().tolist() == [i in ids(SECOND) for i in range(V)]
    assert c.allowed(ids("b")).tolist() == [i in ids(THIRD) for i in range(V)]  # ahead, rolled back after
    assert c.allowed().tolist() == [i in ids(SECOND) for i in range(V)]


def test_the_grammar_drafter_drafts_forced_tokens_which_are_verified_in_one_window():
    target = backend()
    fixed = grammar.lark('start: "abc" ("d" | "e")')
    drafter = GrammarDrafter(NoDrafter())
    done = generate(
        target, drafter, PROMPT, SamplingParams(temperature=0.8), max_tokens=8, constraint=constraint(target, fixed)
    )
    assert done.text in ("abcd", "abce") and done.tokens[-1] == EOG
    assert target.forward_calls[0] == 4  # the pending token and the three forced ones, in one forward
    assert done.stats.accepted == 3
    assert done.stats.grammar["forced_drafted"] == done.stats.grammar["forced_accepted"] == 3


# ambiguous: the parser's work per token grows with the answer (the scripted model writes a and b, never c)
AMBIGUOUS = 'start: x x x x x x x x x x x x x x x x "c"\nx: x x | "a" | "b" | ""\n'


def test_a_grammar_past_llguidances_limits_ends_the_answer_with_a_clear_error():
    target = backend()
    tight = Constraint(grammar.lark(AMBIGUOUS), target.tokenizer.grammar_tokenizer(), V, limits={"step_max_items": 300})
    with pytest.raises(GrammarError) as error:
        generate(target, NgramDrafter(1, 4), PROMPT, SamplingParams(temperature=0), max_tokens=2000, constraint=tight)
    message = str(error.value)
    assert "\n" not in message and "Too many items (limit 300" in message and "simplify it" in message
    assert 10 < tight.committed < 2000  # it ran, then stopped where the limit was reached, not at max_tokens


def test_a_grammar_whose_work_per_token_outgrows_its_time_budget_ends_the_answer(monkeypatch):
    target = backend()
    cheap = constraint(target)  # a regular language costs microseconds: never near the bound
    assert generate(target, NoDrafter(), PROMPT, SAMPLING, max_tokens=8, constraint=cheap).text
    monkeypatch.setattr(constraint_module, "TOKEN_BUDGET_S", 2e-4)  # the ambiguous grammar passes it in ~20 tokens
    slow = constraint(target, grammar.lark(AMBIGUOUS))
    with pytest.raises(GrammarError, match=r"ms of grammar work \(the bound is 0.2 ms\)"):
        generate(target, NoDrafter(), PROMPT, SamplingParams(temperature=0), max_tokens=5000, constraint=slow)
    assert slow.committed < 5000


def test_bad_grammars_are_clear_errors():
    with pytest.raises(ConfigError, match="Invalid type: strin"):
        grammar.json_schema({"type": "strin"})
    with pytest.raises(ConfigError, match="not valid JSON"):
        grammar.json_schema("{oops", "--json-schema")
    with pytest.raises(ConfigError, match="missing"):
        grammar.gbnf("root ::= missing")
    with pytest.raises(ConfigError, match="no such file"):
        grammar.from_option("nowhere.gbnf", "--grammar")


def test_options_read_files_and_inline_schemas(tmp_path):
    (tmp_path / "g.gbnf").write_text('root ::= "yes" | "no"\n')
    assert grammar.from_option(str(tmp_path / "g.gbnf"), "--grammar").kind == "gbnf"
    (tmp_path / "g.lark").write_text('start: "yes" | "no"\n')
    assert grammar.from_option(str(tmp_path / "g.lark"), "--grammar").kind == "lark"
    assert grammar.from_option('{"type": "object"}', "--json-schema").is_json
