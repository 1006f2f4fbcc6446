"""`localspec pull`: download a model (and its recommended drafts) or register a local .gguf file under a name."""

from __future__ import annotations

import sys
from pathlib import Path

from localspec.errors import LocalspecError

NAMES = ("pull",)


def add_parser(sub, common) -> None:
    pull = sub.add_parser(
        "pull",
        help="download a model (and its recommended draft and EAGLE head) into the "
        "Hugging Face cache, or register a local .gguf file under a name",
    )
    pull.add_argument("model", help="a name from models.toml, or a path to a .gguf file (with --name)")
    pull.add_argument("--name", help="the name for a local .gguf file")
    pull.add_argument(
        "--backend",
        choices=["llama.cpp", "mlx", "torch"],
        help="which source to download (default: mlx on Apple silicon when there is one, else llama.cpp)",
    )
    pull.add_argument("--quant", help="GGUF quantization, e.g. Q4_K_M or Q8_0 (default: the model's in models.toml)")
    pull.add_argument("--revision", help="a branch, tag or commit of the Hub repository")
    pull.add_argument("--no-drafts", action="store_true", help="do not also pull the recommended draft and EAGLE head")


def run(args) -> int:
    from localspec.models import hub
    from localspec.models.registry import is_path

    if is_path(args.model):
        if not args.name:
            raise LocalspecError(f"pulling the local file {args.model} needs --name NAME (the alias to give it)")
        entry = hub.register_local(Path(args.model), args.name)
        print(
            f"{entry.name}: {entry.path} registered ({entry.family}, tokenizer {entry.tokenizer}); "
            f"use it with --model {entry.name}"
        )
        return 0
    from localspec.config import head_releases

    done = hub.pull(
        args.model,
        args.backend,
        args.quant,
        args.revision,
        drafts=not args.no_drafts,
        say=lambda line: print(line, file=sys.stderr, flush=True),
        heads=head_releases(),
        advice=_quant_advice,
    )
    for item in done:
        size = f" {item.size / 2**20:.0f} MB" if item.size else ""
        print(f"{item.name} ({item.backend}){size}: {item.path}")
    return 0


def _quant_advice(files: list[str], quant: str | None, name: str) -> list[str]:
    """`pull`'s advice on which quantization speculates best on this CPU (bench/quants.py, loaded only then)."""
    from localspec.bench.quants import pull_advice

    return pull_advice(files, quant, name)
