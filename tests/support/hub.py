"""The stand-in Hugging Face Hub with its models.toml (the `hub` fixture), GGUF bytes for it, and `localspec
list --json` read back."""

import json
import struct

import pytest

from support.cli import run_cli
from support.hubserver import Hub


def gguf_bytes(name="tiny", arch="llama", padding=300_000) -> bytes:
    """A small valid GGUF v3 file: metadata only, then filler so downloads take more than one read."""

    def s(text):
        data = text.encode()
        return struct.pack("<Q", len(data)) + data

    kvs = [
        ("general.architecture", arch),
        ("general.name", name),
        ("tokenizer.ggml.model", "gpt2"),
        ("tokenizer.ggml.pre", "tiny"),
    ]
    body = b"".join(s(k) + struct.pack("<I", 8) + s(v) for k, v in kvs)
    body += s(f"{arch}.context_length") + struct.pack("<I", 4) + struct.pack("<I", 2048)
    body += s("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 3) + s("a") + s("b") + s("c")
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs) + 2) + body + bytes(range(256)) * (padding // 256)


MODELS_TOML = """
[models.tiny]
tokenizer = "tiny"
drafts = ["tiny-draft"]
[models.tiny.gguf]
repo = "test/tiny-GGUF"
quant = "Q4"
files = { Q4 = "tiny-q4.gguf", Q8 = "tiny-q8.gguf" }

[models.tiny.torch]
repo = "test/tiny"
[models.tiny.eagle]
torch = "test/tiny-eagle"
"llama.cpp" = "test/tiny-eagle-GGUF"

[models.tiny-draft]
tokenizer = "tiny"
[models.tiny-draft.gguf]
repo = "test/tiny-draft-GGUF"
files = { Q4 = "tiny-draft-q4.gguf" }

[models.big]
[models.big.gguf]
repo = "test/big-GGUF"
files = { Q4 = "big.gguf" }

[models.dtiny]
[models.dtiny.gguf]
repo = "test/dtiny-GGUF"
files = { F32 = "dtiny-f32.gguf" }
[models.dtiny.torch]
repo = "test/dtiny"
[models.dtiny.dflash]
torch = "test/dtiny-dflash"
"llama.cpp" = "test/dtiny-dflash"

[models.mtiny]
[models.mtiny.torch]
repo = "test/tiny"
[models.mtiny.medusa]
torch = "test/tiny-medusa"
[models.mtiny.mlp]
torch = "test/tiny-mlp"

[models.ghost]
[models.ghost.gguf]
repo = "test/ghost"
files = { Q4 = "ghost.gguf" }

[models.gated]
[models.gated.gguf]
repo = "test/gated-GGUF"
files = { Q4 = "gated.gguf" }

[models.halfway]
[models.halfway.gguf]
repo = "test/tiny-GGUF"
files = { Q4 = "not-there.gguf" }
"""


@pytest.fixture
def hub(tmp_path):
    server = Hub()
    server.add("test/tiny-GGUF", "tiny-q4.gguf", gguf_bytes("tiny q4"))
    server.add("test/tiny-GGUF", "tiny-q8.gguf", gguf_bytes("tiny q8", padding=1000))
    server.add("test/tiny-draft-GGUF", "tiny-draft-q4.gguf", gguf_bytes("tiny draft", padding=5000))
    server.add("test/tiny", "config.json", b'{"model_type": "llama"}')
    server.add("test/tiny", "model.safetensors", bytes(4096))
    server.add("test/tiny", "README.md", b"not needed")
    server.add("test/tiny-eagle", "config.json", b'{"architectures": ["LlamaForCausalLMEagle3"]}')
    server.add("test/tiny-eagle", "pytorch_model.bin", bytes(2048))
    server.add("test/tiny-eagle-GGUF", "tiny-eagle3.gguf", gguf_bytes("tiny eagle3"))
    server.add("test/tiny-eagle-GGUF", "README.md", b"not needed")
    server.add("test/gated-GGUF", "gated.gguf", gguf_bytes("gated"))
    server.gated.add("test/gated-GGUF")
    # bigger than huggingface-hub's 10 MB read chunk, so a dropped connection leaves whole chunks to resume from
    server.add("test/big-GGUF", "big.gguf", gguf_bytes("big", padding=24 << 20))
    server.start()
    (tmp_path / "models.toml").write_text(MODELS_TOML)
    server.env = {
        "HF_ENDPOINT": server.url,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "LOCALSPEC_MODELS": str(tmp_path / "models.toml"),
        "LOCALSPEC_DATA": str(tmp_path / "data"),
    }
    yield server
    server.stop()


def listing(hub):
    result = run_cli("list", "--json", env=hub.env)
    assert result.returncode == 0, result.stderr
    return {row["name"]: row for row in json.loads(result.stdout)}
