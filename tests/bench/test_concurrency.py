"""`localspec bench --concurrency`: N requests at once per level on the real SmolLM2, against the stand-in
llama-server started with -np N; its summary's arithmetic; its refusals, before anything loads."""

import json
import os

import pytest
from support.cli import assert_one_line_error, run_cli
from support.fake_peer import FakeServer

from localspec.bench.concurrency import format_tables, parse_levels, summarize_level
from localspec.bench.run import parse_method
from localspec.errors import ConfigError


@pytest.fixture
def fake(tmp_path, monkeypatch):
    return FakeServer(tmp_path, monkeypatch)


def test_levels_and_methods_are_parsed_or_refused_by_name():
    assert parse_levels("1,2,4") == [1, 2, 4] and parse_levels("2,2") == [2]
    for bad in ("0,2", "two", ""):
        with pytest.raises(ConfigError, match="like 1,2,4"):
            parse_levels(bad)
    assert parse_method("suffix@4") == ("suffix@4", "suffix", "4")
    assert parse_method("none") == ("none", "none", 1) and parse_method("ngram", "auto:8")[2] == "auto:8"
    for tree_or_exact in ("lookahead#16", "suffix+exact"):
        with pytest.raises(ConfigError, match="without #N trees or \\+exact"):
            parse_method(tree_or_exact)


def request(tokens, ttft, tok_s):
    return {"tokens": tokens, "ttft_s": ttft, "decode_tok_s": tok_s}


def test_the_summary_pools_rounds_and_takes_ratios_to_each_systems_plain_and_the_best_server():
    def system(aggregate, *requests):
        return {"aggregate_tok_s": aggregate, "tokens": aggregate * 10, "wall_s": 10.0, "requests": list(requests)}

    figures = {  # per system: each round's aggregate (10 s each), and its one request's (ttft, decode tok/s)
        "none": [(10, 1.0, 20), (14, 3.0, 22), (12, 2.0, 24)],
        "suffix": [(30, 0.5, 40), (20, 1.5, 30), (25, 1.0, 35)],
        "server:plain": [(12, 0.9, 21), (14, 1.1, 23), (13, 1.0, 25)],
        "server:ngram-mod": [(20, 2, 30), (25, 4, 31), (30, 3, 32)],
    }
    rounds = [
        {"systems": {label: system(rows[r][0], request(5, *rows[r][1:])) for label, rows in figures.items()}}
        for r in range(3)
    ]
    rounds[2]["systems"]["none"]["wall_s"] = 30.0  # a slow round weighs by its time in the pooled figure
    out = summarize_level(rounds)
    assert (
        out["none"]["aggregate_tok_s"] == round((100 + 140 + 120) / 50, 2) and out["none"]["median_round_tok_s"] == 12
    )
    assert out["suffix"]["aggregate_tok_s"] == 25 and out["server:ngram-mod"]["aggregate_tok_s"] == 25
    assert out["suffix"]["ratio_to_plain"] == round(25 / 7.2, 3)
    assert out["server:ngram-mod"]["ratio_to_plain"] == round(25 / 13, 3)  # over the server's own plain
    assert out["suffix"]["over_best_server"] == 1.0 and out["none"]["over_best_server"] == round(7.2 / 25, 3)
    assert out["suffix"]["over_best_server_per_round"] == round((30 / 20 + 20 / 25 + 25 / 30) / 3, 3)
    assert out["suffix"]["ttft_p50_s"] == 1.0 and out["suffix"]["ttft_p95_s"] == 1.5
    assert out["none"]["decode_tok_s_p50"] == 22
    table = format_tables({"summary": {2: out}})
    assert "2 requests at once" in table and "server:ngram-mod" in table


def test_bench_concurrency_runs_slots_beside_the_peer_with_np_n(tmp_path, fake):
    out = tmp_path / "concurrency.json"
    result = run_cli(
        "bench", "--concurrency", "1,2", "--drafters", "suffix", "--cases", "explain,edit-rename", "--max-tokens", "8",
        "--threads", "1", "--ctx", "512", "--peer", "llama-server", "--peer-types", "plain,ngram-mod",
        "--json", str(out),
        env={"PATH": os.environ["PATH"], "FAKE_LLAMA_SERVER_LOG": str(fake.log)},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["concurrency"] == [1, 2]
    assert report["methods"] == ["none", "suffix", "server:plain", "server:ngram-mod"]
    flags = [dict(zip(s["argv"], s["argv"][1:], strict=False)) for s in fake.starts()]
    assert [(f["-np"], f["-c"]) for f in flags] == [("1", "512"), ("1", "512"), ("2", "1024"), ("2", "1024")]
    one, two = report["rounds"]["1"], report["rounds"]["2"]
    assert [r["cases"] for r in one] == [["edit-rename"], ["explain"]]
    assert [r["cases"] for r in two] == [["edit-rename", "explain"]]
    for label in report["methods"]:
        requests = two[0]["systems"][label]["requests"]
        assert len(requests) == 2 and all(q["tokens"] > 0 and q["ttft_s"] is not None for q in requests)
        assert two[0]["systems"][label]["tokens"] == sum(q["tokens"] for q in requests)
    assert len(fake.requests()) == 2 * 2 + 2 * 2  # each type: two requests alone, then two at once
    assert set(report["summary"]) == {"1", "2"} and report["summary"]["2"]["server:plain"]["ratio_to_plain"] == 1
    assert "2 requests at once" in result.stdout


def test_a_drafter_slots_cannot_run_is_refused_before_the_model_loads():
    result = run_cli("bench", "--concurrency", "1,4", "--drafters", "eagle", "--model", "/nonexistent.gguf")
    assert_one_line_error(result, "--concurrency 4", "eagle drafter reads the target's features")


def test_a_plot_is_refused_with_concurrency_rather_than_left_undrawn(tmp_path):
    result = run_cli("bench", "--concurrency", "2", "--plot", str(tmp_path / "x.png"))
    assert_one_line_error(result, "--plot", "--concurrency")
    assert not (tmp_path / "x.png").exists()
