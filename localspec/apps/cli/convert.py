"""`localspec convert-eagle | convert-dflash`: write a Hugging Face head as the GGUF llama.cpp runs."""

from __future__ import annotations

from pathlib import Path

CONVERTERS = (
    ("convert-eagle", "an EAGLE-3 head", "model.safetensors or pytorch_model.bin"),
    ("convert-dflash", "a DFlash or DSpark head", "*.safetensors"),
)
NAMES = tuple(command for command, _, _ in CONVERTERS)


def add_parser(sub, common) -> None:
    for command, what, weights in CONVERTERS:
        conv = sub.add_parser(
            command, help=f"write {what} (Hugging Face folder) as the GGUF llama.cpp runs, for one target model"
        )
        conv.add_argument("head", help=f"the head's folder (config.json + {weights})")
        conv.add_argument("--target", "-m", required=True, help="the target: a name from models.toml or a .gguf file")
        conv.add_argument("--out", "-o", required=True, help="the GGUF file to write")
        conv.add_argument("--type", default="f16", choices=("f16", "f32"), help="weight type of the matrices (f16)")


def run(args) -> int:
    return _convert_eagle(args) if args.command == "convert-eagle" else _convert_dflash(args)


def _convert_eagle(args) -> int:
    from localspec.drafters.eagle.gguf import convert_eagle
    from localspec.models.registry import load_registry, resolve_model

    name, target = resolve_model(args.target, load_registry())
    written = convert_eagle(Path(args.head), target, Path(args.out), args.type)
    print(
        f"wrote {args.out}: EAGLE-3 head for {name}, layers {written['layers']}, "
        f"draft vocabulary {written['draft_vocab']}; run it with --backend llama.cpp --eagle-head {args.out}"
    )
    return 0


def _convert_dflash(args) -> int:
    from localspec.drafters.dflash.gguf import convert_dflash
    from localspec.models.registry import load_registry, resolve_model

    name, target = resolve_model(args.target, load_registry())
    written = convert_dflash(Path(args.head), target, Path(args.out), args.type)
    flag = "--dspark-head" if written["kind"] == "dspark" else "--dflash-head"
    print(
        f"wrote {args.out}: {written['kind']} head for {name}, target layers {written['layers']}, blocks of "
        f"{written['block_size']}; run it with --backend llama.cpp --drafter {written['kind']} {flag} {args.out}"
    )
    return 0
