"""`localspec train-drafter` (and its old name `train-eagle`): distil a drafter head for a local model."""

from __future__ import annotations

from localspec.drafters.table import DRAFTERS

NAMES = ("train-drafter", "train-eagle")


def add_parser(sub, common) -> None:
    for command in NAMES:
        _train_parser(sub, command)


def _train_parser(sub, command: str) -> None:
    train = sub.add_parser(
        command,
        help="distil a drafter head (EAGLE, DFlash, Medusa, MLP speculator) for a local model from its own "
        "hidden states (PyTorch, CPU or CUDA)"
        + ("; the same as train-drafter --kind eagle" if command == "train-eagle" else ""),
    )
    train.add_argument("--model", "-m", help="a name from models.toml, a .gguf file or a Hugging Face folder")
    train.add_argument(
        "--data",
        required=True,
        help='corpus: JSONL with {"messages": [...]} or {"text": ...} per line, or a plain text file',
    )
    train.add_argument("--out", required=True, help="folder for the head (config.json + model.safetensors)")
    train.add_argument("--minutes", type=float, default=30.0, help="time budget, feature extraction included (30)")
    train.add_argument("--epochs", type=int, default=8, help="at most this many passes over the corpus (8)")
    train.add_argument(
        "--max-steps",
        type=int,
        default=0,
        help="stop after this many optimiser steps (0: --epochs and --minutes decide)",
    )
    train.add_argument("--seq-len", type=int, default=512, help="training window in tokens (512)")
    train.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (1e-3, cosine schedule)")
    train.add_argument("--max-corpus-tokens", type=int, default=0, help="use at most this many tokens (0: all)")
    train.add_argument(
        "--threads", type=int, help="CPU threads (default: physical performance cores this process may use)"
    )
    train.add_argument("--seed", type=int, help="initialisation and data order")
    train.add_argument(
        "--kind",
        default="eagle",
        choices=[kind.name for kind in DRAFTERS.values() if kind.trains],
        help="eagle: an EAGLE head of --layout (--drafter eagle, or dflash); medusa: Medusa heads "
        "(--drafter medusa --medusa-head OUT, torch); mlp: an MLP speculator (--drafter mlp --mlp-head OUT, torch)",
    )
    train.add_argument(
        "--layout",
        default="eagle1",
        choices=("eagle1", "eagle3", "dflash"),
        help="eagle1: reads the last layer's features (torch, MLX); eagle3: three layers' inputs and a draft "
        "vocabulary (torch, MLX, and llama.cpp after `convert-eagle`); dflash: a block-diffusion head that "
        "drafts a block per pass (--drafter dflash: torch, and llama.cpp, which converts it once)",
    )


def run(args) -> int:
    from localspec.train.driver import run_train_eagle

    run_train_eagle(args, log=lambda line: print(line, flush=True))
    return 0
