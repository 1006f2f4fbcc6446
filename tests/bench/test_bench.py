"""`localspec bench`: workload files, method specs, the run on scripted models, and the command itself."""

import json

import pytest
from support.cli import assert_one_line_error, run_cli
from support.fakes import ScriptedBackend

from localspec.bench.run import format_tables, load_cases, make_methods, old_spellings, run_bench, verify_bound
from localspec.drafters.base import NoDrafter
from localspec.drafters.table import DrafterSetup
from localspec.engine.speclen import AdaptiveK, FixedK
from localspec.errors import ConfigError
from localspec.sampling import SamplingParams
from localspec.session import Session


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
    return Session(
        backend,
        NoDrafter(),
        SamplingParams(temperature=0),
        "scripted",
        drafters=DrafterSetup().with_options("suffix", cache_dir=str(tmp_path)),
    )


def test_methods_parse_fixed_k_and_always_include_plain(tmp_path):
    methods = make_methods("ngram,suffix@3", session(tmp_path), "auto")
    assert [m.label for m in methods] == ["none", "ngram", "suffix@3"]
    assert isinstance(methods[1].policy, AdaptiveK) and isinstance(methods[2].policy, FixedK)
    assert methods[2].policy.max_k == 3
    with pytest.raises(ConfigError, match="unknown drafter"):
        make_methods("magic", session(tmp_path), "auto")
    with pytest.raises(ConfigError, match=r"goes with a drafter that drafts trees \(eagle, "):
        make_methods("ngram#12", session(tmp_path), "auto")
    with pytest.raises(ConfigError, match="expected NAME"):
        make_methods("ngram@3@4", session(tmp_path), "auto")
    with pytest.raises(ConfigError, match="COPY\\+MODEL"):  # a chain is named like one drafter
        make_methods("suffix+ngram", session(tmp_path), "auto")
    with pytest.raises(ConfigError, match="draft-model"):  # parsed as a chain at K=4 with --exact
        make_methods("suffix+draft@4+exact", session(tmp_path), "auto")
    exact = make_methods("ngram+exact,ngram", session(tmp_path), "auto")
    assert [(m.label, m.exact.on) for m in exact] == [("none", False), ("ngram+exact", True), ("ngram", False)]
    assert old_spellings("none,suffix+noguard,ngram") == (
        "none,suffix,ngram",
        ["NAME+noguard is the default now (NAME); NAME+exact runs with --exact"],
    )


CASES = [
    {"id": f"c{i}", "kind": kind, "max_tokens": 60, "messages": [{"role": "user", "content": "abcabcabcabc" * (i + 1)}]}
    for i, kind in enumerate(["code-edit", "chat", "chat"])
]


def test_run_is_exact_and_reports_per_kind(tmp_path):
    s = session(tmp_path)
    report = run_bench(s, "ngram,suffix,random@2", CASES, progress=lambda _: None, repeats=2)
    assert [r["repeat"] for r in report["cases"]] == [0, 0, 0, 1, 1, 1]
    assert set(report["by_kind"]) == {"code-edit", "chat"}
    for row in report["cases"]:
        assert [m["same_as_plain"] for m in row["methods"].values()] == [True] * 4
        assert row["methods"]["none"]["ratio_to_plain"] == 1.0
        assert all(m["output_ids"] == row["methods"]["none"]["output_ids"] for m in row["methods"].values())
        for m in row["methods"].values():
            assert m["ttft_s"] >= m["prefill_s"] and m["total_s"] >= m["decode_s"]
            assert m["ratio_to_plain_total"] is not None and m["plain"] == "none"
    assert report["by_kind"]["chat"]["random@2"]["acceptance_rate"] is not None
    assert set(report["per_case"]) == {"c0", "c1", "c2"} and report["per_case"]["c0"]["repeats"] == 2
    assert any("cold" in note for note in report["notes"])
    assert not list(tmp_path.rglob("*.bin"))  # the session's own suffix cache folder stays untouched
    table = format_tables(report)
    assert "code-edit" in table and "suffix" in table and "x plain" in table and "per case" in table


def test_each_repeat_starts_cold_and_no_case_meets_its_own_answer(tmp_path, monkeypatch):
    """Spy on every suffix drafter: what its global tree holds when a case begins, by the case it came from."""
    from localspec.drafters.suffix.drafter import SuffixDrafter

    s = session(tmp_path)
    case_of = {tuple(s.backend.tokenizer.chat_tokens(c["messages"])): c["id"] for c in CASES}
    origin = {}  # answer id in a suffix store -> the case whose answer it is
    seen = []  # (case, origins of the answers in the drafter's global cache, tokens in its global tree)
    begin, end = SuffixDrafter.begin, SuffixDrafter.end

    def spy_begin(self, prompt, turn):
        self._case = case_of[tuple(prompt)]
        seen.append((self._case, [origin[a] for a in self.store.answers], self.global_tree.n_tokens))
        return begin(self, prompt, turn)

    def spy_end(self):
        before = set(self.store.answers)
        figures = end(self)
        for answer in set(self.store.answers) - before:
            origin[answer] = self._case
        return figures

    monkeypatch.setattr(SuffixDrafter, "begin", spy_begin)
    monkeypatch.setattr(SuffixDrafter, "end", spy_end)
    run_bench(s, "suffix,suffix@3", CASES, progress=lambda _: None, repeats=3)
    assert len(seen) == 2 * 3 * len(CASES) and len(origin) == len(seen)
    for case, origins, tree_tokens in seen:
        assert case not in origins  # never its own earlier answer, from any repeat or method
        if case == "c0":  # every repeat starts empty
            assert origins == [] and tree_tokens == 0
    assert [o for c, o, _ in seen if c == "c2"] == [["c0", "c1"]] * 6  # later cases see earlier ones


def test_verify_bound_is_the_best_window():
    row = {
        "methods": {
            "none": {"speclen": {"mode": "fixed", "k": 1}},
            "ngram": {"speclen": {"verify_ms": {1: 10.0, 2: 11.0}}},
            "suffix": {"speclen": {"verify_ms": {"1": 10.0, "2": 12.0, "4": 20.0, "8": 60.0}}},
        }
    }
    assert verify_bound(row) == {
        "speedup": 2.0,
        "window": 4,
        "from": "suffix",
        "verify_ms": {1: 10.0, 2: 12.0, 4: 20.0, 8: 60.0},
    }
    del row["methods"]["suffix"]
    assert verify_bound(row)["from"] == "ngram"
    assert verify_bound({"methods": {"none": {"speclen": {}}}}) is None


@pytest.mark.model
def test_bench_command_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    result = run_cli(
        "bench",
        "--drafters",
        "ngram,suffix@4",
        "--cases",
        "explain,revise",
        "--json",
        str(out),
        "--max-tokens",
        "32",
        "--threads",
        "1",
    )  # 2 threads on 2 busy cores crawl (spin-waits)
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert set(report["by_kind"]) == {"chat", "multi-turn"} and report["sampling"]["temperature"] == 0.0
    assert "multi-turn" in result.stdout and "suffix@4" in result.stdout


def test_bench_command_bad_case_is_one_line():
    assert_one_line_error(run_cli("bench", "--cases", "nope"), "--cases nope")
