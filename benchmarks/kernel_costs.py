"""What batch-invariant kernels cost: verify-window and prefill times of llama.cpp's kernel configurations.

Three configurations of one model, interleaved round by round (this machine's speed drifts by +-15%):
- default: llama.cpp's defaults (weights repacked at load where the CPU has a repacked kernel), what
  `--no-exact-guard` runs;
- unrepacked: weights left as in the file, default kernels: what a sampled turn runs under the guard;
- invariant: unrepacked weights and ggml's reference CPU kernels for forward passes: what a greedy turn
  runs under the guard (localspec/backends/llama_cpp_exact.py).
Each window of n tokens is timed on the same cached context (the prompt), then cut back. Also checks
that the invariant windows' logits equal 1-token steps' (max |difference| per window size).

    python benchmarks/kernel_costs.py MODEL.gguf [--rounds 7] [--windows 1,2,3,5,9,17,33,65] [--json OUT]
"""

from __future__ import annotations

import argparse
import inspect
import json
import statistics
import sys
import time
from pathlib import Path

from localspec.backends.llama_cpp import LlamaCppBackend
from localspec.calibrate import window_differences
from localspec.cpus import default_threads


def prompt_tokens(backend: LlamaCppBackend, tokens: int) -> list[int]:
    """A chat prompt of about `tokens` tokens: source code to summarise (past 256, where 1-token attention
    switches kernels)."""
    source = inspect.getsource(json.decoder)
    ids = backend.chat_tokens([{"role": "user", "content": "Summarise this code:\n" + source}])
    return ids[:tokens]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--windows", default="1,2,3,4,5,9,17,33,65")
    ap.add_argument("--prompt-tokens", type=int, default=600)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    windows = [int(w) for w in args.windows.split(",")]
    default = LlamaCppBackend(args.model, n_ctx=args.ctx)
    unrepacked = LlamaCppBackend(args.model, n_ctx=args.ctx, batch_invariant=True)
    configs = (("default", default, False), ("unrepacked", unrepacked, False), ("invariant", unrepacked, True))
    prompt = prompt_tokens(default, args.prompt_tokens)
    times = {name: {w: [] for w in windows} for name, _, _ in configs}
    prefill = {name: [] for name, _, _ in configs}
    for r in range(args.rounds):
        order = configs[r % 3 :] + configs[: r % 3]
        for name, backend, invariant in order:
            backend.set_batch_invariant(invariant)
            backend.truncate(0)
            t = time.perf_counter()
            backend.prefill(prompt)
            prefill[name].append(time.perf_counter() - t)
            for w in windows:
                backend.truncate(len(prompt))
                t = time.perf_counter()
                backend.forward(prompt[-w:])
                times[name][w].append(time.perf_counter() - t)
        print(f"round {r + 1}/{args.rounds}", file=sys.stderr)
    median = {name: {str(w): round(statistics.median(v) * 1e3, 2) for w, v in t.items()} for name, t in times.items()}
    unrepacked.set_batch_invariant(True)
    result = {
        "model": Path(args.model).name,
        "threads": default_threads(),
        "rounds": args.rounds,
        "prompt_tokens": len(prompt),
        "build": default.build_id(),
        "window_ms": median,
        "prefill_ms": {name: round(statistics.median(v) * 1e3) for name, v in prefill.items()},
        "invariant_over_default": {
            str(w): round(median["invariant"][str(w)] / median["default"][str(w)], 3) for w in windows
        },
        "unrepacked_over_default": {
            str(w): round(median["unrepacked"][str(w)] / median["default"][str(w)], 3) for w in windows
        },
        "invariant_max_logit_difference": window_differences(unrepacked, prompt, 24, [w for w in windows if w > 1]),
        "notes": "window_ms: median time of one forward of n tokens on a cached context of prompt_tokens; "
        "prefill_ms: the whole prompt; invariant_max_logit_difference: windows vs 1-token steps "
        "over 24 positions after the prompt, invariant kernels (0: bit-identical)",
    }
    unrepacked.set_batch_invariant(False)
    result["unrepacked_max_logit_difference"] = window_differences(
        unrepacked, prompt, 24, [w for w in windows if w > 1]
    )
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    default.close()
    unrepacked.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
