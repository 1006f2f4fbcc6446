"""Repacked or unrepacked weights, and what batch-invariant kernels cost: verify windows and prefill per quantization.

llama.cpp repacks Q4_0/Q4_K/IQ4_NL weights at load (its CPU "extra buffers") for faster gemm kernels; the
repacked layout is what llama-server runs. Left unrepacked, the weights keep the file's layout: llama.cpp's
other kernels (vec_dot, llamafile sgemm) compute them, and ggml's reference mode can make a window bit for bit
a 1-token step (`--exact`, localspec/backends/llama_cpp/exact.py). For each quantization (a file of another
quantization is made from MODEL by requantizing it into a temporary folder: its speed is the format's) three
configurations are timed, interleaved round by round (this machine drifts by +-15%):
- repacked: llama.cpp's defaults;
- unrepacked: weights as in the file, default kernels;
- invariant: unrepacked weights and the reference kernels for forward passes (what `--exact` greedy turns run).
Each window of n tokens is timed on the same cached context (the prompt), then cut back; the prompt's prefill
is timed whole. A typical turn (a PROMPT-token prompt prefilled, ANSWER tokens decoded) is then worked out per
layout: plain decoding, and speculation whose tokens are each accepted with probability a (the best window for
that curve, the geometric model). The layout that wins every one of these turns is the verdict for that
quantization. A second verdict is the prompt's: where unrepacked weights prefill the prompt in under PREFILL_WIN
of the repacked time, localspec prefills long prompts on an unrepacked second load of the file and decodes on the
repacked one (localspec/backends/llama_cpp/unrepacked_prefill.py). `--table` writes both verdicts for this CPU
kind into the table localspec loads weights by (localspec/backends/llama_cpp/layout.json), keeping the rows of
quantizations it did not time.

    python benchmarks/kernel_costs.py MODEL.gguf [--quants Q4_K_M,Q4_0,Q8_0] [--rounds 5] [--json OUT] [--table]
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from localspec.backends.llama_cpp.backend import LlamaCppBackend  # noqa: E402
from localspec.backends.llama_cpp.layout import TABLE, cpu_kind  # noqa: E402
from localspec.bench.quants import quant_of, requantize  # noqa: E402
from localspec.cpus import default_threads  # noqa: E402
from localspec.engine.calibrate import window_differences  # noqa: E402

WINDOWS = "1,2,3,4,5,8,9,12,16,17,24,32,33,48,64,65"
ANSWER = 400  # tokens decoded in the typical turn
ACCEPTANCE = (0.0, 0.7, 0.9)  # per-token acceptance of the typical turn's drafts (0: plain decoding)
PREFILL_WIN = 0.9  # unrepacked prefill is worth a second load of the file below this share of the repacked time


def prompt_tokens(backend: LlamaCppBackend, tokens: int) -> list[int]:
    """A chat prompt of about `tokens` tokens: source code to summarise (past 256, where 1-token attention
    switches kernels)."""
    source = inspect.getsource(json.decoder)
    ids = backend.tokenizer.chat_tokens([{"role": "user", "content": "Summarise this code:\n" + source}])
    return ids[:tokens]


def turn_ms(window_ms: dict[int, float], prefill_ms: float, a: float) -> float:
    """A typical turn's milliseconds: the prefill, then ANSWER tokens at the best window of the curve for
    drafts accepted with probability a per token (a window of n verifies n - 1 drafts and yields
    (1 - a^n) / (1 - a) tokens)."""
    rate = max((sum(a**i for i in range(n)) / ms for n, ms in window_ms.items()), default=0.0)
    return prefill_ms + ANSWER / rate


def measure(path: Path, windows: list[int], rounds: int, prompt_len: int, ctx: int, invariant: bool) -> dict:
    repacked = LlamaCppBackend(path, n_ctx=ctx, extra_buffers=True)
    unrepacked = LlamaCppBackend(path, n_ctx=ctx, extra_buffers=False)
    configs = [("repacked", repacked, False), ("unrepacked", unrepacked, False)]
    if invariant and unrepacked.capabilities.batch_invariant:
        configs.append(("invariant", unrepacked, True))
    prompt = prompt_tokens(repacked, prompt_len)
    times = {name: {w: [] for w in windows} for name, _, _ in configs}
    prefill = {name: [] for name, _, _ in configs}
    for r in range(rounds):
        order = configs[r % len(configs) :] + configs[: r % len(configs)]
        for name, backend, reference in order:
            backend.set_batch_invariant(reference)
            backend.truncate(0)
            t = time.perf_counter()
            backend.prefill(prompt)
            prefill[name].append(time.perf_counter() - t)
            for w in windows:
                backend.truncate(len(prompt))
                t = time.perf_counter()
                backend.forward(prompt[-w:])
                times[name][w].append(time.perf_counter() - t)
        print(f"  {path.name}: round {r + 1}/{rounds}", file=sys.stderr, flush=True)
    window_ms = {n: {str(w): round(statistics.median(v) * 1e3, 2) for w, v in t.items()} for n, t in times.items()}
    prefill_ms = {name: round(statistics.median(v) * 1e3) for name, v in prefill.items()}
    turns = {
        name: {
            f"a={a}": round(turn_ms({int(w): ms for w, ms in window_ms[name].items()}, prefill_ms[name], a))
            for a in ACCEPTANCE
        }
        for name in window_ms
    }
    wins = all(turns["unrepacked"][k] < turns["repacked"][k] for k in turns["repacked"])
    out = {
        "file": path.name,
        "build": repacked.build_id(),
        "prompt_tokens": len(prompt),
        "window_ms": window_ms,
        "prefill_ms": prefill_ms,
        "turn_ms": turns,
        "verdict": "unrepacked" if wins else "repacked",
        "prefill_verdict": "unrepacked"
        if prefill_ms["unrepacked"] < PREFILL_WIN * prefill_ms["repacked"]
        else "repacked",
        "unrepacked_over_repacked": {
            str(w): round(window_ms["unrepacked"][str(w)] / window_ms["repacked"][str(w)], 3) for w in windows
        },
    }
    if "invariant" in window_ms:
        out["invariant_over_repacked"] = {
            str(w): round(window_ms["invariant"][str(w)] / window_ms["repacked"][str(w)], 3) for w in windows
        }
        unrepacked.set_batch_invariant(True)
        out["invariant_max_logit_difference"] = window_differences(unrepacked, prompt, 16, [2, 4, 9, 17, 33])
        unrepacked.set_batch_invariant(False)
    repacked.close()
    unrepacked.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--quants", default="", help="quantizations to time (default: the file's own)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--windows", default=WINDOWS)
    ap.add_argument("--prompt-tokens", type=int, default=600)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--no-invariant", action="store_true", help="leave out the batch-invariant configuration")
    ap.add_argument("--json")
    ap.add_argument("--table", action="store_true", help=f"write the verdicts for this CPU kind into {TABLE.name}")
    args = ap.parse_args(argv)
    windows = [int(w) for w in args.windows.split(",")]
    source = Path(args.model)
    own = quant_of(source)
    quants = [q.strip() for q in args.quants.split(",") if q.strip()] or [own]
    result = {
        "model": source.name,
        "threads": default_threads(),
        "cpu_kind": cpu_kind(),
        "rounds": args.rounds,
        "date": time.strftime("%Y-%m-%d"),
        "answer_tokens": ANSWER,
        "notes": "window_ms: median ms of one forward of n tokens on a cached context of prompt_tokens; prefill_ms: "
        "the whole prompt; turn_ms: prefill + answer_tokens decoded at the best window for per-token acceptance a "
        "(a=0.0: plain decoding); verdict: the layout that wins every turn; prefill_verdict: the layout that "
        "prefills the prompt in under PREFILL_WIN of the other's time (else repacked); files other than the "
        "model's own quantization were requantized from it (speed only)",
        "quants": {},
    }
    with tempfile.TemporaryDirectory(prefix="kernel-costs-") as tmp:
        for quant in quants:
            path = source if quant == own else requantize(source, quant, Path(tmp) / f"{quant}.gguf")
            print(f"{quant}: {path}", file=sys.stderr, flush=True)
            result["quants"][quant] = measure(
                path, windows, args.rounds, args.prompt_tokens, args.ctx, not args.no_invariant
            )
            result["quants"][quant]["requantized"] = quant != own
            if quant != own:
                path.unlink()
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    if args.table:
        table = json.loads(TABLE.read_text()) if TABLE.is_file() else {}
        table.setdefault("notes", "the weight layout llama.cpp loads by default, per CPU kind and quantization")
        rows = table.setdefault("layout", {}).setdefault(result["cpu_kind"], {})
        for q, r in result["quants"].items():
            rows[q] = {
                "layout": r["verdict"],
                "turn_ms": r["turn_ms"],
                "prefill": r["prefill_verdict"],
                "prefill_ms": r["prefill_ms"],
                "measured": result["date"],
                "model": result["model"],
            }
        TABLE.write_text(json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
