"""Cost of one target forward pass over k tokens (the verify window), k = 1..32, after a prompt of P tokens.
This curve bounds what any drafter can gain: with k tokens all accepted, speedup <= k / (cost(k)/cost(1)).

    python benchmarks/verify_cost.py --model PATH.gguf --out benchmarks/results/verify-cost-NAME.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localspec.backends.llama_cpp.backend import LlamaCppBackend  # noqa: E402
from localspec.models.registry import resolve_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--ks", default="1,2,3,4,6,8,12,16,32")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    name, path = resolve_model(args.model)
    with LlamaCppBackend(path, n_ctx=2048, n_threads=args.threads) as backend:
        prompt = (backend.tokenizer.tokenize("def f(x):\n    return x * 2\n") * 200)[: args.prompt_tokens]
        backend.prefill(prompt)
        rows = {}
        for k in [int(k) for k in args.ks.split(",")]:
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                backend.forward(prompt[:k])
                times.append(time.perf_counter() - t)
                backend.truncate(len(prompt))
            rows[k] = statistics.median(times) * 1e3
        base = rows[min(rows)]
        report = {
            "model": name,
            "prompt_tokens": args.prompt_tokens,
            "threads": args.threads,
            "date": time.strftime("%Y-%m-%d"),
            "ms": {k: round(v, 2) for k, v in rows.items()},
            "cost_ratio": {k: round(v / base, 2) for k, v in rows.items()},
            "speedup_ceiling": {k: round(k / (v / base), 2) for k, v in rows.items()},
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
