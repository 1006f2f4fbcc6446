"""`localspec run | chat`: the command line. Every user-facing error is one line and a non-zero exit."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from localspec import __version__
from localspec.config import CACHE_RAM_MIB, CACHE_RAM_SHARE, DEFAULT_DRAFTER, MAX_TOKENS
from localspec.drafters.table import DRAFTERS
from localspec.errors import LocalspecError
from localspec.sampling import SamplingParams


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not usage + error
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _drafter_flags(parser: argparse.ArgumentParser) -> None:
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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="localspec",
        description="Local chat with speculative decoding: faster answers from the model's own distribution "
        "(greedy output may differ from a plain run at near-ties, as in every engine; --exact makes it "
        "bit-identical).",
    )
    parser.add_argument("--version", action="version", version=f"localspec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    common = _Parser(add_help=False)
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
    _drafter_flags(common)
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

    run = sub.add_parser("run", parents=[common], help="answer one prompt and print the turn's stats")
    run.add_argument("prompt", help="the user message ('-' reads it from stdin)")
    run.add_argument("--json", action="store_true", help="print the answer and its stats as one JSON object")

    sim = sub.add_parser(
        "simulate",
        parents=[common],
        help="replay recorded answers through a drafter against a perfect oracle (no decoding)",
    )
    sim.add_argument(
        "file",
        help='JSONL: per line {"messages": [...]} ending with the assistant\'s answer, '
        'or {"prompt": ..., "answer": ...}',
    )
    sim.add_argument(
        "--cost-curve",
        help="JSON from benchmarks/verify_cost.py: also predict the speedup on the machine it was measured on",
    )

    bench = sub.add_parser(
        "bench", parents=[common], help="time drafters against plain decoding on a workload; prints a table per kind"
    )
    bench.add_argument(
        "--drafters",
        default="none,ngram,suffix",
        help="comma-separated methods: drafter names, NAME@K for a fixed K, eagle#N for EAGLE trees "
        "of N tokens, NAME+exact with bit-identical greedy output (--exact) (default: none,ngram,suffix)",
    )
    bench.add_argument("--prompts", help="workload JSONL in the ../shared/bench format (default: a small built-in one)")
    bench.add_argument("--cases", help="comma-separated case ids to run (default: all)")
    bench.add_argument("--repeats", type=int, default=1, help="run the workload this many times (noisy machines)")
    bench.add_argument("--json", dest="json_out", metavar="OUT", help="write every figure to this JSON file")
    bench.add_argument("--plot", metavar="OUT.png", help="bar chart of the ratios to plain (needs matplotlib)")
    bench.add_argument(
        "--quants",
        nargs="?",
        const="",
        metavar="Q4_0,Q4_K_M,...",
        help="instead of drafters: time verify windows of each quantization of --model and say which speculates "
        "best on this CPU (default: those on disk; one that is not is made for the timing by requantizing the "
        "file on disk, in a temporary folder)",
    )
    bench.add_argument("--quant-rounds", type=int, default=6, help="--quants: timed rounds per window size (6)")
    bench.add_argument(
        "--concurrency",
        metavar="1,2,4",
        help="instead of one request at a time: N requests at once for each N, answered as `serve --parallel N` "
        "answers them (with --peer: llama-server -np N); aggregate tok/s, time to first token per request; "
        "--ctx is each request's context (default 4096)",
    )
    bench.add_argument(
        "--peer",
        metavar="llama-server[=PATH]",
        help="also measure llama.cpp's own llama-server on the same prompts: PATH is its binary "
        "(or folder); default: llama-server on PATH",
    )
    bench.add_argument(
        "--peer-types",
        default="plain,ngram-mod,ngram-simple,draft-simple",
        help="--peer: llama-server speculation types, methods server:TYPE; draft-eagle3 uses --eagle-head "
        "(a GGUF); draft-simple uses --draft-model or the model's first draft (default: plain,ngram-mod,ngram-simple,"
        "draft-simple; plain is always run)",
    )

    cal = sub.add_parser(
        "calibrate",
        parents=[common],
        help="measure how verify windows round against 1-token steps for this model and build: --exact's "
        "near-tie margin, or a check of its batch-invariant kernels (cached)",
    )
    cal.add_argument("--positions", type=int, default=512, help="positions to measure (512)")

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

    ls = sub.add_parser("list", help="the models localspec knows, what is downloaded, and which drafters fit")
    ls.add_argument("--json", action="store_true", help="print JSON")

    rm = sub.add_parser("rm", help="delete a model's downloaded files from the Hugging Face cache")
    rm.add_argument("model", help="a name from models.toml")

    for command in ("train-drafter", "train-eagle"):
        _train_parser(sub, command)

    converters = (
        ("convert-eagle", "an EAGLE-3 head", "model.safetensors or pytorch_model.bin"),
        ("convert-dflash", "a DFlash or DSpark head", "*.safetensors"),
    )
    for command, what, weights in converters:
        conv = sub.add_parser(
            command, help=f"write {what} (Hugging Face folder) as the GGUF llama.cpp runs, for one target model"
        )
        conv.add_argument("head", help=f"the head's folder (config.json + {weights})")
        conv.add_argument("--target", "-m", required=True, help="the target: a name from models.toml or a .gguf file")
        conv.add_argument("--out", "-o", required=True, help="the GGUF file to write")
        conv.add_argument("--type", default="f16", choices=("f16", "f32"), help="weight type of the matrices (f16)")

    export = sub.add_parser(
        "export",
        help="print the command that serves MODEL with the same speculation on vLLM or SGLang (past one machine)",
    )
    export.add_argument("model", help="a name from models.toml (with a Hugging Face checkpoint)")
    export.add_argument("--engine", required=True, choices=("vllm", "sglang"), help="the cluster engine")
    export.add_argument(
        "--drafter",
        help="suffix, ngram, draft, eagle, mtp, dflash or none (default: the model's first that the engine has)",
    )
    export.add_argument(
        "--draft-tokens",
        "-k",
        type=int,
        help="K (default: what the controller settled on in your saved chats of this model and drafter)",
    )

    conf = sub.add_parser(
        "config",
        parents=[common],
        help="print every setting a run with these flags would use and where it comes from "
        "(flag, environment, config.toml, models.toml, default); loads no model",
    )
    conf.add_argument("--json", action="store_true", help="print JSON")

    serve = sub.add_parser(
        "serve",
        parents=[common],
        help="serve an OpenAI-compatible API (/v1/chat/completions, /v1/completions, /v1/models, /health, "
        "/metrics) with speculative decoding",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1; others need --api-key)")
    serve.add_argument("--port", type=int, default=8088, help="port (8088)")
    serve.add_argument("--api-key", help="require Authorization: Bearer KEY (needed off loopback)")
    serve.add_argument("--cors", action="store_true", help="send CORS headers (browsers on other origins)")
    serve.add_argument(
        "--cache-ram",
        type=int,
        metavar="MIB",
        help=f"RAM for saved conversation states, so that clients taking turns prefill only new tokens "
        f"(default: {CACHE_RAM_SHARE * 100:.0f}%% of the memory free after loading, at most {CACHE_RAM_MIB}; "
        f"0: keep only the live one)",
    )
    serve.add_argument(
        "--no-persist", action="store_true", help="keep served content off disk (the suffix cache is read, not written)"
    )
    serve.add_argument(
        "--parallel",
        type=int,
        default=1,
        metavar="N",
        help="answer N requests at once, their steps batched together; the context is split N ways (llama.cpp; "
        "default 1: one at a time, with conversation states in RAM)",
    )

    chat = sub.add_parser("chat", parents=[common], help="multi-turn chat")
    chat.add_argument("--plain", action="store_true", help="line-based chat (also used when not on a terminal)")
    chat.add_argument(
        "--resume", nargs="?", const="latest", metavar="ID", help="continue a saved chat (default: the most recent one)"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from localspec.apps import commands

        return {
            "run": commands.run_command,
            "chat": commands.chat_command,
            "simulate": commands.simulate_command,
            "bench": commands.bench_command,
            "pull": commands.pull_command,
            "list": commands.list_command,
            "rm": commands.rm_command,
            "train-drafter": commands.train_eagle_command,
            "train-eagle": commands.train_eagle_command,
            "convert-eagle": commands.convert_eagle_command,
            "convert-dflash": commands.convert_dflash_command,
            "calibrate": commands.calibrate_command,
            "config": commands.config_command,
            "export": commands.export_command,
            "serve": commands.serve_command,
        }[args.command](args)
    except LocalspecError as exc:
        print(f"localspec: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


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


if __name__ == "__main__":
    sys.exit(main())
