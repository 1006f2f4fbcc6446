"""What every command's parser shares: the one-line-error parser, and the model, speculation, sampling and
structured-output options of the commands that load a model (each drafter's own flags among them)."""

from __future__ import annotations

import argparse

from localspec.config import DEFAULT_DRAFTER, MAX_TOKENS
from localspec.drafters.table import DRAFTERS
from localspec.sampling import SamplingParams


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + error
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def drafter_flags(parser: argparse.ArgumentParser) -> None:
    """Each drafter's options, as its module declares them (localspec/drafters/table.py)."""
    for kind in DRAFTERS.values():
        infos = [i for i in kind.option_infos() if i.flag]
        if not infos:
            continue
        g = parser.add_argument_group(f"--drafter {kind.name}: {kind.summary}")
        for info in infos:
            default = (
                "" if info.default is None else f" ({info.default:g})" if info.kind is float else f" ({info.default})"
            )
            metavar = "N" if info.kind is int else "X" if info.kind is float else info.name.upper()
            g.add_argument(info.flag, dest=info.dest, type=info.kind, metavar=metavar, help=info.help + default)


def common_parser() -> Parser:
    """The options of every command that loads a model, as a parent parser."""
    common = Parser(add_help=False)
    g = common.add_argument_group("model")
    g.add_argument(
        "--model",
        "-m",
        help="a model name from models.toml or a path to a .gguf file (default: the registry's default, SmolLM2-135M)",
    )
    g.add_argument(
        "--ctx",
        type=int,
        help="context length in tokens (default: the model's trained context, as far as its KV cache "
        "fits in half the memory available)",
    )
    g.add_argument("--threads", type=int, help="CPU threads (default: physical performance cores this process may use)")
    g.add_argument(
        "--backend",
        choices=["llama.cpp", "torch", "mlx"],
        help="llama.cpp (GGUF on CPU/GPU), torch (a GGUF or Hugging Face folder; CUDA when present) or "
        "mlx (an MLX folder; Apple silicon). Default: mlx on Apple silicon when the model has an "
        "MLX source, else llama.cpp",
    )
    g.add_argument(
        "--gpu-layers",
        type=int,
        help="layers to offload with a CUDA/Metal/Vulkan build of llama.cpp (-1: all; default: all on such a "
        "build, none on a CPU build)",
    )
    g.add_argument(
        "--no-cuda-graphs",
        action="store_true",
        help="torch backend on CUDA: run every step eagerly instead of replaying captured CUDA graphs",
    )
    g.add_argument(
        "--think",
        action=argparse.BooleanOptionalAction,
        help="reasoning models whose chat template has a thinking switch (enable_thinking: Qwen3, SmolLM3, "
        "GLM-4.5, ...): think before answering, or not (default: the template's own choice)",
    )
    g = common.add_argument_group("speculation")
    g.add_argument(
        "--drafter",
        "-d",
        help=f"one of: {', '.join(DRAFTERS)}, or a chain COPY+MODEL such as suffix+draft (default: the model's "
        f"first in models.toml, else {DEFAULT_DRAFTER})",
    )
    g.add_argument(
        "--draft-tokens",
        "-k",
        help="tokens drafted per step: a number fixes it; 'auto' (the default) lets a controller pick "
        "0..64 each step from measured costs and the drafter's confidence; 'auto:N' caps it at N",
    )
    g.add_argument(
        "--exact",
        action=argparse.BooleanOptionalAction,
        help="bit-identical greedy output: verify windows computed as plain 1-token steps (llama.cpp on the CPU: "
        "batch-invariant kernels, weights loaded unrepacked; elsewhere a near-tie guard). Slower; off by default, "
        "when greedy output may differ from a plain run where batched kernels round a near-tie the other way, as "
        "in every engine. Also LOCALSPEC_EXACT=1, `exact = true` in config.toml or a model's models.toml entry",
    )
    g.add_argument("--no-exact-guard", action="store_true", help=argparse.SUPPRESS)  # the old spelling: a notice
    drafter_flags(common)
    g = common.add_argument_group("sampling (llama.cpp's defaults; --temperature 0 is greedy)")
    g.add_argument("--temperature", "-t", type=float, help=f"{SamplingParams.temperature} (bench: 0); 0 is greedy")
    g.add_argument("--top-k", type=int, help=f"{SamplingParams.top_k}; 0 turns it off")
    g.add_argument("--top-p", type=float, help=f"{SamplingParams.top_p}; 1 turns it off")
    g.add_argument("--min-p", type=float, help=f"{SamplingParams.min_p}; 0 turns it off")
    g.add_argument("--seed", type=int, help="make sampling reproducible")
    g.add_argument("--max-tokens", "-n", type=int, help=f"most tokens in one answer ({MAX_TOKENS})")
    g.add_argument(
        "--stop",
        action="append",
        default=[],
        help="stop when the answer contains this text (repeatable); end-of-turn tokens always stop",
    )
    g.add_argument("--system", help="system prompt")
    g = common.add_argument_group("structured output (docs/structured.md)").add_mutually_exclusive_group()
    g.add_argument("--json-schema", metavar="FILE|JSON", help="answer with JSON that follows this JSON Schema")
    g.add_argument("--grammar", metavar="FILE", help="answer in this grammar: GBNF (llama.cpp's), or Lark")
    return common
