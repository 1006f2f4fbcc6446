"""Speed and memory of the suffix drafter's propose() with a large global tree.

Fills the global tree with ~200k tokens of real text (Python standard-library source, tokenized by the
model's tokenizer, cut into answer-sized pieces), then times propose() on contexts taken from other text.

    python benchmarks/suffix_speed.py --model smollm2-135m --out benchmarks/results/suffix-speed.json
    python benchmarks/suffix_speed.py --implementation Python --out benchmarks/results/suffix-speed-python.json
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localspec.backends.llama_cpp.backend import LlamaCppBackend  # noqa: E402
from localspec.drafters.suffix import tree as suffix_tree  # noqa: E402
from localspec.drafters.suffix.drafter import SuffixDrafter, SuffixOptions  # noqa: E402
from localspec.drafters.suffix.store import AnswerStore  # noqa: E402
from localspec.models.registry import resolve_model  # noqa: E402


def stdlib_text(limit_chars: int) -> str:
    """Source files of the standard library, read as text (nothing is imported)."""
    parts, total = [], 0
    for file in sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py")):
        parts.append(file.read_text(encoding="utf-8", errors="replace"))
        total += len(parts[-1])
        if total > limit_chars:
            break
    return "".join(parts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--global-tokens", type=int, default=200_000)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--k", type=int, default=8)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--implementation", choices=["C", "Python"], help="the trie to time (default: the installed one)")
    args = ap.parse_args()
    if args.implementation:  # the pure-Python fallback (suffix_trie_py.py) against the compiled trie
        suffix_tree.implementation = lambda: args.implementation
    _, path = resolve_model(args.model)
    with LlamaCppBackend(path, n_ctx=512, n_threads=1) as backend:
        tokens = backend.tokenizer.tokenize(stdlib_text(args.global_tokens * 5))
    corpus, probe = tokens[: args.global_tokens], tokens[args.global_tokens :]
    if len(probe) < 10_000:
        raise SystemExit("not enough text for probes; lower --global-tokens")

    store = AnswerStore(None, "bench", max_tokens=10**9)
    for start in range(0, len(corpus), 400):  # answer-sized pieces
        store.add(corpus[start : start + 400])
    t = time.perf_counter()
    drafter = SuffixDrafter(SuffixOptions(), store)
    build_s = time.perf_counter() - t

    prompt = probe[:1000]
    drafter.begin(prompt)
    times, lengths, context = [], [], list(prompt)
    for i in range(args.calls):  # the context grows like an answer being generated
        context.append(probe[1000 + i])
        t = time.perf_counter()
        draft = drafter.propose(context, args.k)
        times.append(time.perf_counter() - t)
        lengths.append(len(draft))
    times_us = np.array(times) * 1e6
    tree = drafter.global_tree
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "implementation": tree.implementation,
        "global_tokens": tree.n_tokens,
        "global_nodes": tree.n_nodes,
        "global_tree_bytes": tree.memory_bytes(),
        "bytes_per_cached_token": round(tree.memory_bytes() / tree.n_tokens, 1),
        "build_s": round(build_s, 3),
        "propose_calls": args.calls,
        "propose_us_median": round(float(np.median(times_us)), 2),
        "propose_us_p99": round(float(np.percentile(times_us, 99)), 2),
        "propose_us_max": round(float(times_us.max()), 2),
        "mean_draft_len": round(float(np.mean(lengths)), 3),
        "note": "propose() = extend the local tree by one token + draft from both trees + choose; Python call included",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
