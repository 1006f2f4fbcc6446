"""Two `localspec bench --json` runs of the same workload compared: are the outputs token-identical, case by
case, repeat by repeat and method by method, and how far apart are the per-kind medians of decode tok/s?

    python benchmarks/bench_compare.py BEFORE.json AFTER.json [--tolerance 0.05] [--json OUT]

Exit status 1 when an output differs or a kind's median moved by more than the tolerance (a refactor that
promised no behaviour change)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def outputs(run: dict) -> dict[tuple, list[int]]:
    return {
        (case["id"], case["repeat"], method): figures["output_ids"]
        for case in run["cases"]
        for method, figures in case["methods"].items()
    }


def medians(run: dict) -> dict[tuple, float]:
    """Median decode tok/s per (kind, method) over every case and repeat of that kind."""
    rates = defaultdict(list)
    for case in run["cases"]:
        for method, figures in case["methods"].items():
            rates[case["kind"], method].append(figures["decode_tok_s"])
    return {key: statistics.median(values) for key, values in rates.items()}


def compare(before: dict, after: dict, tolerance: float) -> dict:
    old, new = outputs(before), outputs(after)
    differ = sorted(f"{c} r{r} {m}" for (c, r, m) in old.keys() & new.keys() if old[c, r, m] != new[c, r, m])
    missing = sorted(f"{c} r{r} {m}" for (c, r, m) in old.keys() ^ new.keys())
    a, b = medians(before), medians(after)
    kinds = {
        f"{kind} {method}": {
            "before": a[kind, method],
            "after": b[kind, method],
            "ratio": b[kind, method] / a[kind, method],
        }
        for kind, method in sorted(a.keys() & b.keys())
    }
    outside = [k for k, v in kinds.items() if abs(v["ratio"] - 1) > tolerance]
    return {
        "outputs_compared": len(old.keys() & new.keys()),
        "outputs_differ": differ,
        "unmatched": missing,
        "tolerance": tolerance,
        "per_kind_median_decode_tok_s": kinds,
        "outside_tolerance": outside,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = compare(*(json.loads(p.read_text()) for p in (args.before, args.after)), args.tolerance)
    for name, v in result["per_kind_median_decode_tok_s"].items():
        print(f"{name:28s} {v['before']:7.1f} -> {v['after']:7.1f} tok/s  ({v['ratio']:.3f}x)")
    print(f"outputs: {result['outputs_compared']} compared, {len(result['outputs_differ'])} differ", end="")
    print(f"; kinds outside ±{args.tolerance:.0%}: {', '.join(result['outside_tolerance']) or 'none'}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if result["outputs_differ"] or result["unmatched"] or result["outside_tolerance"] else 0


if __name__ == "__main__":
    sys.exit(main())
