"""benchmarks/structured.py: its cases load and carry a constraint each, answers are judged against their
constraint, and the summary's ratios come from the per-case medians."""

import json

import pytest
from support.benchmarks import benchmark_module


@pytest.fixture(scope="module")
def structured():
    with benchmark_module("structured") as module:
        yield module


def test_every_case_has_one_constraint_and_its_sources_pasted(structured):
    cases = structured.load_cases(str(structured.CASES))
    assert len(cases) >= 8
    assert {c["kind"] for c in cases} >= {"extract", "tool-call", "json-mode", "gbnf", "tools"}
    for case in cases:
        assert len([f for f in structured.FIELDS if f in case]) == 1, case["id"]
        assert len(structured.constraint_of(case)) == (2 if "tools" in case else 1)
        assert "{source}" not in json.dumps(case["messages"])
        if "grammar" in case:
            assert case["check"]


def test_answers_are_judged_against_their_constraint(structured):
    cases = {c["id"]: c for c in structured.load_cases(str(structured.CASES))}
    call = cases["tool-call"]
    assert structured.check(call, '{"name": "grep", "arguments": {"pattern": "def restock_orders", "path": "src/"}}')
    ok, why = structured.check(call, '{"name": "rm", "arguments": {"pattern": null, "path": "/"}}')
    assert not ok and "rm" in why
    ok, why = structured.check(call, '{"name": "grep"')
    assert not ok and why.startswith("not JSON")
    assert structured.check(cases["json-mode"], '{"200": "OK"}') == (True, None)
    assert not structured.check(cases["json-mode"], '["OK"]')[0]
    steps = cases["gbnf-steps"]
    assert structured.check(steps, "- split lines\n- find margin\n- strip it\n")[0]
    assert not structured.check(steps, "- only one\n")[0]
    tools = cases["tools-required"]
    grep = {"name": "grep", "arguments": '{"pattern": "def restock_orders", "path": "src/"}'}
    assert structured.check(tools, "", [grep]) == (True, None)
    assert structured.check(tools, '<tool_call>{"name": "grep"}</tool_call>', []) == (False, "no tool call")
    ok, why = structured.check(tools, "", [grep, {"name": "rm", "arguments": "{}"}])
    assert not ok and "'rm'" in why
    ok, why = structured.check(tools, "", [{"name": "read_file", "arguments": '{"path": "a.py", "start_line": 0}'}])
    assert not ok and "read_file" in why


def test_summary_ratios_come_from_per_case_medians(structured):
    def row(case, system, variant, tok_s, valid=True):
        return {"case": case, "kind": "extract", "system": system, "variant": variant, "decode_tok_s": tok_s,
                "valid": valid}  # fmt: skip

    rows = []
    for tok_s in (30.0, 40.0, 50.0):  # three repeats: the median is 40
        rows += [row("a", "localspec-default", "constrained", tok_s), row("a", "localspec-default", "free", 32.0)]
    rows += [row("a", "server-plain", "constrained", 20.0), row("a", "server-ngram-mod", "constrained", 25.0)]
    rows += [row("b", "localspec-default", "constrained", 20.0, valid=False), row("b", "localspec-default", "free", 25)]
    rows += [row("b", "server-plain", "constrained", 25.0), row("b", "server-ngram-mod", "constrained", None)]
    s = structured.summarize(rows)
    assert s["per_case"]["a"]["default_over_server_best"] == 1.6
    assert s["per_case"]["b"]["default_over_server_best"] == 0.8  # a failed request is no server's best
    assert s["default_over_server_best_mean"] == 1.2 and s["default_over_server_best_min"] == 0.8
    assert s["constrained_over_free_mean"]["localspec-default"] == pytest.approx((40 / 32 + 20 / 25) / 2, abs=1e-3)
    assert s["valid"]["localspec-default"] == "3/4"
