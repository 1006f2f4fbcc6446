"""Quantization advice (localspec/bench/quants.py): the expected-rate arithmetic, the verdict on curves shaped like the
ones measured on this project's CPUs, quantizations read from metadata, the store of measurements, `pull`'s
advice, and `bench --quants` on SmolLM2 (its Q4_1 file, and a Q4_0 made by requantizing it for the timing)."""

import json

import gguf
import numpy as np
import pytest
from support.cli import assert_one_line_error, run_cli

from localspec.bench import quants
from localspec.bench.quants import QuantCurve, expected_tokens, pull_advice, verdict


def curve(quant, step, ratios, bits=4.5):
    """A curve: a step of ``step`` ms and each window's cost as a multiple of it."""
    return QuantCurve(quant, "m", {1: step, **{k: step * r for k, r in ratios.items()}}, bits)


# shaped like Qwen2.5-Coder-1.5B on a 2-core AVX2 EPYC (design.md): Q4_0 cheapest everywhere, Q4_K_M's cliff
# between 6 and 8, Q8_0 flat but 30% slower a step
Q4_0 = curve("Q4_0", 45.0, {2: 1.5, 4: 2.2, 8: 4.2, 16: 6.0})
Q4_K_M = curve("Q4_K_M", 47.0, {2: 1.63, 4: 2.47, 8: 5.45, 16: 6.78}, 4.9)
Q8_0 = curve("Q8_0", 61.0, {2: 1.4, 4: 1.9, 8: 3.0, 16: 4.6}, 8.5)


def test_a_window_yields_the_geometric_expectation():
    assert expected_tokens(1, 0.7) == 1.0 and expected_tokens(4, 1.0) == 4.0
    assert expected_tokens(4, 0.7) == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    rate, k = Q4_0.rate(0.7)
    assert (rate, k) == max((expected_tokens(k, 0.7) / ms * 1e3, k) for k, ms in Q4_0.window_ms.items())


def test_the_verdict_names_the_fastest_with_speculation_and_why():
    text = verdict([Q4_K_M, Q8_0, Q4_0])
    best, k = Q4_0.rate(0.9)
    assert text.startswith(f"Q4_0 speculates best here: {best:.1f} tok/s ({k}-token windows at")
    runner_up = max((Q4_K_M, Q8_0), key=lambda c: c.rate(0.9)[0])
    assert f", {runner_up.quant} {runner_up.rate(0.9)[0]:.1f} tok/s" in text
    assert "without drafts" not in text  # Q4_0 also has the fastest step
    assert text.endswith("Bits per weight (more keep more of the model): Q4_0 4.50, Q4_K_M 4.90, Q8_0 8.50.")
    # copying favours Q8_0's flat curve over Q4_K_M's cliff, though Q4_K_M decodes faster without drafts
    two = verdict([Q4_K_M, Q8_0])
    assert two.startswith("Q8_0 speculates best here") and "without drafts Q4_K_M is faster (21.3 tok/s" in two
    table = quants.advise([Q4_K_M, Q8_0, Q4_0])
    assert table[0].split()[:3] == ["quant", "bits/w", "step"] and len(table) == 5 and table[-1] == text


def write_gguf(path, file_type):
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_file_type(file_type)
    w.add_tensor("x", np.zeros(4, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_the_quantization_comes_from_metadata_not_the_file_name(tmp_path):
    write_gguf(tmp_path / "model-Q8_0.gguf", 2)  # named Q8_0, declares Q4_0
    write_gguf(tmp_path / "other.gguf", 15)
    assert quants.quant_of(tmp_path / "model-Q8_0.gguf") == "Q4_0"
    assert quants.quant_of(tmp_path / "other.gguf") == "Q4_K_M"


def test_measurements_are_kept_per_cpu_and_replaced_per_quantization(tmp_path):
    store = tmp_path / "measured.json"
    quants.save_measured([Q4_0, Q8_0], "cpu A | avx2 | 2 threads", store)
    quants.save_measured([curve("Q4_0", 40.0, {2: 1.4})], "cpu A | avx2 | 2 threads", store)
    quants.save_measured([Q4_0], "cpu B | avx512 | 8 threads", store)
    kept = quants.load_measured(store)
    assert sorted((r["cpu"][:5], r["quant"], r["window_ms"]["1"]) for r in kept) == [
        ("cpu A", "Q4_0", 40.0),
        ("cpu A", "Q8_0", 61.0),
        ("cpu B", "Q4_0", 45.0),
    ]
    store.write_text("{damaged")
    assert quants.load_measured(store) == []
    good = {"cpu": "c", "quant": "Q4_0", "model": "m", "window_ms": {"1": 5.0}, "bits_per_weight": 4.5}
    store.write_text(json.dumps([good, 3, {"cpu": "c"}, {**good, "window_ms": {"2": 1.0}}, {**good, "cpu": None}]))
    assert quants.load_measured(store) == [good]  # damaged records are left out


def test_pull_advice_from_this_cpus_measurements_else_the_reference_of_its_kind(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(quants, "cpu_signature", lambda: "cpu A | avx2 | 2 threads")
    quants.save_measured([Q4_0, Q4_K_M, Q8_0], "cpu A | avx2 | 2 threads")
    lines = pull_advice(["Q4_K_M", "Q8_0", "Q4_0"], "Q4_K_M", "qwen")
    assert lines[0].startswith("qwen: on this CPU (no GPU offload) Q4_0 speculates best here")
    assert "[measured on this CPU by `localspec bench --quants`]" in lines[0]
    assert lines[1] == "qwen: `localspec pull qwen --quant Q4_0` gets it (this pull gets Q4_K_M)"
    assert len(pull_advice(["Q4_0", "Q8_0"], "Q4_0", "qwen")) == 1  # it is what was asked for
    assert pull_advice(["Q4_K_M"], "Q4_K_M", "qwen") == []  # one quantization: nothing to choose
    # no measurement here: the shipped reference, when it comes from a CPU of this kind
    monkeypatch.setenv("LOCALSPEC_CACHE", str(tmp_path / "empty"))
    ref = quants.reference()
    kind = quants.cpu_kind(ref["cpu"])
    monkeypatch.setattr(quants, "cpu_signature", lambda: f"another CPU | {kind} | 4 threads")
    offered = [c["quant"] for c in ref["curves"]]
    lines = pull_advice(offered, offered[0], "m")
    assert lines and f"measured on {ref['cpu'].split(' | ')[0]} ({kind}) with {ref['model']}" in lines[0]
    monkeypatch.setattr(quants, "cpu_signature", lambda: "a phone | neon | 4 threads")
    assert pull_advice(offered, offered[0], "m") == []  # another kind of CPU: no advice from it


@pytest.mark.model
def test_bench_quants_times_the_file_on_disk_and_a_requantized_one(tmp_path):
    cache = tmp_path / "cache"
    out = tmp_path / "q.json"
    result = run_cli(
        "bench", "--quants", "Q4_1,Q4_0", "--quant-rounds", "2", "--json", str(out), env={"LOCALSPEC_CACHE": str(cache)}
    )
    assert result.returncode == 0, result.stderr
    assert "Q4_0 is not on disk: requantizing" in result.stderr
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:-1]}  # the table between header and verdict
    assert set(rows) == {"Q4_1", "Q4_0"} and "requantized for timing" in rows["Q4_0"]
    assert "requantized" not in rows["Q4_1"] and "speculates best here" in result.stdout.splitlines()[-1]
    report = json.loads(out.read_text())
    assert [c["quant"] for c in report["curves"]] == ["Q4_1", "Q4_0"] and report["context"] == quants.CONTEXT
    assert all(set(c["window_ms"]) == {str(k) for k in quants.WINDOWS} for c in report["curves"])
    assert not list(cache.glob("quants-*"))  # the requantized file is gone
    kept = json.loads((cache / "quants" / "measured.json").read_text())
    assert {r["quant"] for r in kept} == {"Q4_1", "Q4_0"}


def test_bench_quants_without_a_file_on_disk_is_one_clear_line(tmp_path):
    toml = tmp_path / "models.toml"
    toml.write_text('[models.absent]\n[models.absent.gguf]\nrepo = "x/absent-GGUF"\nfiles = { Q4_0 = "a.gguf" }\n')
    env = {"LOCALSPEC_MODELS": str(toml), "HF_HOME": str(tmp_path / "hf"), "HOME": str(tmp_path)}
    assert_one_line_error(run_cli("bench", "--model", "absent", "--quants", env=env), "no GGUF file of absent")


def test_pull_on_a_cpu_only_machine_says_which_quantization_speculates_best(hub, tmp_path):  # noqa: F811
    from localspec.models.hub import cpu_only

    if not cpu_only():
        pytest.skip("llama.cpp here offloads to a GPU: pull gives no CPU advice")
    cache = tmp_path / "cache"
    slow_windows = curve("Q4", 10.0, {2: 1.9, 4: 3.8, 8: 7.9, 16: 15.0})
    cheap_windows = curve("Q8", 12.0, {2: 1.1, 4: 1.3, 8: 1.8, 16: 3.0}, 8.5)
    quants.save_measured([slow_windows, cheap_windows], quants.cpu_signature(), cache / "quants" / "measured.json")
    result = run_cli("pull", "tiny", "--no-drafts", env={**hub.env, "LOCALSPEC_CACHE": str(cache)})
    assert result.returncode == 0, result.stderr
    assert "tiny: on this CPU (no GPU offload) Q8 speculates best here" in result.stderr
    assert "`localspec pull tiny --quant Q8` gets it (this pull gets Q4)" in result.stderr


@pytest.mark.model
def test_an_unknown_quantization_is_refused_before_anything_is_made(tmp_path):
    cache = tmp_path / "cache"
    result = run_cli("bench", "--quants", "Q4_0,Q9_Z", env={"LOCALSPEC_CACHE": str(cache)})
    assert_one_line_error(result, "unknown quantization Q9_Z", "Q4_K_M")
    assert not list(cache.glob("quants-*"))
