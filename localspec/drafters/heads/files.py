"""Where a drafter head is: a folder or file on disk, or a Hub repo already in the Hugging Face cache."""

from __future__ import annotations

from pathlib import Path

from localspec.errors import ConfigError


def head_folder(spec: str) -> Path:
    """A head folder on disk, or a Hub repo id already downloaded into the Hugging Face cache."""
    path = Path(spec).expanduser()
    if path.exists() or spec.startswith((".", "/", "~")) or spec.count("/") != 1:
        return path
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(spec, local_files_only=True))
    except Exception as exc:
        raise ConfigError(
            f"EAGLE head {spec!r} is neither a folder nor a downloaded Hub repo ({type(exc).__name__}); "
            f"`localspec pull MODEL --backend torch` downloads a model's head"
        ) from exc


def is_gguf_head(spec: str | Path) -> bool:
    """True for a GGUF file (a llama.cpp head), False for a folder (the Hugging Face layout) or anything else."""
    try:
        with Path(spec).expanduser().open("rb") as f:
            return f.read(4) == b"GGUF"
    except OSError:
        return False
