"""`localspec bench`: workload files, method specs, the run on scripted models, and the command itself."""
import json

import pytest

from fakes import ScriptedBackend
from localspec.bench import format_tables, load_cases, make_methods, run_bench
from localspec.drafters import DrafterOptions
from localspec.drafters.base import NoDrafter
from localspec.errors import ConfigError
from localspec.sampling import SamplingParams
from localspec.session import Session
from localspec.speclen import AdaptiveK, FixedK
from test_cli import assert_one_line_error, run_cli


def test_builtin_workload_has_every_kind_and_pastes_sources():
    cases = load_cases()
    assert {c["kind"] for c in cases} >= {"code-edit", "structured", "code-gen", "chat", "multi-turn"}
    edit = next(c for c in cases if c["id"] == "edit-rename")
    assert "def indent(" in edit["messages"][0]["content"] and "{source}" not in edit["messages"][0]["content"]


def test_malformed_workload_names_the_line(tmp_path):
    bad = tmp_path / "w.jsonl"
    bad.write_text('{"id": "a", "kind": "chat", "messages": []}\n{"id": "b"}\n')
    with pytest.raises(ConfigError, match="line 2"):
        load_cases(str(bad))


def session(tmp_path):
    backend = ScriptedBackend(vocab_size=12, seed=0)
    return Session(backend, NoDrafter(), SamplingParams(temperature=0), "scripted",
                   drafter_options=DrafterOptions(suffix_cache_dir=str(tmp_path)))


def test_methods_parse_fixed_k_and_always_include_plain(tmp_path):
    methods = make_methods("ngram,suffix@3", session(tmp_path), "auto")
    assert [m.label for m in methods] == ["none", "ngram", "suffix@3"]
    assert isinstance(methods[1].policy, AdaptiveK) and isinstance(methods[2].policy, FixedK)
    assert methods[2].policy.max_k == 3
    with pytest.raises(ConfigError, match="unknown drafter"):
        make_methods("magic", session(tmp_path), "auto")
    with pytest.raises(ConfigError, match="goes with eagle"):
        make_methods("ngram#12", session(tmp_path), "auto")
    with pytest.raises(ConfigError, match="expected NAME"):
        make_methods("ngram@3@4", session(tmp_path), "auto")


def test_run_is_exact_and_reports_per_kind(tmp_path):
    cases = [{"id": f"c{i}", "kind": kind, "max_tokens": 60,
              "messages": [{"role": "user", "content": "abcabcabcabc" * (i + 1)}]}
             for i, kind in enumerate(["code-edit", "chat", "chat"])]
    s = session(tmp_path)
    report = run_bench(s, make_methods("ngram,suffix,random@2", s, "auto"), cases, progress=lambda _: None,
                       repeats=2)
    assert [r["repeat"] for r in report["cases"]] == [0, 0, 0, 1, 1, 1]
    assert set(report["by_kind"]) == {"code-edit", "chat"}
    for row in report["cases"]:
        assert [m["same_as_plain"] for m in row["methods"].values()] == [True] * 4
        assert row["methods"]["none"]["ratio_to_plain"] == 1.0
    assert report["by_kind"]["chat"]["random@2"]["acceptance_rate"] is not None
    table = format_tables(report)
    assert "code-edit" in table and "suffix" in table and "x plain" in table


@pytest.mark.model
def test_bench_command_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    result = run_cli("bench", "--drafters", "ngram,suffix@4", "--cases", "explain,revise", "--json", str(out),
                     "--max-tokens", "32")
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert set(report["by_kind"]) == {"chat", "multi-turn"} and report["sampling"]["temperature"] == 0.0
    assert "multi-turn" in result.stdout and "suffix@4" in result.stdout


def test_bench_command_bad_case_is_one_line():
    assert_one_line_error(run_cli("bench", "--cases", "nope"), "--cases nope")
