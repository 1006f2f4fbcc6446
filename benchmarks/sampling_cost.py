"""Per-row cost of sampling's candidate scan: the compiled shortlist (localspec/_shortlist.c) against numpy.

Every sampled or verified row is read once in full to find its candidates (top-k, or what min-p keeps);
the rest of the sampler works on those few. Times, on rows of Qwen2.5's vocabulary size (151,936) with
logits spread like a model's, the scan alone both ways and the whole ``SamplingParams.distribution`` at the
defaults (top-k 40, top-p 0.95, min-p 0.05, T 0.8) and with top-k off (min-p's survivors). Median of
``--repeats`` calls, in milliseconds, written as JSON.

    python benchmarks/sampling_cost.py [--vocab 151936] [--repeats 200] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from localspec import shortlist  # noqa: E402
from localspec.sampling import SamplingParams  # noqa: E402


def median_ms(call, rows, repeats: int) -> float:
    times = []
    for i in range(repeats):
        row = rows[i % len(rows)]
        start = time.perf_counter()
        call(row)
        times.append(time.perf_counter() - start)
    return round(statistics.median(times) * 1e3, 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows = [(rng.standard_normal(args.vocab) * 2.5).astype(np.float32) for _ in range(8)]
    for row in rows:  # a handful of strong candidates, as a model's row has
        row[rng.integers(0, args.vocab, 5)] += rng.uniform(8, 14, 5).astype(np.float32)
    defaults, no_top_k = SamplingParams(), SamplingParams(top_k=0)
    figures = {
        "top_k_40_c_ms": median_ms(lambda r: shortlist.top_k(r, 40), rows, args.repeats),
        "top_k_40_numpy_ms": median_ms(lambda r: shortlist.top_k(r, 40, use_c=False), rows, args.repeats),
        "min_p_scan_c_ms": median_ms(lambda r: shortlist.above(r, np.log(0.05)), rows, args.repeats),
        "min_p_scan_numpy_ms": median_ms(lambda r: shortlist.above(r, np.log(0.05), use_c=False), rows, args.repeats),
        "distribution_defaults_ms": median_ms(defaults.distribution, rows, args.repeats),
        "distribution_top_k_off_ms": median_ms(no_top_k.distribution, rows, args.repeats),
        "argmax_ms": median_ms(np.argmax, rows, args.repeats),
    }
    result = {
        "benchmark": "sampling_cost",
        "vocab": args.vocab,
        "repeats": args.repeats,
        "compiled": shortlist.compiled() is not None,
        "machine": platform.processor() or platform.machine(),
        "figures_ms": figures,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
