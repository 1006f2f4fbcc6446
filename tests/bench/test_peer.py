"""`localspec bench --peer llama-server`: the harness against a stand-in server (tests/support/fake_llama_server.py,
found as `llama-server` on PATH), the errors, and one run with the real llama-server when one is built."""

import glob
import json
import os
from pathlib import Path

import pytest
from support.cli import assert_one_line_error, run_cli
from support.fake_peer import FakeServer
from support.fakes import ScriptedBackend

from localspec.bench.peer import LlamaServer, PeerError, find_llama_server
from localspec.bench.run import format_tables, plot, run_bench
from localspec.drafters.base import NoDrafter
from localspec.drafters.table import DrafterSetup
from localspec.sampling import SamplingParams
from localspec.session import Session

ALL_TYPES = ["plain", "ngram-mod", "ngram-simple", "draft-simple"]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    return FakeServer(tmp_path, monkeypatch)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def scripted_session(tmp_path):
    return Session(
        ScriptedBackend(vocab_size=12, seed=0),
        NoDrafter(),
        SamplingParams(temperature=0),
        "scripted",
        drafters=DrafterSetup().with_options("suffix", cache_dir=str(tmp_path / "user-cache")),
    )


CASES = [
    {"id": f"c{i}", "kind": kind, "max_tokens": 24, "messages": [{"role": "user", "content": "abcabcabcabc" * (i + 1)}]}
    for i, kind in enumerate(["code-edit", "chat", "chat"])
]


def bench(tmp_path, fake, repeats=2, types=ALL_TYPES, progress=lambda _: None, **config):
    s = scripted_session(tmp_path)
    return run_bench(
        s, "ngram,suffix", CASES, peer=fake.config(**config), peer_types=types, repeats=repeats, progress=progress
    )


def test_fresh_servers_per_repeat_with_the_sessions_flags(tmp_path, fake):
    report = bench(tmp_path, fake)
    starts = fake.starts()
    assert len(starts) == 2 * len(ALL_TYPES) and len({s["pid"] for s in starts}) == len(starts)
    for s in starts:
        argv = s["argv"]
        flags = dict(zip(argv, argv[1:], strict=False))
        assert flags["-m"] == str(fake.model) and flags["-c"] == "4096" and flags["-t"] == "2"
        assert flags["--host"] == "127.0.0.1" and int(flags["--port"]) > 0 and flags["-np"] == "1"
    spec = [dict(zip(s["argv"], s["argv"][1:], strict=False)).get("--spec-type") for s in starts]
    assert spec == [None, "ngram-mod", "ngram-simple", "draft-simple"] * 2
    drafts = [dict(zip(s["argv"], s["argv"][1:], strict=False)).get("-md") for s in starts]
    assert drafts == ([None] * 3 + [str(fake.draft)]) * 2
    assert not any(alive(s["pid"]) for s in starts)  # every server stopped at the end of its repeat
    # each repeat's requests went to that repeat's servers
    pids = [s["pid"] for s in starts]
    by_pid = {}
    for r in fake.requests():
        by_pid.setdefault(r["pid"], []).append(r)
    assert all(len(by_pid[p]) == len(CASES) for p in pids)
    # the very prompt token ids localspec used, greedy, no prompt cache, tokens returned
    backend = ScriptedBackend()
    for r in fake.requests():
        req = r["request"]
        assert req["temperature"] == 0 and req["top_k"] == 1 and req["cache_prompt"] is False
        assert req["return_tokens"] is True and req["n_predict"] == 24
        assert req["prompt"] in [backend.tokenizer.chat_tokens(c["messages"]) for c in CASES]
    assert report["peer"]["types"] == ALL_TYPES
    assert find_llama_server(str(fake.bin)) == find_llama_server(str(fake.bin / "llama-server")) == find_llama_server()


def test_peer_methods_are_interleaved_and_reported(tmp_path, fake):
    report = bench(tmp_path, fake)
    labels = [
        "none",
        "ngram",
        "suffix",
        "server:plain",
        "server:ngram-mod",
        "server:ngram-simple",
        "server:draft-simple",
    ]
    assert report["methods"] == labels
    orders = [row["order"] for row in report["cases"]]
    assert all(sorted(o) == sorted(labels) for o in orders)
    assert len({o[0] for o in orders}) == len(orders)  # rotated per case and repeat
    assert any(o.index("server:plain") < o.index("none") for o in orders)
    assert any(o.index("server:plain") > o.index("none") for o in orders)
    assert any("cold" in note for note in report["notes"])
    for row in report["cases"]:
        ms = row["methods"]
        for label, m in ms.items():
            for key in (
                "output_ids",
                "prefill_s",
                "ttft_s",
                "decode_s",
                "decode_tok_s",
                "total_s",
                "ratio_to_plain",
                "ratio_to_plain_total",
                "same_as_plain",
                "plain",
            ):
                assert key in m, (label, key)
            assert m["same_as_plain"] and len(m["output_ids"]) == m["tokens"] == 24
        assert ms["server:plain"]["plain"] == "server:plain" and ms["ngram"]["plain"] == "none"
        assert ms["server:plain"]["ratio_to_plain"] == 1.0 and ms["none"]["ratio_to_plain"] == 1.0
        assert ms["server:ngram-mod"]["ratio_to_plain"] == 1.5 and ms["server:draft-simple"]["ratio_to_plain"] == 0.8
        assert ms["server:ngram-simple"]["acceptance_rate"] == 0.5
        assert (
            ms["server:plain"]["ttft_s"]
            == ms["server:plain"]["prefill_s"]
            == round(0.5 * row["prompt_tokens"] / 1e3, 4)
        )
        assert ms["none"]["ttft_s"] >= ms["none"]["prefill_s"]
        assert ms["none"]["total_s"] == pytest.approx(ms["none"]["prefill_s"] + ms["none"]["decode_s"], abs=2e-4)
    case = report["per_case"]["c1"]
    assert case["repeats"] == 2 and case["median_ratio"]["server:ngram-simple"] == 2.0
    assert set(case["median_ratio"]) == set(labels) and "bound" in case and "fraction_of_bound" in case
    assert report["by_kind"]["chat"]["server:ngram-simple"]["ratio_to_plain"] == 2.0
    assert report["by_kind"]["chat"]["server:plain"]["tau"] is None
    table = format_tables(report)
    assert "server:ngram-simple" in table and "median ratio to own plain per case" in table
    assert "c1" in table.split("median ratio")[1]
    json.dumps(report)  # all of it serialises


def test_plot_with_peer_methods_writes_a_png(tmp_path, fake):
    pytest.importorskip("matplotlib", reason="matplotlib is in the dev extra")
    report = bench(tmp_path, fake, repeats=1, types=["plain", "ngram-simple"])
    out = tmp_path / "bench.png"
    plot(report, str(out))
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) > 1000
    import matplotlib.image

    assert matplotlib.image.imread(str(out)).shape[2] in (3, 4)


@pytest.mark.parametrize("mode,needle", [("exit", "did not start"), ("error", "HTTP 500"), ("die", "exited")])
def test_a_failing_server_names_its_type_and_log(tmp_path, fake, monkeypatch, mode, needle):
    monkeypatch.setenv("FAKE_LLAMA_SERVER_MODE", mode)
    monkeypatch.setenv("FAKE_LLAMA_SERVER_TYPE", "ngram-simple")
    with pytest.raises(PeerError) as err:
        bench(tmp_path, fake, repeats=1)
    text = str(err.value)
    assert "llama-server (ngram-simple)" in text and needle in text and "last lines of its log" in text
    assert {"exit": "cannot load the model", "error": "fake failure", "die": "crashed"}[mode] in text
    assert "\n" not in text
    assert not any(alive(s["pid"]) for s in fake.starts())


def test_ctrl_c_leaves_no_server(tmp_path, fake):
    def interrupt(_line):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        bench(tmp_path, fake, progress=interrupt)
    assert len(fake.starts()) == len(ALL_TYPES)
    assert not any(alive(s["pid"]) for s in fake.starts())


def test_stop_kills_a_server_that_ignores_terminate(tmp_path, fake, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_SERVER_MODE", "ignore-term")
    server = fake.config().server("plain", tmp_path / "log.txt").start()
    pid = server.pid
    server.stop(timeout=0.5)
    assert not alive(pid) and server.pid is None
    server.stop()  # idempotent


def test_missing_binary_is_one_clear_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    result = run_cli("bench", "--peer", "llama-server", env={"PATH": str(empty)})
    assert_one_line_error(result, "no llama-server on PATH", "--peer llama-server=PATH")
    assert_one_line_error(run_cli("bench", "--peer", f"llama-server={empty}/nope"), "no executable llama-server")
    assert_one_line_error(run_cli("bench", "--peer", "ollama"), "--peer llama-server[=PATH]")
    assert_one_line_error(run_cli("bench", "--peer", "llama-server", "--peer-types", "magic"), "--peer-types 'magic'")


@pytest.mark.model
def test_bench_command_with_the_stand_in_server(tmp_path, fake):
    """The CLI wiring on the real SmolLM2 GGUF: the peer found on PATH, draft-simple skipped (no draft)."""
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    result = run_cli(
        "bench",
        "--peer",
        "llama-server",
        "--drafters",
        "suffix",
        "--cases",
        "explain",
        "--max-tokens",
        "8",
        "--threads",
        "1",
        "--ctx",
        "2048",
        "--json",
        str(out),
        "--plot",
        str(png),
        env={"PATH": os.environ["PATH"], "FAKE_LLAMA_SERVER_LOG": str(fake.log)},
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["methods"] == ["none", "suffix", "server:plain", "server:ngram-mod", "server:ngram-simple"]
    assert any("server:draft-simple skipped" in n for n in report["notes"])
    assert report["peer"]["version"] == "version: 1 (fake)"
    argv = fake.starts()[0]["argv"]
    flags = dict(zip(argv, argv[1:], strict=False))
    assert flags["-c"] == "2048" and flags["-t"] == "1" and flags["-m"].endswith(".gguf")
    assert png.read_bytes()[:4] == b"\x89PNG" and "server:ngram-mod" in result.stdout


def real_llama_server():
    """A built llama-server: $LOCALSPEC_LLAMA_SERVER, PATH, or the one ../shared/peer/build-llama-server.sh built."""
    found = os.environ.get("LOCALSPEC_LLAMA_SERVER")
    if found:
        return found
    try:
        return str(find_llama_server())
    except PeerError:
        pass
    built = sorted(glob.glob(os.path.expanduser("~/.cache/localspec-peer/*/build/bin/llama-server")))
    return built[-1] if built else None


@pytest.mark.model
def test_real_llama_server_matches_localspec_plain(tmp_path):
    binary = real_llama_server()
    if not binary:
        pytest.skip(
            "no built llama-server (set LOCALSPEC_LLAMA_SERVER, put it on PATH, or run "
            "../shared/peer/build-llama-server.sh)"
        )
    out = tmp_path / "bench.json"
    result = run_cli(
        "bench",
        "--peer",
        f"llama-server={binary}",
        "--peer-types",
        "ngram-simple",
        "--drafters",
        "none",
        "--cases",
        "edit-rename",
        "--max-tokens",
        "32",
        "--threads",
        "1",
        "--ctx",
        "2048",
        "--json",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["methods"] == ["none", "server:plain", "server:ngram-simple"]
    ms = report["cases"][0]["methods"]
    ours, theirs = ms["none"]["output_ids"], ms["server:plain"]["output_ids"]
    assert len(theirs) == ms["server:plain"]["tokens"] > 16  # return_tokens is honoured
    assert theirs[:16] == ours[:16]  # the same greedy answer to the same token ids (near-ties may differ later)
    assert ms["server:ngram-simple"]["output_ids"][:16] == theirs[:16]
    assert (
        ms["server:plain"]["decode_tok_s"] > 0 and ms["server:plain"]["prompt_n"] == report["cases"][0]["prompt_tokens"]
    )
    assert ms["server:ngram-simple"]["ratio_to_plain"] is not None


def test_draft_eagle3_gives_the_server_the_eagle_head_and_needs_one(tmp_path, fake):
    head = tmp_path / "head.gguf"
    head.write_bytes(b"GGUF")
    config = fake.config(eagle_head=head)
    argv = config.server("draft-eagle3", tmp_path / "log").argv(1234)
    flags = dict(zip(argv, argv[1:], strict=False))
    assert flags["--spec-type"] == "draft-eagle3" and flags["-md"] == str(head)
    assert config.server("draft-simple", tmp_path / "log").argv(1)[-1] == str(fake.draft)
    with pytest.raises(PeerError, match="draft-eagle3 needs"):
        fake.config().server("draft-eagle3", tmp_path / "log")


def test_the_servers_mtp_and_mixed_types_get_their_flags_or_a_note(tmp_path, fake):
    """draft-mtp runs the GGUF's own MTP layers (no -md); ngram-mod+draft-simple is one server mixing both
    types (llama-server's fixed priority), with the draft model."""
    config = fake.config()
    mixed = config.server("ngram-mod+draft-simple", tmp_path / "log").argv(1)
    flags = dict(zip(mixed, mixed[1:], strict=False))
    assert flags["--spec-type"] == "ngram-mod,draft-simple" and flags["-md"] == str(fake.draft)
    mtp = config.server("draft-mtp", tmp_path / "log").argv(1)
    assert dict(zip(mtp, mtp[1:], strict=False))["--spec-type"] == "draft-mtp" and "-md" not in mtp


def test_the_servers_mtp_and_mixed_types_are_skipped_with_a_note_where_they_cannot_run(tmp_path, fake):
    """SmolLM2 has no MTP layers and no draft model: both types are skipped, each with its reason."""
    out = tmp_path / "bench.json"
    args = ["bench", "--peer", "llama-server", "--peer-types", "draft-mtp,ngram-mod+draft-simple"]
    args += ["--drafters", "suffix", "--cases", "explain", "--max-tokens", "4", "--threads", "1", "--ctx", "1024"]
    result = run_cli(
        *args, "--json", str(out), env={"PATH": os.environ["PATH"], "FAKE_LLAMA_SERVER_LOG": str(fake.log)}
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["methods"] == ["none", "suffix", "server:plain"]
    assert any("server:draft-mtp skipped" in n and "no MTP layers" in n for n in report["notes"])
    assert any("server:ngram-mod+draft-simple skipped" in n for n in report["notes"])


def test_n_parallel_slots_each_get_the_context(tmp_path):
    """benchmarks/concurrency.py's llama-server: N slots (-np) of n_ctx tokens each (-c is their sum)."""
    server = LlamaServer(Path("llama-server"), Path("m.gguf"), "plain", n_ctx=4096, threads=2, log_path=tmp_path / "l")
    flags = dict(zip(argv := server.argv(1), argv[1:], strict=False))
    assert flags["-np"] == "1" and flags["-c"] == "4096"
    server = LlamaServer(
        Path("llama-server"), Path("m.gguf"), "ngram-mod", n_ctx=4096, threads=2, log_path=tmp_path / "l", n_parallel=4
    )
    flags = dict(zip(argv := server.argv(1), argv[1:], strict=False))
    assert flags["-np"] == "4" and flags["-c"] == "16384" and flags["--spec-type"] == "ngram-mod"
